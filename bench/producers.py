"""``run_producers``: N threads each doing M timed puts, for the durability benchmark.

Every thread gets its own put callable from ``make_put(thread_index)`` (built before the clock
starts), waits on a barrier, then calls it ``puts_per_thread`` times, timing each call with
``time.perf_counter_ns``. The clock starts when the barrier releases the threads and stops when
the last thread has finished. The process's user and system CPU time over the same span (every
thread: producers and whatever serves them) is taken from ``getrusage``. A put returns True when
the write was confirmed (durable) and False when it was stored without confirmation (e.g.
``FLUSH_DISK_TIMEOUT``); those are counted. An exception in any thread is re-raised in the
caller after all threads are joined.
"""

from __future__ import annotations

import gc
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.peers import BenchError

PutCall = Callable[[int], bool]  # put number i -> confirmed?


@dataclass(frozen=True)
class ProducerRun:
    """What one multi-threaded put run measured."""

    thread_count: int
    put_count: int
    seconds: float
    unconfirmed_count: int
    latencies_ns: list[int]  # sorted, one per put
    cpu_user_s: float = 0.0  # the whole process's, while the producers ran
    cpu_system_s: float = 0.0

    @property
    def per_s(self) -> float:
        return self.put_count / self.seconds

    def latency_us(self, quantile: float) -> float:
        """A latency quantile (nearest rank) in microseconds."""
        ranked = self.latencies_ns
        return ranked[min(len(ranked) - 1, int(quantile * len(ranked)))] / 1000

    def summary(self) -> dict:
        """Plain data for the report."""
        return {"threads": self.thread_count, "count": self.put_count, "seconds": self.seconds,
                "per_s": self.per_s, "p50_us": self.latency_us(0.50),
                "p99_us": self.latency_us(0.99), "max_us": self.latencies_ns[-1] / 1000,
                "unconfirmed": self.unconfirmed_count,
                "cpu_user_us_per_put": self.cpu_user_s * 1e6 / self.put_count,
                "cpu_system_us_per_put": self.cpu_system_s * 1e6 / self.put_count}


def run_producers(thread_count: int, puts_per_thread: int,
                  make_put: Callable[[int], PutCall]) -> ProducerRun:
    """Run ``thread_count`` producers of ``puts_per_thread`` timed puts each."""
    calls = [make_put(index) for index in range(thread_count)]
    latencies: list[list[int]] = [[] for _ in range(thread_count)]
    unconfirmed = [0] * thread_count
    errors: list[BaseException] = []
    started_ns: list[int] = []
    started_usage: list[resource.struct_rusage] = []

    def start_clocks() -> None:
        started_usage.append(resource.getrusage(resource.RUSAGE_SELF))
        started_ns.append(time.perf_counter_ns())

    barrier = threading.Barrier(thread_count, action=start_clocks)

    def produce(index: int) -> None:
        put, timings, clock = calls[index], latencies[index], time.perf_counter_ns
        try:
            barrier.wait()
            for i in range(puts_per_thread):
                start = clock()
                confirmed = put(i)
                timings.append(clock() - start)
                if not confirmed:
                    unconfirmed[index] += 1
        except BaseException as error:  # re-raised by the caller below
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=produce, args=(index,), name=f"producer-{index}")
               for index in range(thread_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed_s = (time.perf_counter_ns() - started_ns[0]) / 1e9 if started_ns else 0.0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    if errors:
        raise errors[0]
    merged = sorted(ns for timings in latencies for ns in timings)
    return ProducerRun(thread_count, len(merged), elapsed_s, sum(unconfirmed), merged,
                       usage.ru_utime - started_usage[0].ru_utime,
                       usage.ru_stime - started_usage[0].ru_stime)


def timed_threads(send: Callable[[], object], count: int, threads: int) -> dict:
    """``threads`` threads call ``send()`` ``count`` times in all, started together; the
    count, the seconds and the rate. A failed call is raised as ``BenchError`` once every
    thread has ended: the run measured something else."""
    shares = [count // threads + (1 if index < count % threads else 0)
              for index in range(threads)]
    failures: list[BaseException] = []
    start_line = threading.Barrier(threads + 1)

    def run(share: int) -> None:
        start_line.wait()
        try:
            for _ in range(share):
                send()
        except BaseException as error:  # reported below: the run is then wrong
            failures.append(error)

    workers = [threading.Thread(target=run, args=(share,)) for share in shares]
    for worker in workers:
        worker.start()
    gc.collect()
    start_line.wait()
    start = time.perf_counter()
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - start
    if failures:
        raise BenchError(f"a sender failed: {failures[0]!r}") from failures[0]
    return {"count": count, "seconds": seconds, "per_s": count / seconds}
