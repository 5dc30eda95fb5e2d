"""A reconciliation dataset with known class counts, and the same classification done in SQL.

``generate`` writes outbox stubs, consumer log rows and processed rows straight into the outbox
tables (COPY on PostgreSQL, ``executemany`` elsewhere) and a real message per stub into a store
(``put_messages``, ASYNC flush, key index off: the reconciliation never reads it), not through
the outbox or the framework, and returns the class counts a correct reconciliation must find.
``sql_classify`` does that classification as one SQL query over the tables plus temporary tables
of store facts (``read_store_facts``): the baseline ``bench.reconcile_bench`` holds Spark to.

Layout (topic ``bench-orders``, group ``bench-billing``, ``queues`` queues, N stubs)::

    stub n < M = N - pending     queue n % queues, below the committed offset; its class from a
                                 seeded 970-slot pattern (per 1000 stubs: 910 confirmed,
                                 20 in_flight, 20 lost, 10 dead_lettered, 10 exhausted)
    stub n >= M (30 per 1000)    pending: queue (n - M) % queues, at or after the committed offset
    + 5 per 1000 orphan_log rows, 1 per 1000 dead letters without a stub (``%DLQ%bench-billing``)

created_at spreads over the 48 hours before ``now`` in stub order, so every lost stub was
published more than an hour before ``now`` and lost ones are lost for any grace under an hour.

Invariants (checked while writing, ``BenchDataError`` otherwise): every stub's message sits in
the queue and at the offset its row records; a pending stub's offset is at or after its queue's
committed offset and every other stub's is below it; ``consumerOffset.json`` holds exactly the
committed offsets once the store is closed. Memory is bounded by one chunk (``CHUNK_STUBS``);
ids come from a counter (``{seed:04X}{n:028X}``), never from a list.

Not thread-safe. A crash leaves a partial dataset: delete the directory and tables, start again.
"""

from __future__ import annotations

import bisect
import json
import mmap
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from postbox.outbox.tables import message_log, message_processed, message_stub, metadata
from postbox.spark_reconcile.classes import ALL_CLASSES
from postbox.spark_reconcile.classes import MessageClass as C
from postbox.storage_engine import (
    CommitLogConfig,
    FlushConfig,
    FlushMode,
    KeyIndexConfig,
    Message,
    MessageStore,
    StoreConfig,
    dead_letter_topic,
)
from postbox.storage_engine.broker.config_stores import ConfigStores
from postbox.storage_engine.formats import (
    COMMIT_LOG_DIR_NAME,
    CONFIG_DIR_NAME,
    CONSUME_QUEUE_DIR_NAME,
    CONSUME_QUEUE_UNIT,
    CONSUME_QUEUE_UNIT_SIZE_BYTES,
    CONSUMER_OFFSET_FILE_NAME,
    EMPTY_UNIT,
    FILLER_UNIT_SIZE,
    PROPERTY_DLQ_REASON,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    TOPIC_GROUP_SEPARATOR,
    MessageView,
    decode_config_json,
)
from postbox.storage_engine.formats.topic_names import DLQ_TOPIC_PREFIX, RETRY_TOPIC_PREFIX

TOPIC = "bench-orders"
GROUP = "bench-billing"
DLQ_TOPIC = dead_letter_topic(GROUP)
MIB = 1 << 20
CHUNK_STUBS = 100_000
PUT_BATCH_MESSAGES = 1_000
SPAN_S = 48 * 3600
MAX_RECONSUME_TIMES = 16
EXHAUSTED_SEND_COUNT = 5
SEED_MAX = 0xFFFF  # four hex digits of every id

PER_MILLE = {C.IN_FLIGHT: 20, C.LOST: 20, C.DEAD_LETTERED: 10, C.EXHAUSTED: 10}
PENDING_PER_MILLE = 30
CONFIRMED_PER_MILLE = 1000 - PENDING_PER_MILLE - sum(PER_MILLE.values())
ORPHAN_LOG_PER_MILLE = 5
DLQ_WITHOUT_STUB_PER_MILLE = 1
ORPHAN_ID_BASE = 1 << 108  # id namespaces: stubs from 0, orphan log rows, DLQ-only messages
DLQ_ID_BASE = 2 << 108
assert CONFIRMED_PER_MILLE == 910

