"""Outbox at scale: claims, relay throughput, cleanup under load and index size from 10 thousand
to 10 million stubs, on PostgreSQL and MariaDB.

Run ``python -m bench.outbox_scale_bench`` (``postbox bench outbox-scale``); ``--json`` prints one
JSON document on stdout (progress on stderr). Databases: ``--postgres URL`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/bench10m``), ``--mariadb URL`` (default
``mysql+pymysql://root@127.0.0.1:3306/bench10m?local_infile=1``); ``--no-postgres`` /
``--no-mariadb`` skip one. The bench DROPS the outbox tables of the databases it is given and
creates them with the migrations (``postbox db upgrade``): give it a database of its own.

Per size N (``--sizes``, default 10k,100k,1M,10M; ``--quick``: 1k,10k and small phases):

1. **Load** N stubs with ``COPY`` / ``LOAD DATA LOCAL INFILE`` (``bench.outbox_scale_data``:
   one retention period, 7 days, of traffic; 95 % confirmed, 1 % void, 1 % published with the
   resend check due, 3 % published and waiting), secondary indexes built after the load.
2. **Claims**: ``--claims`` × ``claims.claim_stubs`` of ``--batch`` new stubs (the relay's own
   claim, ``unpublished_due``), one after the other: latency p50/p99/max.
3. **Relay**: a ``Relay`` publishing ``--relay-stubs`` new stubs (``publish_due`` until none is
   left) to an embedded store in a temp dir (a real append per batch, not a null sink): stubs/s.
4. **4 relays**: four ``Relay`` objects, each with its own engine and thread, on
   ``--relay-stubs`` new stubs: every stub must be published exactly once (publishes counted per
   stub by a counting producer; ``BenchError`` otherwise).
5. **Churn**: one compressed day. Each of 24 steps ("hours") inserts N/168 stubs (the rate that
   keeps a 7-day table at N rows), marks them published and then confirmed (two set-based
   ``UPDATE``s, so every index sees the new row versions the product's updates make) and runs
   ``run_cleanup`` at that hour. PostgreSQL: a plain ``VACUUM`` every ``--vacuum-every``
   steps stands for autovacuum. Index bytes per row before and after: the ratio must stay
   under ``--bloat-bound`` (printed, never asserted).
6. **Cleanup under load**: ``--producers`` processes send stubs (``outbox.send`` + commit, the
   web process's transaction; ``--producer-threads``: threads of the bench's process, which
   share its interpreter lock with the cleanup) while ``run_cleanup`` deletes a day of
   confirmed stubs, once per ``--cleanup-batches`` batch size: rows/min, the producers'
   transaction latency p99/max before and during, and on PostgreSQL the most backends seen
   waiting on a lock
   (``pg_stat_activity``, sampled every 20 ms). ``--cleanup-baseline`` (PostgreSQL) times
   the same per batch size with the key-list batches cleanup used before its one-statement
   TID batches, a further day each: the ratio within one run.

``--phases`` runs a subset after the load (``--phases cleanup``: load and cleanup only; the
churn then has not deleted the first day, so the first cleanup run deletes two days).
``--innodb-buffer-pool-mib`` and ``--mariadb-set NAME=VALUE`` set MariaDB's buffer pool and
other server variables for the run (``SET GLOBAL``) and put the former values back after.
A database named in the URLs that does not exist is created.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, func, make_url, select, text, update

from bench.peers import BenchError, run_and_print
from postbox import migrations, outbox
from postbox.framework import App, BatchMessage, Producer, SendResult
from postbox.outbox import message_stub
from postbox.outbox.claims import claim_stubs, lease_free, unpublished_due
from postbox.outbox.cleanup import CleanupPolicy, run_cleanup
from postbox.outbox.clock import utc_now
from postbox.outbox.relay import Relay, RelayOptions

from . import outbox_scale_data as data
from .outbox_scale_cleanup import (
    cleanup_phase,
    latency_ms,
    mariadb_settings,
    pool_mib,
    progress,
)

POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/bench10m"
MARIADB_URL = "mysql+pymysql://root@127.0.0.1:3306/bench10m?local_infile=1"
RETENTION = timedelta(days=7)
PHASES = ("claims", "relay", "churn", "cleanup")
"""The phases after the load, in the order they run (``--phases`` picks some)."""
DAY_STEPS = 24
stub = message_stub.c


def parse_sizes(value: str) -> list[int]:
    """``10k,1M`` → ``[10000, 1000000]``."""
    factors = {"k": 1_000, "m": 1_000_000}
    sizes = []
    for part in value.split(","):
        part = part.strip().lower()
        factor = factors.get(part[-1:], 1)
        sizes.append(int(float(part.rstrip("km")) * factor))
    return sizes


def setting(value: str) -> tuple[str, str]:
    """``NAME=VALUE`` of a numeric server variable."""
    name, _, number = value.partition("=")
    if not name.isidentifier() or not number.isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME=NUMBER, got {value!r}")
    return name, number


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.outbox_scale_bench",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--sizes", type=parse_sizes, default=None,
                   help="stub counts, e.g. 10k,100k,1M,10M (default: those; --quick: 1k,10k)")
    p.add_argument("--quick", action="store_true", help="small sizes and phases (~30 s)")
    p.add_argument("--postgres", default=POSTGRES_URL)
    p.add_argument("--mariadb", default=MARIADB_URL)
    p.add_argument("--no-postgres", action="store_true")
    p.add_argument("--no-mariadb", action="store_true")
    p.add_argument("--claims", type=int, default=None, help="claims timed (default 200)")
    p.add_argument("--batch", type=int, default=100, help="stubs per claim (RelayOptions)")
    p.add_argument("--relay-stubs", type=int, default=None, help="default 10 000")
    p.add_argument("--producers", type=int, default=2)
    p.add_argument("--producer-threads", action="store_true",
                   help="run the cleanup phase's producers as threads of the bench's process "
                        "(sharing its interpreter lock with the cleanup) instead of processes")
    p.add_argument("--cleanup-batches", default="500,5000",
                   help="CleanupPolicy.batch_size values, one cleanup run each")
    p.add_argument("--cleanup-workers", type=int, default=1,
                   help="CleanupPolicy.workers: connections deleting at once, each its own "
                        "slice of the day")
    p.add_argument("--cleanup-baseline", action="store_true",
                   help="PostgreSQL: also time cleanup by key lists (the former batches), a "
                        "day of stubs per batch size")
    p.add_argument("--compare-index", action="store_true",
                   help="also time claims with the claim index dropped (the former schema)")
    p.add_argument("--vacuum-every", type=int, default=6, help="churn steps between VACUUMs")
    p.add_argument("--bloat-bound", type=float, default=1.5,
                   help="index bytes per row after churn / before, at most")
    p.add_argument("--innodb-buffer-pool-mib", type=int, default=None,
                   help="MariaDB: innodb_buffer_pool_size for the run (SET GLOBAL, put back "
                        "after; default: the server's own)")
    p.add_argument("--mariadb-set", type=setting, action="append", default=[],
                   metavar="NAME=VALUE",
                   help="MariaDB: a numeric server variable for the run (SET GLOBAL, put back "
                        "after; repeatable), e.g. innodb_log_file_size=1073741824")
    p.add_argument("--phases", default=",".join(PHASES),
                   help="phases after the load, a comma-separated subset of "
                        f"{','.join(PHASES)} (the load always runs)")
    p.add_argument("--dir", default=None, help="parent of the store's temp dir")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.sizes is None:
        args.sizes = [1_000, 10_000] if args.quick else [10_000, 100_000, 1_000_000,
                                                         10_000_000]
    args.claims = args.claims or (20 if args.quick else 200)
    args.relay_stubs = args.relay_stubs or (1_000 if args.quick else 10_000)
    args.cleanup_batch_sizes = [int(size) for size in args.cleanup_batches.split(",")]
    args.phases = [phase.strip() for phase in args.phases.split(",") if phase.strip()]
    unknown = sorted(set(args.phases) - set(PHASES))
    if unknown:
        p.error(f"--phases: unknown {', '.join(unknown)} (known: {', '.join(PHASES)})")
    return args


class CountingProducer(Producer):
    """A producer that counts publishes per unique key (the stub's message id)."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def _count(self, keys: list[str | None]) -> None:
        with self._lock:
            self.counts.update(key for key in keys if key)

    def send(self, topic: str, body: bytes | str, **options: Any) -> SendResult:  # type: ignore[override]
        result = super().send(topic, body, **options)
        self._count([options.get("unique_key")])
        return result

    def send_batch(self, topic: str, messages: Sequence[BatchMessage | bytes | str],  # type: ignore[override]
                   **options: Any) -> list[SendResult]:
        results = super().send_batch(topic, messages, **options)
        self._count([item.unique_key for item in messages if isinstance(item, BatchMessage)])
        return results


def ensure_database(url: str) -> None:
    """Create the database ``url`` names when its server has none of that name."""
    parsed = make_url(url)
    name = parsed.database
    if not name or not name.replace("_", "").isalnum():
        raise BenchError(f"give the bench a database of its own by a plain name, not {name!r}")
    server_db = "postgres" if parsed.get_backend_name() == "postgresql" else None
    admin = create_engine(parsed.set(database=server_db), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            if parsed.get_backend_name() == "postgresql":
                found = connection.execute(text("SELECT 1 FROM pg_database WHERE datname = "
                                                ":name"), {"name": name}).first()
                if found is None:
                    connection.execute(text(f'CREATE DATABASE "{name}"'))
            else:
                connection.execute(text(f"CREATE DATABASE IF NOT EXISTS `{name}`"))
    finally:
        admin.dispose()


class Target:
    """One database: its URL, engine and the next free stub number."""

    def __init__(self, name: str, url: str) -> None:
        self.name = name
        self.url = url
        ensure_database(url)
        self.engine = outbox.create_database_engine(url)
        self.next_number = 0
        self.base = utc_now()

    def reset(self) -> None:
        """Drop the outbox tables and create them with the migrations."""
        with self.engine.begin() as connection:
            outbox.metadata.drop_all(connection)
            connection.execute(text("DROP TABLE IF EXISTS alembic_version"))
        migrations.upgrade(self.url)

    def fresh(self, count: int, now: datetime | None = None) -> tuple[str, str]:
        """Load ``count`` new unpublished stubs; return their first and last id."""
        first = self.next_number
        data.load(self.engine, data.fresh_rows(first, count, now or utc_now()))
        self.next_number += count
        return data.stub_id(first), data.stub_id(first + count - 1)

    def dispose(self) -> None:
        self.engine.dispose()


def load_phase(args: argparse.Namespace, target: Target, size: int) -> dict:
    target.reset()
    target.base = utc_now()
    started = time.perf_counter()
    data.drop_indexes(target.engine)
    data.load(target.engine, data.history_rows(size, target.base, RETENTION))
    loaded_s = time.perf_counter() - started
    data.create_indexes(target.engine)
    target.next_number = size
    total_s = time.perf_counter() - started
    progress(args, f"{target.name} {size}: loaded in {loaded_s:.1f} s, indexed in "
                   f"{total_s - loaded_s:.1f} s")
    return {"load_s": round(loaded_s, 1), "index_s": round(total_s - loaded_s, 1),
            "rows_per_s": round(size / loaded_s)}


def claim_work(target: Target, limit: int) -> int:
    """What one claim's candidate query reads, independent of the machine's load: PostgreSQL,
    buffers touched (``EXPLAIN (ANALYZE, BUFFERS)``); MariaDB, rows read by the handler
    (``Handler_read_*`` before and after). Run in a transaction rolled back: nothing stays
    locked."""
    now = utc_now()
    query = select(stub.message_id).where(unpublished_due(now, 5), lease_free(now)) \
        .order_by(stub.next_resend_at).limit(limit).with_for_update(skip_locked=True)
    with target.engine.connect() as connection:
        if target.name == "postgresql":
            sql = str(query.compile(target.engine, compile_kwargs={"literal_binds": True}))
            plan = connection.execute(text(
                f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}")).scalar_one()
            top = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
            work = int(top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0))
        else:
            reads = text("SHOW SESSION STATUS LIKE 'Handler_read%'")
            before = sum(int(value) for _, value in connection.execute(reads))
            connection.execute(query).all()
            work = sum(int(value) for _, value in connection.execute(reads)) - before
        connection.rollback()
    return work


def mark_published(target: Target, message_ids: list[str]) -> None:
    """Record ``message_ids`` as published, as the relay does right after its claim (the
    claimed stubs leave the claim index)."""
    with target.engine.begin() as connection:
        now = utc_now()
        connection.execute(update(message_stub).where(stub.message_id.in_(message_ids)).values(
            published_at=now, next_resend_at=now + timedelta(seconds=60), lease_owner=None,
            lease_until=None, queue_id=0, queue_offset=0))


def timed_claims(args: argparse.Namespace, target: Target, count: int) -> list[float]:
    """``count`` relay claims of ``--batch`` stubs each, one after the other: their times."""
    took: list[float] = []
    claimed = 0
    for _ in range(count):
        now = utc_now()
        started = time.perf_counter()
        rows = claim_stubs(target.engine, unpublished_due(now, 5), owner="bench-claims",
                           now=now, lease=timedelta(hours=1), limit=args.batch)
        took.append(time.perf_counter() - started)
        claimed += len(rows)
        mark_published(target, [row.message_id for row in rows])  # as the relay records
    if claimed != count * args.batch:
        raise BenchError(f"claimed {claimed} stubs, expected {count * args.batch}")
    return took


def without_claim_index(args: argparse.Namespace, target: Target) -> dict:
    """The same claims through the former ``(status, next_resend_at)`` index alone: the claim
    index dropped, measured, built again."""
    [index] = data.claim_indexes(target.engine)
    with target.engine.begin() as connection:
        index.drop(connection)
    data.analyze(target.engine)
    try:
        work = claim_work(target, args.batch)
        result = {**latency_ms(timed_claims(args, target, max(args.claims // 10, 5))),
                  "work": work}
    finally:
        with target.engine.begin() as connection:
            index.create(connection)
        data.analyze(target.engine)
    return result


def claims_phase(args: argparse.Namespace, target: Target) -> dict:
    extra = max(args.claims // 10, 5) * args.batch if args.compare_index else 0
    target.fresh(args.claims * args.batch + extra)
    data.analyze(target.engine)
    work = claim_work(target, args.batch)
    result = {**latency_ms(timed_claims(args, target, args.claims)), "work": work}
    if args.compare_index:  # the index entries the claims left behind count for both
        result["work_after_claims"] = claim_work(target, args.batch)
        result["without_claim_index"] = without_claim_index(args, target)
    return result


def open_store(args: argparse.Namespace) -> tuple[App, Path]:
    root = Path(tempfile.mkdtemp(prefix="outbox-scale-", dir=args.dir))
    return App(store_url=root / "store"), root


def relay_phase(args: argparse.Namespace, target: Target, app: App) -> dict:
    target.fresh(args.relay_stubs)
    producer = CountingProducer(app.client)
    relay = Relay(producer, target.engine, options=RelayOptions(batch_size=args.batch),
                  owner="bench-relay")
    started = time.perf_counter()
    while relay.publish_due():
        pass
    elapsed = time.perf_counter() - started
    if relay.stats.published != args.relay_stubs or relay.stats.failed:
        raise BenchError(f"relay published {relay.stats.published} of {args.relay_stubs} "
                         f"({relay.stats.failed} failed)")
    return {"stubs_per_s": round(args.relay_stubs / elapsed),
            "claim_publish_record_ms": round(elapsed / (args.relay_stubs / args.batch) * 1000, 2)}


def unpublished(engine: Engine, first: str, last: str) -> int:
    with engine.connect() as connection:
        return int(connection.execute(select(func.count()).where(
            stub.message_id.between(first, last), stub.published_at.is_(None))).scalar_one())


def four_relays_phase(args: argparse.Namespace, target: Target, app: App) -> dict:
    first, last = target.fresh(args.relay_stubs)
    producer = CountingProducer(app.client)
    engines = [outbox.create_database_engine(target.url) for _ in range(4)]
    relays = [Relay(producer, engine, options=RelayOptions(batch_size=args.batch),
                    owner=f"bench-relay-{n}") for n, engine in enumerate(engines)]
    errors: list[BaseException] = []

    def work(relay: Relay) -> None:
        try:
            while relay.publish_due() or unpublished(relay.engine, first, last):
                pass
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(relay,)) for relay in relays]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    for engine in engines:
        engine.dispose()
    if errors:
        raise BenchError(f"a relay failed: {errors[0]!r}") from errors[0]
    ids = {data.stub_id(n) for n in range(target.next_number - args.relay_stubs,
                                          target.next_number)}
    twice = sum(1 for key, count in producer.counts.items() if count > 1)
    missing = len(ids - set(producer.counts))
    if twice or missing or set(producer.counts) - ids:
        raise BenchError(f"4 relays: {twice} stubs published more than once, {missing} never")
    return {"stubs_per_s": round(args.relay_stubs / elapsed),
            "published": sum(producer.counts.values()), "published_twice": twice,
            "per_relay": [relay.stats.published for relay in relays]}


def index_report(target: Target) -> dict:
    data.analyze(target.engine)
    rows = data.row_count(target.engine)
    sizes = data.index_sizes(target.engine)
    return {"rows": rows, "bytes": sizes,
            "bytes_per_row": {name: round(size / max(rows, 1), 1)
                              for name, size in sizes.items()}}


def vacuum(target: Target) -> None:
    if target.name == "postgresql":
        with target.engine.connect().execution_options(
                isolation_level="AUTOCOMMIT") as connection:
            connection.execute(text("VACUUM message_stub"))


def churn_phase(args: argparse.Namespace, target: Target, size: int) -> dict:
    """One compressed day: insert, publish, confirm and clean up N/168 stubs an hour."""
    before = index_report(target)
    per_step = max(size // (7 * DAY_STEPS), 1)
    policy = CleanupPolicy(batch_size=5_000, max_batches=1_000_000)
    deleted = 0
    started = time.perf_counter()
    for step in range(1, DAY_STEPS + 1):
        moment = target.base + timedelta(hours=step)
        first, last = target.fresh(per_step, moment)
        in_step = stub.message_id.between(first, last)
        with target.engine.begin() as connection:
            connection.execute(update(message_stub).where(in_step).values(
                published_at=moment, send_count=1, queue_id=step % 8,
                queue_offset=step, log_position=step, offset_msg_id="bench",
                next_resend_at=moment + timedelta(seconds=60), updated_at=moment))
        with target.engine.begin() as connection:
            connection.execute(update(message_stub).where(in_step).values(
                status="confirmed", confirmed_at=moment + timedelta(seconds=1),
                updated_at=moment + timedelta(seconds=1)))
        deleted += run_cleanup(target.engine, policy, now=moment).stubs
        if step % args.vacuum_every == 0:
            vacuum(target)
    elapsed = time.perf_counter() - started
    after = index_report(target)
    ratios = {name: round(after["bytes_per_row"][name] / per_row, 2)
              for name, per_row in before["bytes_per_row"].items()
              if per_row and name in after["bytes_per_row"]}
    worst = max(ratios.values(), default=0.0)
    return {"inserted": per_step * DAY_STEPS, "deleted": deleted, "seconds": round(elapsed, 1),
            "before": before, "after": after, "growth": ratios, "worst_growth": worst,
            "within_bound": worst <= args.bloat_bound}


def run_size(args: argparse.Namespace, target: Target, size: int) -> dict:
    result: dict[str, Any] = {"database": target.name, "size": size}
    result["load"] = load_phase(args, target, size)
    if "claims" in args.phases:
        result["claims_ms"] = claims_phase(args, target)
        progress(args, f"{target.name} {size}: claims {result['claims_ms']}")
    if "relay" in args.phases:
        app, root = open_store(args)
        try:
            result["relay"] = relay_phase(args, target, app)
            result["four_relays"] = four_relays_phase(args, target, app)
        finally:
            app.stop()
            shutil.rmtree(root, ignore_errors=True)
        progress(args, f"{target.name} {size}: relay {result['relay']}, 4 relays "
                       f"{result['four_relays']['stubs_per_s']}/s")
    if "churn" in args.phases:
        result["churn"] = churn_phase(args, target, size)
        progress(args, f"{target.name} {size}: churn growth {result['churn']['growth']}")
    if "cleanup" in args.phases:
        result["cleanup"] = cleanup_phase(args, target)
        progress(args, f"{target.name} {size}: cleanup {result['cleanup']}")
    return result


def targets(args: argparse.Namespace) -> list[Target]:
    chosen = []
    if not args.no_postgres:
        chosen.append(Target("postgresql", args.postgres))
    if not args.no_mariadb:
        chosen.append(Target("mariadb", args.mariadb))
    return chosen


def run(args: argparse.Namespace) -> dict:
    results = []
    for target in targets(args):
        try:
            with mariadb_settings(args, target) as settings:
                for size in args.sizes:
                    result = run_size(args, target, size)
                    if target.name == "mariadb":
                        result["innodb_buffer_pool_mib"] = pool_mib(target)
                        result["mariadb_set"] = settings
                    results.append(result)
        finally:
            target.dispose()
    return {"sizes": args.sizes, "results": results}


def render(report: dict) -> None:
    """The figures as Markdown tables (the ones bench/README.md shows)."""
    print("| db | stubs | load rows/s | claim p50 / p99 ms | claim work | without the claim "
          "index: p50 / p99 ms, work | relay stubs/s | 4 relays stubs/s, dup |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in report["results"]:
        if "claims_ms" not in r or "relay" not in r:
            continue
        claims = r["claims_ms"]
        old = claims.get("without_claim_index")
        before = f"{old['p50']} / {old['p99']}, {old['work']:,}" if old else "—"
        after = claims.get("work_after_claims")
        work = f"{claims['work']:,}" + (f" → {after:,}" if after is not None else "")
        print(f"| {r['database']} | {r['size']:,} | {r['load']['rows_per_s']:,} | "
              f"{claims['p50']} / {claims['p99']} | {work} | {before} | "
              f"{r['relay']['stubs_per_s']:,} | {r['four_relays']['stubs_per_s']:,}, "
              f"{r['four_relays']['published_twice']} |")
    print()
    modes = {c["producers"] for r in report["results"] for c in r.get("cleanup", [])}
    if modes:
        print(f"Cleanup under load, producers as {' and '.join(sorted(modes))}:")
    print("| db | stubs | index growth after a day (worst) | cleanup batch | rows/min | "
          "producer p99 / max ms before | during | lock waiters |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in report["results"]:
        growth = f"{r['churn']['worst_growth']}×" if "churn" in r else "—"
        for c in r.get("cleanup", []):
            calm, during = c["producers_before_ms"], c["producers_during_ms"]
            how = "" if c["how"] == "product" else f" ({c['how']})"
            how += f" × {c['workers']} workers" if c.get("workers", 1) > 1 else ""
            print(f"| {r['database']} | {r['size']:,} | {growth} | "
                  f"{c['batch_size']}{how} | {c['rows_per_min']:,} | {calm['p99']} / {calm['max']} "
                  f"| {during['p99']} / {during['max']} | {c['lock_waiters_max']} |")


def main(argv: list[str] | None = None) -> int:
    return run_and_print(run, render, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
