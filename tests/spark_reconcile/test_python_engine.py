"""The Python engine (no JVM) against the Spark job: the same dataset through both gives the
same outputs — every class, a plain consumer group and a fan-out over two groups, dead and
retried letters — and ``auto`` picks Python for a small input without importing PySpark."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sqlalchemy import create_engine, insert

from bench.reconcile_data import GROUP, TOPIC, generate
from postbox.outbox.tables import message_log, message_processed, message_stub
from postbox.spark_reconcile import ReconcileOptions, choose_engine, python_classify
from postbox.spark_reconcile.job import run_reconciliation
from postbox.spark_reconcile.python_engine import run_python_reconciliation
from postbox.spark_reconcile.report_html import render_report
from postbox.storage_engine import CommitLogConfig, Message, MessageStore, StoreConfig
from postbox.storage_engine.formats import decode_config_json, encode_config_json
from postbox.storage_engine.formats.topic_names import dead_letter_topic, retry_topic

STUBS = 3_000
SHIPPING = "bench-shipping"
GRACE_MS = 60_000
SEGMENT_SIZE_BYTES = 256 * 1024
FANOUT = {  # id suffix -> (status, queue offset past the groups?, processed by, extra)
    "F1": ("unconfirmed", True, (GROUP, SHIPPING), None),
    "F2": ("unconfirmed", True, (GROUP,), None),            # lost for shipping
    "F3": ("unconfirmed", True, (GROUP,), "dlq"),           # dead-lettered for shipping
    "F4": ("void", True, (), "log"),                        # exhausted for both
    "F5": ("unconfirmed", True, (GROUP,), "log"),           # in flight for shipping
    "F6": ("unconfirmed", False, (), "retry"),              # billing in flight, shipping pending
    "F7": ("confirmed", True, (), None),                    # confirmed for both
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The generated dataset, plus a second group on the topic and fan-out stubs."""
    base = tmp_path_factory.mktemp("engines")
    url = f"sqlite:///{base / 'app.db'}"
    now = datetime.now(UTC).replace(tzinfo=None)
    generate(base / "store", url, STUBS, seed=5, segment_size_bytes=SEGMENT_SIZE_BYTES, now=now)
    offsets_path = base / "store" / "config" / "consumerOffset.json"
    document = decode_config_json(offsets_path.read_text(encoding="utf-8"))
    committed = {int(q): int(o) for q, o in document["offsetTable"][f"{TOPIC}@{GROUP}"].items()}
    stubs, logs, processed = [], [], []
    with MessageStore.open(StoreConfig(root_dir=base / "store", commit_log=CommitLogConfig(
            segment_size_bytes=SEGMENT_SIZE_BYTES))) as store:
        for suffix, (status, past, done_by, extra) in FANOUT.items():
            message_id = f"FANOUT-{suffix}"
            put = store.put_message(Message(TOPIC, b"{}", unique_key=message_id), queue_id=0)
            offset = committed[0] - 1 if past else put.queue_offset
            if extra in ("dlq", "retry"):
                topic = dead_letter_topic(SHIPPING) if extra == "dlq" else retry_topic(GROUP)
                store.put_message(Message(topic, b"{}", unique_key=message_id,
                                          properties={"RETRY_TOPIC": TOPIC,
                                                      "DLQ_REASON": "declined"}))
            created = now - timedelta(hours=2)
            stubs.append({"message_id": message_id, "topic": TOPIC, "content": b"{}",
                          "status": status, "send_count": 1, "queue_id": 0,
                          "queue_offset": offset, "published_at": created,
                          "created_at": created, "updated_at": created,
                          "confirmed_at": created if status == "confirmed" else None,
                          "expected_groups": f"{GROUP} {SHIPPING}"})
            processed += [{"consumer_group": group, "message_id": message_id, "topic": TOPIC,
                           "processed_at": created} for group in done_by]
            if extra == "log":
                logs.append({"consumer_group": SHIPPING, "message_id": message_id,
                             "topic": TOPIC, "queue_id": 0, "queue_offset": offset,
                             "created_at": created})
    document["offsetTable"][f"{TOPIC}@{SHIPPING}"] = dict(
        document["offsetTable"][f"{TOPIC}@{GROUP}"])
    offsets_path.write_text(encode_config_json(document), encoding="utf-8")
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(insert(message_stub), stubs)
        connection.execute(insert(message_log), logs)
        connection.execute(insert(message_processed), processed)
    engine.dispose()
    return {"store": base / "store", "url": url, "now": now}


def options(dataset: dict, out: Path, **more) -> ReconcileOptions:
    return ReconcileOptions(store_dir=dataset["store"], database_url=dataset["url"],
                            out_dir=out, grace_ms=GRACE_MS, as_of=dataset["now"], **more)


