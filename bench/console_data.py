"""The console benchmark's data set, built once into a cache directory and reused.

At scale 1: a store with 1 000 000 messages over 1 000 topics (4 queues each, one key and one
UNIQ_KEY per message), 200 consumer groups with committed offsets on 5 topics each (half the
messages consumed), 50 dead letters of group ``G000``; an outbox database with 1 000 000 stubs
(the store's messages' UNIQ_KEYs: 90 % confirmed, 9 % unconfirmed, 1 % void); and one
reconciliation output folder in a run's layout (``summary.json`` and ``report.html`` made by the
reconcile job's own summary class and renderer, a ``classification.csv`` of one row per stub)
written directly, not by a Spark run (a real run at this size does not fit the bench's time).

The store is written with ``put_messages`` batches through the store API (one call per queue),
the stubs with multi-row inserts of ``STUB_BATCH`` rows; ``built.json`` marks a finished build.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import shutil
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

FULL_MESSAGES = 1_000_000
FULL_TOPICS = 1_000
FULL_GROUPS = 200
QUEUES = 4
GROUP_TOPICS = 5
DEAD_LETTERS = 50
STUB_BATCH = 10_000
REPORTS_LAYOUT = 2
"""Version of the reports folder's layout (a cache built with another one rebuilds it)."""
BODY = b'{"order": %d, "amount": "12.50", "currency": "EUR", "customer": "c-%d"}'


@dataclasses.dataclass(frozen=True)
class DataSet:
    """What a build made, and what the pages are asked about."""

    root: Path
    messages: int
    topics: int
    groups: int
    stubs: int
    database_url: str
    first_store_ms: int = 0
    last_store_ms: int = 0
    build_s: dict[str, float] = dataclasses.field(default_factory=dict)
    reports_layout: int = REPORTS_LAYOUT

    @property
    def store_dir(self) -> Path:
        return self.root / "store"

    @property
    def reports_dir(self) -> Path:
        return self.root / "reports"


def sizes(scale: float) -> tuple[int, int, int]:
    """(messages, topics, groups) for ``scale`` (at least 10 topics and 4 groups)."""
    messages = max(int(FULL_MESSAGES * scale), 400)
    return messages, max(int(FULL_TOPICS * scale), 10), max(int(FULL_GROUPS * scale), 4)


def topic_name(index: int) -> str:
    return f"T{index:04d}"


