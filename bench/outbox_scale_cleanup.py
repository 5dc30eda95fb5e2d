"""The outbox scale bench's cleanup under load (``bench.outbox_scale_bench``, phase 6): producer
processes (or threads) sending stubs, PostgreSQL's lock-waiter sampler, the cleanup runs (the
product's batches, and with ``--cleanup-baseline`` the key lists they replaced), MariaDB's
buffer pool and server variables for a run; and the progress and latency helpers the bench
shares."""

from __future__ import annotations

import argparse
import collections
import contextlib
import multiprocessing
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import sessionmaker

from bench.peers import BenchError
from postbox import outbox
from postbox.outbox import cleanup
from postbox.outbox.cleanup import CleanupPolicy, CleanupReport, run_cleanup

if TYPE_CHECKING:
    from bench.outbox_scale_bench import Target


def progress(args: argparse.Namespace, line: str) -> None:
    print(f"[outbox-scale] {line}", file=sys.stderr, flush=True)


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def latency_ms(values: Sequence[float]) -> dict[str, float]:
    """p50/p99/max of ``values`` (seconds) in ms."""
    return {"p50": round(percentile(values, 0.5) * 1000, 2),
            "p99": round(percentile(values, 0.99) * 1000, 2),
            "max": round(max(values, default=0.0) * 1000, 2), "n": len(values)}


def _send_until(url: str, stop: Any, took: list[tuple[float, float]]) -> None:
    """Send stubs (``outbox.send`` + commit) until ``stop``, appending (start, seconds) per
    transaction (``time.monotonic``: one clock for every process of the machine)."""
    engine = outbox.create_database_engine(url)
    sessions = sessionmaker(engine)
    try:
        while not stop.is_set():
            started = time.monotonic()
            with sessions.begin() as session:
                outbox.send(session, "orders", {"order": 1}, tags="paid")
            took.append((started, time.monotonic() - started))
    finally:
        engine.dispose()


def _producer_process(url: str, stop: Any, results: Any) -> None:
    """One producer process: its timings (or its error) go to ``results`` at the end."""
    took: list[tuple[float, float]] = []
    try:
        results.put(("ready", None))
        _send_until(url, stop, took)
        results.put(("took", took))
    except BaseException as error:
        results.put(("error", repr(error)))


class Producers:
    """``count`` producers sending stubs in their own transactions, each timed: separate
    processes (the web processes of production, which share no interpreter with the cleanup
    worker), or with ``threads`` threads of this process (they compete with the cleanup for
    its interpreter lock). ``during(start, end)`` gives the seconds of the transactions
    that began in that window, once the block has ended."""

    def __init__(self, target: Target, count: int, *, threads: bool = False) -> None:
        self.url = target.url
        self.took: list[tuple[float, float]] = []
        self.errors: list[str] = []
        self._threads_mode = threads
        if threads:
            self._stop: Any = threading.Event()
            self._workers: list[Any] = [threading.Thread(target=self._run_thread, daemon=True)
                                        for _ in range(count)]
        else:
            context = multiprocessing.get_context("spawn")  # nothing inherited from this one
            self._stop, self._results = context.Event(), context.Queue()
            self._workers = [context.Process(target=_producer_process,
                                             args=(self.url, self._stop, self._results),
                                             daemon=True) for _ in range(count)]

    def _run_thread(self) -> None:
        try:
            _send_until(self.url, self._stop, self.took)
        except BaseException as error:  # reported on exit
            self.errors.append(repr(error))

    def __enter__(self) -> Producers:
        for worker in self._workers:
            worker.start()
        self._ready = 0
        if not self._threads_mode:  # every process imported before timing
            for _ in self._workers:
                kind, value = self._results.get(timeout=120)
                if kind == "error":
                    self.errors.append(value)
                else:
                    self._ready += 1  # it sends one more message: its timings or its error
        return self

    def during(self, start: float, end: float = float("inf")) -> list[float]:
        """Seconds of the transactions begun in [start, end)."""
        return [seconds for began, seconds in self.took if start <= began < end]

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if not self._threads_mode:
            for _ in range(self._ready):
                kind, value = self._results.get(timeout=120)
                if kind == "error":
                    self.errors.append(value)
                else:
                    self.took.extend(value)
        for worker in self._workers:
            worker.join(60)
        if self.errors:
            raise BenchError(f"a producer failed: {self.errors[0]}")