STUB_COLUMNS = ("message_id", "topic", "tags", "content", "status", "send_count", "queue_id",
                "queue_offset", "log_position", "offset_msg_id", "published_at",
                "next_resend_at", "created_at", "updated_at", "confirmed_at", "last_error")
LOG_COLUMNS = ("consumer_group", "message_id", "topic", "queue_id", "queue_offset", "created_at")
PROCESSED_COLUMNS = ("consumer_group", "message_id", "topic", "processed_at")
BULK_TABLES = (message_stub, message_log, message_processed)


class BenchDataError(Exception):
    """The dataset came out other than planned (root error of this module)."""


@dataclass(frozen=True)
class StoreFacts:
    """What the SQL classification needs from the store, read without Spark.

    ``dead_letters`` and ``retries``: ``(unique_key, origin_message_id, consumer_group,
    log_position)`` of every message in a ``%DLQ%`` / ``%RETRY%`` topic; ``offsets``:
    ``(topic, consumer_group, queue_id, committed_offset)`` (retry topics left out, as Spark
    does). Delayed messages' delivered copies are not read: the generator makes none.
    """

    dead_letters: list[tuple[str | None, str | None, str, int]]
    retries: list[tuple[str | None, str | None, str, int]]
    offsets: list[tuple[str, str, int, int]]


# ---------------------------------------------------------------- the plan