def parquet_rows(directory: Path) -> list[tuple]:
    table = pq.read_table(directory)
    return sorted(tuple(row.values()) for row in table.to_pylist())


def test_both_engines_write_the_same_outputs(spark, dataset: dict, tmp_path: Path) -> None:
    on_spark = run_reconciliation(options(dataset, tmp_path / "spark"), spark=spark).summary
    on_python = run_python_reconciliation(options(dataset, tmp_path / "python")).summary

    assert all(on_python.counts.values()), on_python.counts  # every class is present
    spark_csv = (tmp_path / "spark" / "classification.csv").read_text().splitlines()
    python_csv = (tmp_path / "python" / "classification.csv").read_text().splitlines()
    assert spark_csv[0] == python_csv[0]
    assert sorted(spark_csv[1:]) == sorted(python_csv[1:])
    assert (parquet_rows(tmp_path / "spark" / "classification")
            == parquet_rows(tmp_path / "python" / "classification"))
    spark_json = json.loads((tmp_path / "spark" / "summary.json").read_text())
    python_json = json.loads((tmp_path / "python" / "summary.json").read_text())
    for key in ("duration_s", "inputs"):
        del spark_json[key], python_json[key]
    assert spark_json == python_json
    same_run = replace(on_spark, inputs=on_python.inputs, duration_s=on_python.duration_s)
    assert render_report(same_run) == (tmp_path / "python" / "report.html").read_text()
    groups = {(row["message_id"], row["consumer_group"]): row["classification"]
              for row in csv.DictReader((tmp_path / "python" / "classification.csv").open())
              if row["message_id"].startswith("FANOUT-")}
    assert groups == {
        ("FANOUT-F1", GROUP): "confirmed", ("FANOUT-F1", SHIPPING): "confirmed",
        ("FANOUT-F2", GROUP): "confirmed", ("FANOUT-F2", SHIPPING): "lost",
        ("FANOUT-F3", GROUP): "confirmed", ("FANOUT-F3", SHIPPING): "dead_lettered",
        ("FANOUT-F4", GROUP): "exhausted", ("FANOUT-F4", SHIPPING): "exhausted",
        ("FANOUT-F5", GROUP): "confirmed", ("FANOUT-F5", SHIPPING): "in_flight",
        ("FANOUT-F6", GROUP): "in_flight", ("FANOUT-F6", SHIPPING): "pending",
        ("FANOUT-F7", GROUP): "confirmed", ("FANOUT-F7", SHIPPING): "confirmed"}


def test_auto_picks_python_for_a_small_input_without_a_jvm(dataset: dict,
                                                           tmp_path: Path) -> None:
    assert choose_engine(options(dataset, tmp_path, engine="auto")) == "python"
    assert choose_engine(options(dataset, tmp_path, engine="auto",
                                 python_max_stubs=STUBS)) == "spark"
    script = f"""
import json, sys
import psutil
from datetime import datetime
from pathlib import Path
from postbox.spark_reconcile import ReconcileOptions, reconcile
result = reconcile(ReconcileOptions(store_dir=Path({str(dataset["store"])!r}),
                                    database_url={dataset["url"]!r},
                                    out_dir=Path({str(tmp_path / "auto")!r}), engine="auto",
                                    grace_ms={GRACE_MS}))
children = [child.name() for child in psutil.Process().children(recursive=True)]
print(json.dumps({{"pyspark": any(name.startswith("pyspark") for name in sys.modules),
                  "children": children, "master": result.summary.inputs["master"],
                  "stubs": result.summary.stubs}}))
"""
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                               timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    found = json.loads(completed.stdout)
    assert found["pyspark"] is False  # no SparkSession can exist without PySpark imported
    assert not [name for name in found["children"] if "java" in name]
    assert found["master"] == "python"
    assert found["stubs"] == STUBS + 2 * len(FANOUT)  # a row per (stub, group)
    assert (tmp_path / "auto" / "report.html").is_file()


def test_an_empty_outbox_gives_the_header_alone_and_zero_counts(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    engine = create_engine(url)
    message_stub.metadata.create_all(engine)
    engine.dispose()
    config = StoreConfig(root_dir=tmp_path / "store")
    with MessageStore.open(config) as store:
        store.put_message(Message(TOPIC, b"sent without the outbox"), 0)

    result = run_python_reconciliation(ReconcileOptions(
        store_dir=tmp_path / "store", database_url=url, out_dir=tmp_path / "out"))

    assert result.exit_code == 0 and result.summary.complete
    assert set(result.summary.counts.values()) == {0} and result.summary.stubs == 0
    lines = (tmp_path / "out" / "classification.csv").read_text().splitlines()
    assert lines == [",".join(python_classify.COLUMNS)]
    assert pq.read_table(tmp_path / "out" / "classification").schema == python_classify.SCHEMA
