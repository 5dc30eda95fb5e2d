"""Abnormal-recovery time of the store after a ``kill -9``, for the durability benchmark.

``measure_recovery`` starts ``python -m bench.durability_bench --recovery-writer DIR`` as a child.
The child (``recovery_writer``) opens an ASYNC store, writes ``--recovery-mib`` of 1 KiB messages
with keys (``put_messages`` batches of 256, queue = batch number % 8, stopping before the next
batch would pass the size, so 256 MiB segments hold 1 GiB in exactly 4), waits until dispatch
caught up, prints one JSON line ("ready") and blocks on stdin. The parent kills it with SIGKILL:
the store is never closed, its ``abort`` marker stays, and no checkpoint is written, so the next
open runs abnormal recovery. A process crash keeps the page cache, so nothing needs flushing for
the data to survive; the parent runs ``os.sync()`` *before* the clock so write-back of the
child's dirty pages does not compete with the timed open (the log is then read from a warm page
cache: a process crash, not a machine crash).

Timed: ``MessageStore.open(config)`` (load, recovery scan and truncation, re-dispatch of what the
derived files may miss) and then ``wait_dispatched()``. Checked afterwards: the queues hold exactly
the child's message count, and ``query_by_key`` finds the last key. The store's ``[recovery]`` log
lines during open are captured to report how much log was re-dispatched.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from bench.peers import BenchError
from bench.store_bench import body_pool, build_messages, progress

TOPIC = "bench"
RECOVERY_BODY_BYTES = 1024
WRITE_BATCH = 256
QUEUE_COUNT = 8
MIB = 1 << 20
GIB = 1 << 30
CHILD_TIMEOUT_S = 600
WAIT_DISPATCHED_TIMEOUT_MS = 300_000
LOG_LINES_MAX = 64
REDISPATCH_LINE = re.compile(r"re-dispatching log positions (\d+)\.\.(\d+)")
REPO_ROOT = Path(__file__).resolve().parents[1]


def recovery_config(root: Path, args: argparse.Namespace):
    """ASYNC flush, ``--recovery-segment-mib`` segments, one key-index file for every key."""
    from postbox.storage_engine import CommitLogConfig, KeyIndexConfig, StoreConfig

    keys_max = args.recovery_mib * MIB // RECOVERY_BODY_BYTES  # records are larger than bodies
    return StoreConfig(
        root_dir=root,
        commit_log=CommitLogConfig(segment_size_bytes=args.recovery_segment_mib * MIB),
        key_index=KeyIndexConfig(slot_count_max=keys_max, entry_count_max=keys_max + 16))


# ---------------------------------------------------------------- the child


def recovery_writer(args: argparse.Namespace) -> int:
    """Child process: fill a store, report, then wait to be killed (never closes the store)."""
    from postbox.storage_engine import MessageStore

    store = MessageStore.open(recovery_config(Path(args.recovery_writer), args))
    pool, target = body_pool(RECOVERY_BODY_BYTES, args.seed), args.recovery_mib * MIB
    count = end = batch_bytes = 0
    start = time.perf_counter()
    while end + batch_bytes <= target:
        results = store.put_messages(build_messages(pool, count, count + WRITE_BATCH),
                                     queue_id=(count // WRITE_BATCH) % QUEUE_COUNT)
        count += WRITE_BATCH
        new_end = results[-1].log_position + results[-1].store_size
        batch_bytes, end = new_end - end, new_end
    write_s = time.perf_counter() - start
    if not store.wait_dispatched(timeout_ms=WAIT_DISPATCHED_TIMEOUT_MS):
        print(f"wait_dispatched(timeout_ms={WAIT_DISPATCHED_TIMEOUT_MS}) False", file=sys.stderr)
        return 1
    print(json.dumps({"messages": count, "log_bytes": end, "write_seconds": write_s,
                      "dispatched_seconds": time.perf_counter() - start}), flush=True)
    sys.stdin.read()  # the parent kills us here; EOF (parent gone) also ends without close()
    return 0


# ---------------------------------------------------------------- the parent


def run_and_kill_writer(args: argparse.Namespace, root: Path) -> dict:
    """Start the writer, wait for its report, SIGKILL it; returns the report."""
    command = [sys.executable, "-m", "bench.durability_bench", "--recovery-writer", str(root),
               "--recovery-mib", str(args.recovery_mib), "--recovery-segment-mib",
               str(args.recovery_segment_mib), "--seed", str(args.seed), "--dir", args.dir]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    with tempfile.TemporaryFile() as stderr:
        child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=stderr, cwd=REPO_ROOT, env=env, text=True)
        watchdog = threading.Timer(CHILD_TIMEOUT_S, child.kill)
        watchdog.start()
        try:
            line = child.stdout.readline()
        finally:
            watchdog.cancel()
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
            child.stdin.close()
            child.stdout.close()
        stderr.seek(0)
        if not line:
            raise BenchError(f"recovery writer exited {child.returncode} without reporting:\n"
                             f"{stderr.read()[-4000:].decode(errors='replace')}")
    if not (root / "abort").exists():
        raise BenchError(f"{root}/abort is missing after kill -9: recovery would not be abnormal")
    return json.loads(line)


class _LogLines(logging.Handler):
    """Keeps the first ``LOG_LINES_MAX`` formatted messages."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.lines) < LOG_LINES_MAX:
            self.lines.append(record.getMessage())