class _Plan:
    """Which class, queue, id and times stub ``n`` gets; pure arithmetic on ``n``."""

    def __init__(self, stubs: int, seed: int, queues: int, now: datetime) -> None:
        self.stubs, self.seed, self.queues = stubs, seed, queues
        self.pending = stubs * PENDING_PER_MILLE // 1000
        self.below = stubs - self.pending
        pattern = [C.CONFIRMED] * CONFIRMED_PER_MILLE
        for kind, per_mille in PER_MILLE.items():
            pattern += [kind] * per_mille
        random.Random(seed).shuffle(pattern)
        self.pattern = tuple(pattern)
        self.committed = tuple(len(range(q, self.below, queues)) for q in range(queues))
        self.base = now.replace(microsecond=0) - timedelta(seconds=SPAN_S)
        self.base_ms = int(self.base.replace(tzinfo=UTC).timestamp() * 1000)
        self._stamps: dict[int, str] = {}
        self.bodies = _body_pool(seed)

    def kind_of(self, n: int) -> C:
        return C.PENDING if n >= self.below else self.pattern[n % len(self.pattern)]

    def queue_of(self, n: int) -> int:
        return (n if n < self.below else n - self.below) % self.queues

    def stub_id(self, n: int) -> str:
        return f"{self.seed:04X}{n:028X}"

    def second_of(self, n: int) -> int:
        """Seconds after ``base`` stub ``n`` was created."""
        return n * SPAN_S // self.stubs

    def stamp(self, second: int) -> str:
        """``base + second`` as the naive-UTC text every backend stores (cached per second)."""
        text = self._stamps.get(second)
        if text is None:
            if len(self._stamps) > 100_000:
                self._stamps.clear()
            text = (self.base + timedelta(seconds=second)).isoformat(" ", "microseconds")
            self._stamps[second] = text
        return text

    def share(self, per_mille: int, first: int, stop: int) -> range:
        """Extra items (orphan log rows, DLQ-only messages) that belong to stubs first..stop-1."""
        total = self.stubs * per_mille // 1000
        return range(first * total // self.stubs, stop * total // self.stubs)


def _body_pool(seed: int, size: int = 256) -> list[bytes]:
    """``size`` JSON-ish order bodies of exactly 100 bytes."""
    rng = random.Random(seed)
    bodies = []
    for i in range(size):
        text = json.dumps({"order": f"o-{i:08d}", "amount_cents": rng.randrange(100, 10**6),
                           "currency": "EUR", "customer": f"c-{rng.randrange(10**6):06d}"},
                          separators=(",", ":"))
        bodies.append(text.encode().ljust(100))
    return bodies


# ---------------------------------------------------------------- generation


def generate(store_dir: str | Path, database_url: str, stubs: int, *, seed: int = 7,
             queues: int = 8, segment_size_bytes: int = 64 * MIB,
             now: datetime | None = None, processed_rows: bool = True,
             progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
    """Write the dataset; return the count of every class (all eight) it must classify to.

    ``store_dir`` must not hold a store yet; the outbox tables are created when missing and
    must be empty. ``processed_rows`` writes a ``message_processed`` row per confirmed stub (as
    a consumer does). ``now`` is naive UTC (default: the current time).

    Raises:
        BenchDataError: bad arguments, a non-empty store or table, or a broken invariant.
    """
    if stubs < 1 or not 0 <= seed <= SEED_MAX or not 1 <= queues <= 1024:
        raise BenchDataError(f"need stubs >= 1, 0 <= seed <= {SEED_MAX}, 1 <= queues <= 1024; "
                             f"got stubs={stubs} seed={seed} queues={queues}")
    store_root = Path(store_dir)
    if (store_root / COMMIT_LOG_DIR_NAME).exists():
        raise BenchDataError(f"{store_root} already holds a store: generate into a fresh one")
    plan = _Plan(stubs, seed, queues, now or datetime.now(UTC).replace(tzinfo=None))
    counts = dict.fromkeys((kind.value for kind in ALL_CLASSES), 0)
    engine = sa.create_engine(database_url)
    try:
        _prepare_tables(engine)
        config = StoreConfig(root_dir=store_root,
                             commit_log=CommitLogConfig(segment_size_bytes=segment_size_bytes),
                             key_index=KeyIndexConfig(enabled=False),
                             flush=FlushConfig(mode=FlushMode.ASYNC))
        with ExitStack() as stack:
            writer = stack.enter_context(_RowWriter.open(engine))
            store = stack.enter_context(MessageStore.open(config))
            for first in range(0, stubs, CHUNK_STUBS):
                stop = min(first + CHUNK_STUBS, stubs)
                _write_chunk(plan, store, writer, first, stop, counts, processed_rows)
                if progress:
                    progress(stop, stubs)
            _commit_offsets(plan, store)
        _check_offsets_file(plan, store_root)
        _finish_tables(engine)
    finally:
        engine.dispose()
    return counts


def _prepare_tables(engine: sa.Engine) -> None:
    """Create the tables if missing, require them empty, drop secondary indexes for the load."""
    metadata.create_all(engine)
    with engine.begin() as connection:
        for table in BULK_TABLES:
            rows = connection.execute(sa.select(sa.func.count()).select_from(table)).scalar()
            if rows:
                raise BenchDataError(f"table {table.name} holds {rows} rows: generate into "
                                     "empty tables")
        for table in BULK_TABLES:
            for index in table.indexes:
                index.drop(connection, checkfirst=True)


def _finish_tables(engine: sa.Engine) -> None:
    """Rebuild the secondary indexes (faster than maintaining them row by row), then analyze."""
    with engine.begin() as connection:
        for table in BULK_TABLES:
            for index in table.indexes:
                index.create(connection)
    if engine.dialect.name == "postgresql":  # autovacuum would do it later; a real DB has stats
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            for table in BULK_TABLES:
                connection.exec_driver_sql(f"VACUUM ANALYZE {table.name}")
    elif engine.dialect.name == "sqlite":
        with engine.begin() as connection:
            connection.exec_driver_sql("ANALYZE")


def _write_chunk(plan: _Plan, store: MessageStore, writer: _RowWriter, first: int, stop: int,
                 counts: dict[str, int], processed_rows: bool) -> None:
    placed = _put_stubs(plan, store, first, stop)
    stubs, logs, processed, dead = [], [], [], []
    for n in range(first, stop):
        kind, result = plan.kind_of(n), placed[n - first]
        counts[kind.value] += 1
        stubs.append(_stub_row(plan, n, kind, result))
        if kind is C.IN_FLIGHT:
            logs.append((GROUP, plan.stub_id(n), TOPIC, result.queue_id, result.queue_offset,
                         plan.stamp(plan.second_of(n) + 2)))
        elif kind is C.CONFIRMED and processed_rows:
            processed.append((GROUP, plan.stub_id(n), TOPIC, plan.stamp(plan.second_of(n) + 2)))
        elif kind is C.DEAD_LETTERED:
            dead.append(_dead_letter(plan, n, plan.stub_id(n), result.msg_id))
    for k in plan.share(ORPHAN_LOG_PER_MILLE, first, stop):
        counts[C.ORPHAN_LOG.value] += 1
        logs.append((GROUP, f"{plan.seed:04X}{ORPHAN_ID_BASE + k:028X}", TOPIC,
                     k % plan.queues, None, plan.stamp(plan.second_of(first) + 3)))
    for k in plan.share(DLQ_WITHOUT_STUB_PER_MILLE, first, stop):
        counts[C.DLQ_WITHOUT_STUB.value] += 1
        dead.append(_dead_letter(plan, k, f"{plan.seed:04X}{DLQ_ID_BASE + k:028X}", None))
    for batch_start in range(0, len(dead), PUT_BATCH_MESSAGES):
        store.put_messages(dead[batch_start:batch_start + PUT_BATCH_MESSAGES], queue_id=0)
    writer.write(message_stub.name, STUB_COLUMNS, stubs)
    writer.write(message_log.name, LOG_COLUMNS, logs)
    writer.write(message_processed.name, PROCESSED_COLUMNS, processed)
    writer.commit()


def _put_stubs(plan: _Plan, store: MessageStore, first: int, stop: int) -> list:
    """Store one message per stub, queue by queue; return the put results in stub order."""
    by_queue: list[list[int]] = [[] for _ in range(plan.queues)]
    for n in range(first, stop):
        by_queue[plan.queue_of(n)].append(n)
    placed: list = [None] * (stop - first)
    for queue_id, numbers in enumerate(by_queue):
        for start in range(0, len(numbers), PUT_BATCH_MESSAGES):
            batch = numbers[start:start + PUT_BATCH_MESSAGES]
            messages = [Message(TOPIC, plan.bodies[n & 255], tags="created",
                                unique_key=plan.stub_id(n),
                                born_timestamp_ms=plan.base_ms + plan.second_of(n) * 1000)
                        for n in batch]
            for n, result in zip(batch, store.put_messages(messages, queue_id), strict=True):
                below = result.queue_offset < plan.committed[queue_id]
                if result.queue_id != queue_id or below != (n < plan.below):
                    raise BenchDataError(f"stub {n} landed at queue {result.queue_id} offset "
                                         f"{result.queue_offset}; planned queue {queue_id}, "
                                         f"{'below' if n < plan.below else 'at or after'} "
                                         f"committed offset {plan.committed[queue_id]}")
                placed[n - first] = result
    return placed


def _stub_row(plan: _Plan, n: int, kind: C, result) -> tuple:
    created = plan.second_of(n)
    status, send_count, next_resend, updated, confirmed, error = (
        "unconfirmed", 1, plan.stamp(created + 61), created + 1, None, None)
    if kind is C.CONFIRMED:
        status, next_resend, updated = "confirmed", None, created + 2
        confirmed = plan.stamp(created + 2)
    elif kind is C.EXHAUSTED:
        status, send_count, next_resend, updated = "void", EXHAUSTED_SEND_COUNT, None, created + 900
        error = f"resent {EXHAUSTED_SEND_COUNT} times, never confirmed: gave up"
    elif kind is C.DEAD_LETTERED and n & 1:
        status, next_resend, updated = "void", None, created + 600
        error = f"dead-lettered by {GROUP}: voided by an operator"
    return (plan.stub_id(n), TOPIC, "created", plan.bodies[n & 255], status, send_count,
            result.queue_id, result.queue_offset, result.log_position, result.msg_id,
            plan.stamp(created + 1), next_resend, plan.stamp(created), plan.stamp(updated),
            confirmed, error)


def _dead_letter(plan: _Plan, n: int, unique_key: str, origin: str | None) -> Message:
    """The copy the broker stores in ``%DLQ%<group>`` after the last failed redelivery."""
    properties = {PROPERTY_RETRY_TOPIC: TOPIC,
                  PROPERTY_DLQ_REASON: f"ValueError: order total does not match its lines "
                                       f"({MAX_RECONSUME_TIMES} attempts)"}
    if origin is not None:
        properties[PROPERTY_ORIGIN_MESSAGE_ID] = origin
    return Message(DLQ_TOPIC, plan.bodies[n & 255], tags="created", unique_key=unique_key,
                   properties=properties, reconsume_count=MAX_RECONSUME_TIMES)


def _commit_offsets(plan: _Plan, store: MessageStore) -> None:
    """The group past every stub but the pending ones, in ``consumerOffset.json`` (no broker)."""
    if not store.wait_dispatched(timeout_ms=120_000):  # consume queues are built behind puts
        raise BenchDataError("the consume queues did not catch up with the log within 120 s")
    offsets = ConfigStores.open(store.root_dir, store.clock).consumer_offsets
    for queue_id, offset in enumerate(plan.committed):
        end = store.max_offset(TOPIC, queue_id)
        expected_end = offset + len(range(queue_id, plan.pending, plan.queues))
        if end != expected_end:
            raise BenchDataError(f"queue {queue_id} of {TOPIC} ends at offset {end}, planned "
                                 f"{expected_end}")
        offsets.commit(TOPIC, GROUP, queue_id, offset)
    offsets.persist()


def _check_offsets_file(plan: _Plan, store_root: Path) -> None:
    found = {(topic, group, queue_id): offset
             for topic, group, queue_id, offset in _committed_offsets(store_root)}
    planned = {(TOPIC, GROUP, queue_id): offset for queue_id, offset in enumerate(plan.committed)}
    if found != planned:
        raise BenchDataError(f"{CONSUMER_OFFSET_FILE_NAME} holds {found}, expected {planned}")


class _RowWriter:
    """Bulk inserts on one raw DBAPI connection: COPY on PostgreSQL, executemany elsewhere."""

    def __init__(self, dbapi_connection, dialect: sa.Dialect) -> None:
        self.raw = dbapi_connection
        self.copy = dialect.name == "postgresql"
        self.marker = "?" if dialect.paramstyle == "qmark" else "%s"
        if dialect.name == "sqlite":  # bench data: durability of the load does not matter
            cursor = self.raw.cursor()
            cursor.execute("PRAGMA synchronous=OFF")
            cursor.close()

    @classmethod
    def open(cls, engine: sa.Engine) -> _RowWriter:
        return cls(engine.raw_connection(), engine.dialect)

    def __enter__(self) -> _RowWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.raw.close()

    def write(self, table: str, columns: Sequence[str], rows: Sequence[tuple]) -> None:
        if not rows:
            return
        cursor = self.raw.cursor()
        try:
            if self.copy:
                with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
            else:
                cursor.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
                                   f"({', '.join([self.marker] * len(columns))})", rows)
        finally:
            cursor.close()

    def commit(self) -> None:
        self.raw.commit()


# ---------------------------------------------------------------- store facts


def read_store_facts(store_dir: str | Path) -> StoreFacts:
    """Dead letters, retries (via their consume queues) and committed offsets, from closed files."""
    root = Path(store_dir)
    segments = sorted((int(path.name), path) for path in (root / COMMIT_LOG_DIR_NAME).iterdir()
                      if path.name.isdigit())
    dead: list = []
    retried: list = []
    with _SegmentReader(segments) as reader:
        for topic_dir in sorted((root / CONSUME_QUEUE_DIR_NAME).iterdir()):
            for prefix, sink in ((DLQ_TOPIC_PREFIX, dead), (RETRY_TOPIC_PREFIX, retried)):
                if topic_dir.name.startswith(prefix):
                    group = topic_dir.name[len(prefix):]
                    sink.extend((view.unique_key,
                                 view.properties.get(PROPERTY_ORIGIN_MESSAGE_ID) or None,
                                 group, view.log_position)
                                for view in _queue_views(topic_dir, reader))
    return StoreFacts(dead, retried, _committed_offsets(root))


def _committed_offsets(root: Path) -> list[tuple[str, str, int, int]]:
    path = root / CONFIG_DIR_NAME / CONSUMER_OFFSET_FILE_NAME
    table = decode_config_json(path.read_text(encoding="utf-8")).get("offsetTable", {})
    offsets = []
    for key, queues in table.items():
        topic, _, group = str(key).rpartition(TOPIC_GROUP_SEPARATOR)
        if topic and not topic.startswith(RETRY_TOPIC_PREFIX):
            offsets += [(topic, group, int(queue_id), int(offset))
                        for queue_id, offset in queues.items()]
    return offsets


class _SegmentReader:
    """Records by log position, over mmapped segments opened on first use."""

    def __init__(self, segments: list[tuple[int, Path]]) -> None:
        self.bases = [base for base, _ in segments]
        self.paths = [path for _, path in segments]
        self.maps: dict[int, mmap.mmap] = {}
        self.stack = ExitStack()

    def __enter__(self) -> _SegmentReader:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stack.close()

    def view(self, position: int) -> MessageView:
        index = bisect.bisect_right(self.bases, position) - 1
        if index < 0:
            raise BenchDataError(f"no commit-log segment holds position={position}")
        if index not in self.maps:
            handle = self.stack.enter_context(self.paths[index].open("rb"))
            self.maps[index] = self.stack.enter_context(
                mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ))
        return MessageView.decode(self.maps[index], position - self.bases[index])


