"""Incremental reconciliation (Python engine): after a full run, new traffic and an incremental
run give the classification a full run gives, while reading fewer stub rows and segments."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
from sqlalchemy import create_engine, insert, select, update

from bench.reconcile_data import DLQ_TOPIC, TOPIC, generate
from postbox.outbox.tables import message_stub
from postbox.spark_reconcile import ReconcileOptions
from postbox.spark_reconcile.incremental import STATE_NAME
from postbox.spark_reconcile.python_engine import run_python_reconciliation
from postbox.storage_engine import CommitLogConfig, Message, MessageStore, StoreConfig

STUBS = 2_000
NEW_STUBS = 40
SEGMENT_SIZE_BYTES = 128 * 1024
GRACE_MS = 60_000


def run(base: Path, out: str, as_of: datetime, incremental: bool):
    return run_python_reconciliation(ReconcileOptions(
        store_dir=base / "store", database_url=f"sqlite:///{base / 'app.db'}",
        out_dir=base / out, grace_ms=GRACE_MS, as_of=as_of, incremental=incremental))


def rows(directory: Path) -> list[tuple]:
    return sorted(tuple(row.values()) for row in pq.read_table(directory).to_pylist())


def new_traffic(base: Path, at: datetime) -> None:
    """New stubs (confirmed and not), an old pending stub confirmed, an old void stub
    dead-lettered now."""
    engine = create_engine(f"sqlite:///{base / 'app.db'}")
    config = StoreConfig(root_dir=base / "store",
                         commit_log=CommitLogConfig(segment_size_bytes=SEGMENT_SIZE_BYTES))
    with engine.begin() as connection, MessageStore.open(config) as store:
        void = connection.execute(select(message_stub.c.message_id).where(
            message_stub.c.status == "void").limit(1)).scalar_one()
        pending = connection.execute(select(message_stub.c.message_id).where(
            message_stub.c.status == "unconfirmed").order_by(
            message_stub.c.created_at.desc()).limit(1)).scalar_one()
        connection.execute(update(message_stub).where(message_stub.c.message_id == pending)
                           .values(status="confirmed", confirmed_at=at, updated_at=at))
        store.put_message(Message(DLQ_TOPIC, b"{}", unique_key=void,
                                  properties={"RETRY_TOPIC": TOPIC, "DLQ_REASON": "late"}))
        stubs = []
        for number in range(NEW_STUBS):
            message_id = f"NEW{number:029d}"
            put = store.put_message(Message(TOPIC, b"{}", unique_key=message_id), queue_id=0)
            confirmed = number % 2 == 0
            stubs.append({"message_id": message_id, "topic": TOPIC, "content": b"{}",
                          "status": "confirmed" if confirmed else "unconfirmed",
                          "send_count": 1, "queue_id": 0, "queue_offset": put.queue_offset,
                          "published_at": at, "created_at": at, "updated_at": at,
                          "confirmed_at": at if confirmed else None})
        connection.execute(insert(message_stub), stubs)
    engine.dispose()


def test_an_incremental_run_classifies_like_a_full_one_reading_less(tmp_path: Path) -> None:
    first = datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=3)
    generate(tmp_path / "store", f"sqlite:///{tmp_path / 'app.db'}", STUBS, seed=3,
             segment_size_bytes=SEGMENT_SIZE_BYTES, now=first)
    full_before = run(tmp_path, "out", first, incremental=True)  # no state yet: full
    assert full_before.summary.inputs["incremental"] is False
    assert (tmp_path / "out" / STATE_NAME).is_file()
    later = first + timedelta(hours=1)
    new_traffic(tmp_path, later)
    then = later + timedelta(minutes=10)

    incremental = run(tmp_path, "out", then, incremental=True).summary
    full = run(tmp_path, "full", then, incremental=False).summary

    assert incremental.inputs["incremental"] is True
    assert rows(tmp_path / "out" / "classification") == rows(tmp_path / "full" / "classification")
    assert incremental.counts == full.counts
    assert incremental.counts["dead_lettered"] == full_before.summary.counts["dead_lettered"] + 1
    assert incremental.samples == full.samples and incremental.resends == full.resends
    assert incremental.retries == full.retries
    read, read_full = incremental.inputs["rows_read"], full.inputs["rows_read"]
    assert read_full["message_stub"] == STUBS + NEW_STUBS
    assert read["message_stub"] < read_full["message_stub"] // 5
    assert read["message_processed"] < read_full["message_processed"] // 5
    assert incremental.inputs["rows_carried"] + read["message_stub"] >= STUBS + NEW_STUBS
    assert incremental.inputs["segments_scanned"] < full.inputs["segments_scanned"]