@contextlib.contextmanager
def store_log_lines() -> Iterator[list[str]]:
    """The storage engine's INFO+ log messages while the block runs."""
    logger, handler = logging.getLogger("postbox.storage_engine"), _LogLines()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def check_recovered(store, written: dict) -> None:
    """Every message the child wrote is in the queues and the last key is found."""
    stored = sum(store.max_offset(TOPIC, q) for q in range(QUEUE_COUNT))
    if stored != written["messages"]:
        raise BenchError(f"after recovery the queues hold {stored} messages; the child wrote "
                         f"{written['messages']}")
    last_key = f"k{written['messages'] - 1}"
    if len(store.query_by_key(TOPIC, last_key)) != 1:
        raise BenchError(f"after recovery query_by_key({TOPIC!r}, {last_key!r}) is not 1 message")


def redispatched_bytes(lines: list[str]) -> int | None:
    """Log bytes the recovery re-dispatched, from its ``[recovery]`` line (None: not logged)."""
    spans = [REDISPATCH_LINE.search(line) for line in lines]
    spans = [(int(m.group(1)), int(m.group(2))) for m in spans if m]
    return sum(end - start for start, end in spans) if spans else None


def time_recovery(args: argparse.Namespace, root: Path, written: dict) -> dict:
    """Seconds for ``open`` and for ``open`` + ``wait_dispatched`` of the crashed store."""
    from postbox.storage_engine import MessageStore

    with store_log_lines() as lines:
        start = time.perf_counter()
        store = MessageStore.open(recovery_config(root, args))
        try:
            open_s = time.perf_counter() - start
            if not store.wait_dispatched(timeout_ms=WAIT_DISPATCHED_TIMEOUT_MS):
                raise BenchError(f"wait_dispatched(timeout_ms={WAIT_DISPATCHED_TIMEOUT_MS}) "
                                 "False after recovery")
            total_s = time.perf_counter() - start
            check_recovered(store, written)
            stats_recovery = store.stats().get("recovery")
        finally:
            store.close()
    gib = written["log_bytes"] / GIB
    return {"open_seconds": open_s, "seconds": total_s, "seconds_per_gib": total_s / gib,
            "redispatched_bytes": redispatched_bytes(lines), "stats_recovery": stats_recovery,
            "recovery_log": [line for line in lines if line.startswith("[")]}


def measure_recovery(args: argparse.Namespace) -> dict:
    """Write ``--recovery-mib`` in a child, kill it, time the abnormal recovery."""
    root = Path(tempfile.mkdtemp(prefix="postbox-recovery-", dir=args.dir))
    try:
        progress(args, f"recovery: child writes {args.recovery_mib} MiB of 1 KiB messages "
                 f"({args.recovery_segment_mib} MiB segments), then kill -9")
        written = run_and_kill_writer(args, root)
        os.sync()
        progress(args, "recovery: timing open + wait_dispatched")
        timed = time_recovery(args, root, written)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"body_bytes": RECOVERY_BODY_BYTES, "target_mib": args.recovery_mib,
            "segment_mib": args.recovery_segment_mib, "written": written} | timed