def _queue_views(topic_dir: Path, reader: _SegmentReader) -> Iterator[MessageView]:
    for queue_dir in sorted(topic_dir.iterdir(), key=lambda path: int(path.name)):
        for path in sorted(queue_dir.iterdir()):
            data = path.read_bytes()
            for start in range(0, len(data) - CONSUME_QUEUE_UNIT_SIZE_BYTES + 1,
                               CONSUME_QUEUE_UNIT_SIZE_BYTES):
                unit = data[start:start + CONSUME_QUEUE_UNIT_SIZE_BYTES]
                if unit == EMPTY_UNIT:
                    break
                position, size, _ = CONSUME_QUEUE_UNIT.unpack(unit)
                if size != FILLER_UNIT_SIZE:
                    yield reader.view(position)


# ---------------------------------------------------------------- the classification in SQL

_FACT_TABLES = {
    "facts_dead_letter": "unique_key TEXT, origin_message_id TEXT, consumer_group TEXT, "
                         "log_position BIGINT",
    "facts_retry": "unique_key TEXT, origin_message_id TEXT, consumer_group TEXT, "
                   "log_position BIGINT",
    "facts_offset": "topic TEXT, consumer_group TEXT, queue_id INTEGER, committed_offset BIGINT",
}

CLASSIFY_SQL = """
WITH dead AS (
    SELECT unique_key AS message_id FROM facts_dead_letter WHERE unique_key IS NOT NULL
    UNION SELECT origin_message_id FROM facts_dead_letter WHERE origin_message_id IS NOT NULL
), retried AS (
    SELECT unique_key AS message_id FROM facts_retry WHERE unique_key IS NOT NULL
    UNION SELECT origin_message_id FROM facts_retry WHERE origin_message_id IS NOT NULL
), logged AS (
    SELECT DISTINCT message_id FROM message_log
), overtaken AS (
    SELECT DISTINCT s.message_id
    FROM message_stub s
    JOIN facts_offset o ON o.topic = s.topic AND o.queue_id = s.queue_id
                       AND o.committed_offset > s.queue_offset
    WHERE s.status = 'unconfirmed'
      AND NOT EXISTS (SELECT 1 FROM message_processed p
                      WHERE p.consumer_group = o.consumer_group AND p.message_id = s.message_id)
), classified AS (
    SELECT CASE
        WHEN d.message_id IS NOT NULL THEN 'dead_lettered'
        WHEN s.status = 'void' THEN 'exhausted'
        WHEN l.message_id IS NOT NULL OR r.message_id IS NOT NULL THEN 'in_flight'
        WHEN v.message_id IS NOT NULL AND COALESCE(s.overtaken_at, s.published_at,
                                                   s.updated_at, s.created_at) <= {cutoff}
            THEN 'lost'
        ELSE 'pending' END AS classification
    FROM message_stub s
    LEFT JOIN dead d ON d.message_id = s.message_id
    LEFT JOIN retried r ON r.message_id = s.message_id
    LEFT JOIN logged l ON l.message_id = s.message_id
    LEFT JOIN overtaken v ON v.message_id = s.message_id
    WHERE s.status <> 'confirmed'
)
SELECT 'confirmed', COUNT(*) FROM message_stub WHERE status = 'confirmed'
UNION ALL
SELECT classification, COUNT(*) FROM classified GROUP BY classification
UNION ALL
SELECT 'orphan_log', COUNT(*) FROM message_log l
WHERE NOT EXISTS (SELECT 1 FROM message_stub s WHERE s.message_id = l.message_id)
UNION ALL
SELECT 'dlq_without_stub', COUNT(*) FROM (
    SELECT DISTINCT COALESCE(f.unique_key, f.origin_message_id,
                             'position ' || CAST(f.log_position AS TEXT)) AS message_id,
                    f.consumer_group
    FROM facts_dead_letter f
    WHERE NOT EXISTS (SELECT 1 FROM message_stub s WHERE s.message_id = f.unique_key)
      AND NOT EXISTS (SELECT 1 FROM message_stub s WHERE s.message_id = f.origin_message_id)
) w
"""
"""The Spark rules (``spark_reconcile.classify``) in their order. The first rule (confirmed,
most stubs) is a plain count, so only the other stubs go through the joins; ``overtaken`` looks
at unconfirmed stubs only: void ones are decided before the ``lost`` rule too. A null
id never matches a stub (``NOT EXISTS`` with a null key is true), as in Spark's anti-joins."""