def unique_key(index: int) -> str:
    """The UNIQ_KEY of message ``index`` (32 hex digits, like the client's), also its stub's
    ``message_id``."""
    return f"C0A80001{index:024X}"


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def build_store(data: DataSet) -> tuple[int, int]:
    """The store: topics, messages, offsets, dead letters; (first, last) store time in ms."""
    from postbox.storage_engine import Broker, Message, StoreConfig

    per_queue = max(data.messages // (data.topics * QUEUES), 1)
    first_ms = last_ms = 0
    with Broker.open(StoreConfig(root_dir=data.store_dir)) as broker:
        store = broker.store
        index = 0
        for topic_no in range(data.topics):
            topic = topic_name(topic_no)
            broker.create_topic(topic, QUEUES)
            for queue_id in range(QUEUES):
                batch = [Message(topic, BODY % (i, i % 997), tags="order", keys=[f"order-{i}"],
                                 unique_key=unique_key(i))
                         for i in range(index, index + per_queue)]
                index += per_queue
                store.put_messages(batch, queue_id=queue_id)
            if topic_no % 100 == 0:
                progress(f"  store: {index} messages, {topic_no + 1} topics")
        store.wait_dispatched(timeout_ms=1_800_000)
        first_ms = store.get_message("bench", topic_name(0), 0, 0).messages[0].store_timestamp_ms
        last_ms = int(time.time() * 1000)
        commit_offsets(broker, data, per_queue)
        dead_letters(broker)
    return first_ms, last_ms


def commit_offsets(broker: Any, data: DataSet, per_queue: int) -> None:
    """Each group ``Gnnn`` consumed half of every queue of ``GROUP_TOPICS`` topics."""
    for group_no in range(data.groups):
        for step in range(GROUP_TOPICS):
            topic = topic_name((group_no * GROUP_TOPICS + step) % data.topics)
            for queue_id in range(QUEUES):
                broker.commit_offset(f"G{group_no:03d}", topic, queue_id, per_queue // 2)


def dead_letters(broker: Any) -> None:
    """``DEAD_LETTERS`` messages of ``T0000`` dead-lettered by ``G000`` in three classes."""
    result = broker.store.get_message("bench", topic_name(0), 0, 0, max_count=DEAD_LETTERS)
    for number, view in enumerate(result.messages):
        reason = ("timeout after %d ms", "HTTP 503 from %d", "no such account 'a-%d'")[
            number % 3] % (100 + number)
        broker.send_back("G000", view, delay_level=-1, reason=reason)


def stub_rows(data: DataSet, first: int, stop: int, start: datetime) -> list[dict[str, Any]]:
    """Stub rows ``first..stop-1`` (message ``i``'s UNIQ_KEY), created a second apart."""
    per_topic = max(data.messages // data.topics, 1)
    rows = []
    for i in range(first, stop):
        status = "void" if i % 100 == 0 else "unconfirmed" if i % 100 < 10 else "confirmed"
        created = start + timedelta(seconds=i)
        rows.append({"message_id": unique_key(i), "topic": topic_name(i // per_topic
                                                                      % data.topics),
                     "tags": "order", "keys": f"order-{i}", "content": BODY % (i, i % 997),
                     "status": status, "send_count": 1 if status != "void" else 16,
                     "created_at": created, "updated_at": created,
                     "published_at": created if status != "void" else None,
                     "next_resend_at": created + timedelta(minutes=1),
                     "confirmed_at": created if status == "confirmed" else None,
                     "last_error": "broker unreachable" if status == "void" else None})
    return rows


def build_outbox(data: DataSet) -> None:
    """The outbox tables (migrated to head) and ``data.stubs`` stubs in multi-row inserts."""
    from sqlalchemy import insert

    from postbox.migrations.api import upgrade
    from postbox.outbox.database import create_database_engine
    from postbox.outbox.tables import message_stub

    upgrade(data.database_url)
    engine = create_database_engine(data.database_url)
    start = datetime(2026, 1, 1, tzinfo=UTC).replace(tzinfo=None)  # naive UTC, as stored
    try:
        for first in range(0, data.stubs, STUB_BATCH):
            rows = stub_rows(data, first, min(first + STUB_BATCH, data.stubs), start)
            with engine.begin() as connection:
                connection.execute(insert(message_stub), rows)
            if first % (10 * STUB_BATCH) == 0:
                progress(f"  outbox: {first + len(rows)} stubs")
    finally:
        engine.dispose()


def build_reports(data: DataSet) -> None:
    """One reconciliation run folder in the layout a run writes (``summary.json`` from the
    job's own ``ReconcileSummary``, ``report.html`` from its renderer, ``classification.csv``
    with its columns: one row per stub, the void stubs ``exhausted``, one in 1 000 ``lost``),
    written directly: a Spark run over a million stubs does not fit the bench's time."""
    from postbox.spark_reconcile.classes import ALL_CLASSES, MessageClass
    from postbox.spark_reconcile.classify import CLASSIFICATION_COLUMNS
    from postbox.spark_reconcile.report_html import render_report
    from postbox.spark_reconcile.results import ClassCount, ReconcileSummary, Sample

    run = data.reports_dir / "run-1"
    run.mkdir(parents=True, exist_ok=True)
    hour = datetime(2026, 1, 1, tzinfo=UTC).replace(tzinfo=None)  # naive UTC, as a run
    summary = ReconcileSummary(as_of=hour + timedelta(days=1), grace_ms=600_000,
                               counts=dict.fromkeys(ALL_CLASSES, 0), thresholds={"lost": 0})
    by_topic: dict[tuple[str, str], int] = {}
    per_topic = max(data.messages // data.topics, 1)
    with (run / "classification.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CLASSIFICATION_COLUMNS)
        for i in range(data.stubs):
            kind = (MessageClass.EXHAUSTED if i % 100 == 0 else MessageClass.LOST
                    if i % 1000 == 1 else MessageClass.IN_FLIGHT if i % 100 < 10
                    else MessageClass.CONFIRMED)
            topic = topic_name(i // per_topic % data.topics)
            summary.counts[kind] += 1
            by_topic[kind, topic] = by_topic.get((kind, topic), 0) + 1
            writer.writerow((unique_key(i), kind, topic, "G000", 0, i, "confirmed", 1,
                             hour.isoformat(), hour.isoformat(), ""))
    summary.by_topic = [ClassCount(kind, count, topic=topic)
                        for (kind, topic), count in sorted(by_topic.items())]
    summary.by_group = [ClassCount(kind, count, consumer_group="G000")
                        for kind, count in summary.counts.items() if count]
    summary.by_hour = [ClassCount(kind, count, hour=hour)
                       for kind, count in summary.counts.items() if count]
    summary.samples = [Sample(MessageClass.LOST, unique_key(1), topic_name(0), "G000", 0, 1,
                              "no consumer logged it")]
    summary.exceeded = [name for name, limit in summary.thresholds.items()
                        if summary.counts.get(name, 0) > limit]
    summary.inputs = {"store": str(data.store_dir), "database": data.database_url.split(":")[0],
                      "tables_read_by": "bench (no Spark run)"}
    (run / "summary.json").write_text(json.dumps(summary.to_json(), indent=2) + "\n")
    (run / "report.html").write_text(render_report(summary), encoding="utf-8")


def load_or_build(cache: Path, scale: float, database_url: str | None,
                  rebuild: bool = False) -> DataSet:
    """The data set for ``scale`` under ``cache`` (built when missing or ``rebuild``)."""
    messages, topics, groups = sizes(scale)
    messages = max(messages // (topics * QUEUES), 1) * topics * QUEUES
    root = cache / f"scale-{scale:g}"
    marker = root / "built.json"
    url = database_url or f"sqlite:///{root / 'outbox.db'}"
    if marker.is_file() and not rebuild:
        saved = json.loads(marker.read_text())
        if saved.get("database_url") == url:
            data = DataSet(root=root, **{"reports_layout": 1, **saved, "database_url": url})
            if data.reports_layout != REPORTS_LAYOUT:  # an older build: its reports only
                shutil.rmtree(data.reports_dir, ignore_errors=True)
                build_reports(data)
                data = dataclasses.replace(data, reports_layout=REPORTS_LAYOUT)
                write_marker(data, marker)
            return data
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    data = DataSet(root, messages, topics, groups, messages, url)
    timings = {}
    started = time.perf_counter()
    progress(f"building the data set in {root}")
    first_ms, last_ms = build_store(data)
    timings["store"] = time.perf_counter() - started
    started = time.perf_counter()
    build_outbox(data)
    timings["outbox"] = time.perf_counter() - started
    started = time.perf_counter()
    build_reports(data)
    timings["reports"] = time.perf_counter() - started
    data = dataclasses.replace(data, first_store_ms=first_ms, last_store_ms=last_ms,
                               build_s=timings)
    write_marker(data, marker)
    return data


def write_marker(data: DataSet, marker: Path) -> None:
    """``built.json``: what the build made (read back by ``load_or_build``)."""
    document = dataclasses.asdict(data)
    document.pop("root")
    marker.write_text(json.dumps(document, indent=2))
