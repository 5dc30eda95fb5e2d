"""cProfile in every thread of the process, for ``bench.consume_bench --profile``.

``cProfile.Profile.enable`` profiles only the calling thread, while the framework's work happens
on its pull, consume and housekeeping threads. ``profiled_threads`` profiles the calling thread
and installs, through ``threading.setprofile``, a fresh profiler in every thread started inside
the block (the hook replaces itself with that thread's profiler on its first event). Every
profiler times with ``time.thread_time``, the CPU time of its own thread, so a thread blocked on
a lock, a queue or the GIL accrues nothing and the merged figures add up to the process's CPU
time: where the work goes, not where threads wait (contention shows only as the CPU it burns:
futex calls, context switches). ``thread_time`` is a system call, so functions making many small
calls carry much of the profiler's own cost; read the ranking, not the absolute seconds.
``top_functions`` merges them all and ranks by cumulative or own time. Not for use while another
profiler runs; threads started inside the block should end inside it.
"""

from __future__ import annotations

import contextlib
import cProfile
import pstats
import sys
import threading
import time
from collections.abc import Iterator


@contextlib.contextmanager
def profiled_threads() -> Iterator[list[cProfile.Profile]]:
    """Profile this thread and every thread started in the block; yields the profilers."""
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()

    def install(frame, event, arg) -> None:
        sys.setprofile(None)
        profile = cProfile.Profile(time.thread_time)
        with lock:
            profiles.append(profile)
        profile.enable()

    own = cProfile.Profile(time.thread_time)
    profiles.append(own)
    threading.setprofile(install)
    own.enable()
    try:
        yield profiles
    finally:
        own.disable()
        threading.setprofile(None)


def top_functions(profiles: list[cProfile.Profile], count: int, *,
                  key: str = "cumulative_s") -> list[dict]:
    """The ``count`` functions with the largest ``key`` (``cumulative_s`` or ``own_s``) over
    all ``profiles``."""
    rows = []
    for (filename, line, name), (_, calls, own_s, cumulative_s, _) in merged_stats(
            profiles).stats.items():
        rows.append({"function": f"{short_path(filename)}:{line}({name})", "calls": calls,
                     "own_s": own_s, "cumulative_s": cumulative_s})
    rows.sort(key=lambda row: row[key], reverse=True)
    return rows[:count]


def merged_stats(profiles: list[cProfile.Profile]) -> pstats.Stats:
    """One ``pstats.Stats`` over every profiler."""
    stats = pstats.Stats(profiles[0])
    for profile in profiles[1:]:
        stats.add(profile)
    return stats


def short_path(filename: str) -> str:
    """A file name from the package root down (``framework/consumer.py``), else as is."""
    for marker in ("/framework/", "/storage_engine/", "/bench/", "/lib/python"):
        index = filename.rfind(marker)
        if index >= 0:
            return filename[index + 1:]
    return filename