def sql_classify(database_url: str, store_facts: StoreFacts, *, as_of: datetime | None = None,
                 grace_ms: int = 30_000, timings: dict | None = None
                 ) -> tuple[dict[str, int], float]:
    """The classification as one SQL query: (count of every class, seconds the query took).

    The store facts are first loaded into temporary tables on the same connection (COPY on
    PostgreSQL) and analyzed; that load is not in the returned seconds. When ``timings`` is
    given it receives ``load_s``, ``query_s`` and, on PostgreSQL, ``backend_pid``.
    """
    timings = {} if timings is None else timings
    engine = sa.create_engine(database_url)
    try:
        with _RowWriter.open(engine) as writer:
            postgres = writer.copy
            cursor = writer.raw.cursor()
            if postgres:
                cursor.execute("SELECT pg_backend_pid()")
                timings["backend_pid"] = cursor.fetchone()[0]
            started = time.perf_counter()
            _load_facts(writer, cursor, store_facts)
            timings["load_s"] = time.perf_counter() - started
            cutoff = (as_of or datetime.now(UTC).replace(tzinfo=None)) - timedelta(
                milliseconds=grace_ms)
            started = time.perf_counter()
            cursor.execute(CLASSIFY_SQL.format(cutoff=writer.marker),
                           (cutoff if postgres else cutoff.isoformat(" ", "microseconds"),))
            rows = cursor.fetchall()
            timings["query_s"] = seconds = time.perf_counter() - started
            writer.raw.rollback()  # the temporary tables go with the connection anyway
    finally:
        engine.dispose()
    counts = dict.fromkeys((kind.value for kind in ALL_CLASSES), 0)
    for name, count in rows:
        counts[name] = int(count)
    return counts, seconds


def _load_facts(writer: _RowWriter, cursor, facts: StoreFacts) -> None:
    for name, columns in _FACT_TABLES.items():  # a fresh connection: none exists yet
        cursor.execute(f"CREATE TEMPORARY TABLE {name} ({columns})")
    for name, rows in (("facts_dead_letter", facts.dead_letters),
                       ("facts_retry", facts.retries), ("facts_offset", facts.offsets)):
        names = [column.split()[0] for column in _FACT_TABLES[name].split(", ")]
        writer.write(name, names, rows)
        cursor.execute(f"ANALYZE {name}")


__all__ = [
    "DLQ_TOPIC", "GROUP", "TOPIC", "BenchDataError", "StoreFacts", "generate",
    "read_store_facts", "sql_classify",
]