class LockSampler:
    """PostgreSQL: what the other backends of this database wait on, sampled every 20 ms —
    the most seen waiting on a lock at once, and a count per wait event."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.most = 0
        self.samples = 0
        self.events: collections.Counter[str] = collections.Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        if self.target.name != "postgresql":
            return
        with self.target.engine.connect() as connection:
            while not self._stop.wait(0.02):
                waits = connection.execute(text(
                    "SELECT wait_event_type, wait_event FROM pg_stat_activity "
                    "WHERE datname = current_database() AND state = 'active' "
                    "AND pid <> pg_backend_pid() AND wait_event IS NOT NULL")).all()
                connection.rollback()
                self.samples += 1
                self.events.update(f"{kind}:{event}" for kind, event in waits)
                self.most = max(self.most, sum(1 for kind, _ in waits if kind == "Lock"))

    def __enter__(self) -> LockSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def cleanup_runs(args: argparse.Namespace, target: Target) -> list[tuple[int, str]]:
    """(batch size, how) of each cleanup run: the product's way, then with
    ``--cleanup-baseline`` on PostgreSQL the key lists it replaced, a day each."""
    runs = [(size, "product") for size in args.cleanup_batch_sizes]
    if args.cleanup_baseline and target.name == "postgresql":
        runs += [(size, "key lists") for size in args.cleanup_batch_sizes]
    return runs


def timed_cleanup(target: Target, policy: CleanupPolicy, now: datetime,
                  how: str) -> tuple[CleanupReport, float]:
    """``run_cleanup`` at ``now``, the way ``how`` names; its report and seconds."""
    by_address = cleanup._deletes_by_address
    if how == "key lists":  # the baseline: what every database did before the TID batches
        cleanup._deletes_by_address = lambda _engine: False  # type: ignore[assignment]
    try:
        started = time.perf_counter()
        report = run_cleanup(target.engine, policy, now=now)
        return report, time.perf_counter() - started
    finally:
        cleanup._deletes_by_address = by_address  # type: ignore[assignment]


def cleanup_phase(args: argparse.Namespace, target: Target) -> list[dict]:
    """A day of confirmed stubs deleted per batch size while producers send."""
    results = []
    for day, (batch_size, how) in enumerate(cleanup_runs(args, target), start=2):
        policy = CleanupPolicy(batch_size=batch_size, max_batches=1_000_000,
                               workers=args.cleanup_workers)
        with Producers(target, args.producers, threads=args.producer_threads) as producers:
            calm_from = time.monotonic()
            time.sleep(2.0 if args.quick else 3.0)
            cleanup_from = time.monotonic()
            with LockSampler(target) as sampler:
                report, elapsed = timed_cleanup(target, policy,
                                                target.base + timedelta(days=day), how)
            cleanup_to = time.monotonic()
        calm = producers.during(calm_from, cleanup_from)
        during = producers.during(cleanup_from, cleanup_to)
        results.append({
            "how": how, "producers": "threads" if args.producer_threads else "processes",
            "batch_size": batch_size, "workers": args.cleanup_workers,
            "deleted": report.stubs, "seconds": round(elapsed, 2),
            "rows_per_min": round(report.stubs / elapsed * 60) if elapsed else 0,
            "producers_before_ms": latency_ms(calm), "producers_during_ms": latency_ms(during),
            "lock_waiters_max": sampler.most, "lock_samples": sampler.samples,
            "wait_events": dict(sampler.events.most_common(6))})
    return results


def global_value(target: Target, name: str) -> str:
    """A server variable's global value, as text."""
    with target.engine.connect() as connection:
        return str(connection.execute(text(f"SELECT @@GLOBAL.{name}")).scalar_one())


def pool_mib(target: Target) -> int:
    """MariaDB's ``innodb_buffer_pool_size`` now, in MiB."""
    return int(global_value(target, "innodb_buffer_pool_size")) >> 20


@contextlib.contextmanager
def buffer_pool(args: argparse.Namespace, target: Target) -> Iterator[None]:
    """On MariaDB with ``--innodb-buffer-pool-mib``: that buffer pool during the block, the
    former one after (the server resizes in the background: wait until it reports the size)."""
    mib = args.innodb_buffer_pool_mib
    if target.name != "mariadb" or mib is None:
        yield
        return
    former = pool_mib(target)

    def resize(size: int) -> None:
        with target.engine.connect() as connection:
            connection.execute(text(f"SET GLOBAL innodb_buffer_pool_size = {size << 20}"))
        deadline = time.monotonic() + 300
        while pool_mib(target) != size and time.monotonic() < deadline:
            time.sleep(0.5)
        progress(args, f"mariadb: innodb_buffer_pool_size {pool_mib(target)} MiB")

    resize(mib)
    try:
        yield
    finally:
        try:  # the server may refuse to shrink a full pool: the figures matter more
            resize(former)
        except OperationalError as error:
            progress(args, f"mariadb: innodb_buffer_pool_size not put back to {former} MiB "
                           f"({error.orig}); set it again by hand")


@contextlib.contextmanager
def mariadb_settings(args: argparse.Namespace, target: Target) -> Iterator[dict[str, str]]:
    """On MariaDB: the buffer pool of ``--innodb-buffer-pool-mib`` and every ``--mariadb-set
    NAME=VALUE`` (``SET GLOBAL``, e.g. ``innodb_log_file_size``, which MariaDB 10.11 resizes
    online) during the block, the former values after; yields the values in force."""
    settings = dict(args.mariadb_set) if target.name == "mariadb" else {}
    former = {name: global_value(target, name) for name in settings}

    def apply(values: dict[str, str]) -> None:
        with target.engine.connect() as connection:
            for name, value in values.items():
                connection.execute(text(f"SET GLOBAL {name} = {int(value)}"))

    with buffer_pool(args, target):
        apply(settings)
        try:
            in_force = {name: global_value(target, name) for name in settings}
            if in_force:
                progress(args, f"mariadb: {in_force}")
            yield in_force
        finally:
            apply(former)
