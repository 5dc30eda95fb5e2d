"""Durability benchmark: SYNC-flush puts against a bare group-commit harness, and crash recovery.

Run ``python -m bench.durability_bench`` (full run, ~1.5 min on 2 cores), add ``--quick`` for a
short run (~15 s) and ``--json`` for one JSON document on stdout (progress goes to stderr
otherwise). Everything is measured in this one run on this machine, so every ratio is between
figures of the same run. Rows, with 1, 8 and 32 producer threads (``--threads``), each thread
putting ``--count / threads`` messages of 100 B and timing every put with ``perf_counter_ns``:

1. **Postbox SYNC**: ``MessageStore.put_message`` on a fresh store in ``FlushMode.SYNC`` (256 MiB
   segments, key index sized for the run), topic ``bench``, queue = thread index % 8, one key and
   one tag per message (as in ``bench.store_bench``). Throughput, p50/p99 latency,
   ``FLUSH_DISK_TIMEOUT`` count, and the block device's flush-request count during the row
   (``/sys/dev/block/M:m/stat``). A row is flagged "not flushing?" when its p50 latency is below
   half the bare harness's median ``fdatasync`` (a SYNC put waits for at least one) or the device
   saw fewer than half the flushes group commit needs (puts / threads).
2. **Bare group commit** (``bench.group_commit``), no store: records of the store's record size
   appended under one lock, each producer waiting until one flusher thread's ``fdatasync`` covered
   it; written through an ``mmap`` (the store's write path: the like-for-like baseline for the
   target "SYNC with 8 threads >= 70 % of bare") and with ``os.pwrite``.
3. **persist-queue** ``SQLiteQueue.put`` with ``auto_commit=True``, ``multithreading=True`` (one
   shared put connection behind its transaction lock, so it is thread-safe), WAL and
   ``PRAGMA synchronous=FULL`` set explicitly: every put is a commit that fsyncs the WAL.
4. **ASYNC put**, 1 thread: ``bench.store_bench``'s own put_message measurement (clock until the
   last message is readable), to show the core figure is unchanged.
5. **Abnormal recovery** (``bench.crash_recovery``): a child process writes ``--recovery-mib``
   (1 GiB; 128 MiB with ``--quick``) of 1 KiB messages with keys, is killed with SIGKILL, and
   the parent times ``MessageStore.open`` + ``wait_dispatched`` against <= 10 s/GiB.

The thread rows run ``--reps`` times, interleaved (all variants for one thread count back to
back); the rep with the median throughput is reported. Temp dirs go under ``--dir`` (default
``.postbox/bench-tmp`` in the repo, the repo's disk) and are removed afterwards, also on failure.
A wrong result raises ``BenchError`` (exit status 2). Targets are printed, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import struct
import sys
import zlib
from pathlib import Path

from bench.crash_recovery import measure_recovery, recovery_writer
from bench.durability_report import TARGETS, render
from bench.group_commit import GroupCommitFile, WriteMode
from bench.peers import BenchError, run_and_print
from bench.producers import run_producers
from bench.store_bench import (
    body_pool,
    build_messages,
    fresh_store,
    machine_facts,
    progress,
    time_single_puts,
)
from bench.workdir import temp_dir

TOPIC = "bench"
BODY_BYTES = 100
SYNC_QUEUE_COUNT = 8
MIB = 1 << 20
REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = REPO_ROOT / ".postbox" / "bench-tmp"
WAIT_DISPATCHED_TIMEOUT_MS = 120_000
NOT_FLUSHING_FRACTION = 0.5  # see the module docstring, row 1
BARE_FILE_SLACK_BYTES = MIB
ASYNC_SEGMENT_MIB = 1024  # as bench.store_bench's default, so the ASYNC figure is the core one
RECORD_HEADER = struct.Struct("<iiI")  # TOTALSIZE, MAGIC (RocketMQ V1), BODYCRC
RECORD_MAGIC = -626843481
assert RECORD_HEADER.size == 12


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options; ``--quick`` only changes the defaults of the sizes."""
    p = argparse.ArgumentParser(prog="python -m bench.durability_bench", description=__doc__.split(
        "\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short run: fewer puts, 128 MiB recovery")
    p.add_argument("--threads", default="1,8,32", help="producer thread counts, comma-separated")
    p.add_argument("--count", type=int, help="puts per thread-count row (default 12 000; "
                   "quick 2 400), split evenly over the threads")
    p.add_argument("--reps", type=int, help="repetitions of the thread rows (default 5; quick 3)")
    p.add_argument("--async-count", type=int, help="ASYNC puts (default 100 000; quick 20 000)")
    p.add_argument("--segment-mib", type=int, default=256, help="SYNC stores' segment size")
    p.add_argument("--recovery-mib", type=int, help="log written before the crash (default "
                   "1024; quick 128; 0 skips recovery)")
    p.add_argument("--recovery-segment-mib", type=int,
                   help="segment size of the crashed store (default recovery-mib / 4)")
    p.add_argument("--dir", default=str(DEFAULT_DIR), help="parent of the temp dirs")
    p.add_argument("--seed", type=int, default=20240601, help="seed for the bodies")
    p.add_argument("--json", action="store_true", help="print one JSON document, no table")
    p.add_argument("--recovery-writer", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    quick = args.quick
    defaults = {"count": 2_400 if quick else 12_000, "reps": 3 if quick else 5,
                "async_count": 20_000 if quick else 100_000,
                "recovery_mib": 128 if quick else 1024}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.recovery_segment_mib is None:
        args.recovery_segment_mib = max(1, args.recovery_mib // 4)
    args.thread_list = [int(t) for t in args.threads.split(",") if t.strip()]
    if not args.thread_list or min(args.thread_list) < 1 or args.count < max(args.thread_list):
        p.error("--threads must be positive and --count at least the largest thread count")
    if args.reps < 1 or args.async_count < 1 or args.recovery_mib < 0:
        p.error("--reps and --async-count must be positive, --recovery-mib not negative")
    return args


# ---------------------------------------------------------------- helpers


def device_flush_count(path: Path) -> int | None:
    """Flush requests completed by the block device holding ``path`` (field 16 of
    ``/sys/dev/block/M:m/stat``), or None when the device or field is not there."""
    st_dev = os.stat(path).st_dev
    stat = Path(f"/sys/dev/block/{os.major(st_dev)}:{os.minor(st_dev)}/stat")
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(stat.read_text().split()[15])
    return None


def flush_delta(before: int | None, path: Path) -> int | None:
    """Device flushes since ``before`` (None when not countable)."""
    after = device_flush_count(path)
    return None if before is None or after is None else after - before


def split_count(args: argparse.Namespace, threads: int) -> int:
    """Puts per thread so a row does about ``--count`` puts in total."""
    return args.count // threads


# ---------------------------------------------------------------- Postbox SYNC rows


def sync_config(root: Path, put_count: int, segment_mib: int):
    """SYNC flush, ``segment_mib`` segments, one key-index file sized for ``put_count`` keys."""
    from postbox.storage_engine import (
        CommitLogConfig,
        FlushConfig,
        FlushMode,
        KeyIndexConfig,
        StoreConfig,
    )

    return StoreConfig(root_dir=root, flush=FlushConfig(mode=FlushMode.SYNC),
                       commit_log=CommitLogConfig(segment_size_bytes=segment_mib * MIB),
                       key_index=KeyIndexConfig(slot_count_max=max(1024, put_count),
                                                entry_count_max=put_count + 16))


def check_stored(store, put_count: int) -> None:
    """After dispatch, the queues of ``TOPIC`` must hold exactly ``put_count`` messages."""
    if not store.wait_dispatched(timeout_ms=WAIT_DISPATCHED_TIMEOUT_MS):
        raise BenchError(f"wait_dispatched(timeout_ms={WAIT_DISPATCHED_TIMEOUT_MS}) False")
    stored = sum(store.max_offset(TOPIC, q) for q in range(SYNC_QUEUE_COUNT))
    if stored != put_count:
        raise BenchError(f"SYNC store holds {stored} messages in {TOPIC!r}, put {put_count}")


def measure_store_sync(args: argparse.Namespace, threads: int, pool: list[bytes]) -> dict:
    """One Postbox SYNC row: ``threads`` producers on a fresh store."""
    from postbox.storage_engine import MessageStore, PutStatus

    per_thread = split_count(args, threads)
    with temp_dir(args.dir, "sync") as root:
        config = sync_config(root, threads * per_thread, args.segment_mib)
        with MessageStore.open(config) as store:
            batches = [build_messages(pool, t * per_thread, (t + 1) * per_thread)
                       for t in range(threads)]

            def make_put(t: int):
                put, messages, queue_id = store.put_message, batches[t], t % SYNC_QUEUE_COUNT
                return lambda i: put(messages[i], queue_id).status is PutStatus.PUT_OK

            before, syncs_before = device_flush_count(root), store_flush_count(store)
            run = run_producers(threads, per_thread, make_put)
            syncs_after = store_flush_count(store)
            row = run.summary() | {"device_flushes": flush_delta(before, root), "syncs": None
                                   if syncs_after is None else syncs_after - syncs_before}
            check_stored(store, threads * per_thread)
    return row


def store_flush_count(store) -> int | None:
    """The store's commit-log flush count from ``stats()["flush"]`` (None if not reported)."""
    flush = store.stats().get("flush")
    return flush.get("flush_count") if isinstance(flush, dict) else None


def record_size(args: argparse.Namespace, pool: list[bytes]) -> int:
    """Bytes the store writes for the SYNC rows' largest-key message (a throwaway store)."""
    from postbox.storage_engine import MessageStore

    last = args.count - 1
    with temp_dir(args.dir, "probe") as root, \
            MessageStore.open(sync_config(root, 16, 1)) as store:
        return store.put_message(build_messages(pool, last, last + 1)[0]).store_size


# ---------------------------------------------------------------- bare harness and persist-queue


def bare_record(body: bytes, size: int) -> bytes:
    """A record of ``size`` bytes: a RocketMQ-like header, the body, zero padding."""
    header = RECORD_HEADER.pack(size, RECORD_MAGIC, zlib.crc32(body))
    return (header + body).ljust(size, b"\0")


def measure_bare(args: argparse.Namespace, threads: int, pool: list[bytes], size: int,
                 mode: WriteMode) -> dict:
    """One bare group-commit row (``bench.group_commit``)."""
    per_thread = split_count(args, threads)
    records = [bare_record(pool[t % len(pool)], size) for t in range(threads)]
    with temp_dir(args.dir, "bare") as root:
        log = GroupCommitFile(root / "log", threads * per_thread * size + BARE_FILE_SLACK_BYTES,
                              mode)
        try:
            def make_put(t: int):
                append, record = log.append, records[t]
                return lambda i: append(record) is None

            before = device_flush_count(root)
            run = run_producers(threads, per_thread, make_put)
            devices = flush_delta(before, root)
        finally:
            log.close()
    return run.summary() | {"device_flushes": devices, "syncs": log.sync_count,
                            "sync_p50_us": statistics.median(log.sync_ns) / 1000}


def full_sync_queue(directory: Path) -> tuple:
    """A persist-queue ``SQLiteQueue`` that commits and fsyncs every put, usable from threads,
    and a description of its setup. ``synchronous`` is set on its put connection (``_putter``,
    the only handle to it)."""
    from persistqueue import SQLiteQueue

    queue = SQLiteQueue(str(directory), auto_commit=True, multithreading=True)
    queue._putter.execute("PRAGMA synchronous=FULL")
    mode = queue._putter.execute("PRAGMA synchronous").fetchone()[0]
    journal = queue._putter.execute("PRAGMA journal_mode").fetchone()[0]
    if mode != 2:
        queue.close()
        raise BenchError(f"persist-queue put connection has synchronous={mode}, wanted 2 (FULL)")
    return queue, f"auto_commit=True, multithreading=True, journal={journal}, synchronous=FULL"


def measure_persist_queue(args: argparse.Namespace, threads: int, pool: list[bytes]) -> dict:
    """One persist-queue row: ``threads`` producers sharing one queue."""
    per_thread = split_count(args, threads)
    with temp_dir(args.dir, "pq") as root:
        queue, setup = full_sync_queue(root / "queue")
        try:
            def make_put(t: int):
                put, body = queue.put, pool[t % len(pool)]
                return lambda i: put(body) is not None

            before = device_flush_count(root)
            run = run_producers(threads, per_thread, make_put)
            devices = flush_delta(before, root)
            stored = queue.qsize()
        finally:
            queue.close()
    if stored != run.put_count:
        raise BenchError(f"persist-queue holds {stored} items after {run.put_count} puts")
    return run.summary() | {"device_flushes": devices, "setup": setup}


# ---------------------------------------------------------------- rows, reps, checks


VARIANTS = ("postbox_sync", "bare_mmap", "bare_pwrite", "persist_queue")


def thread_rep(args: argparse.Namespace, threads: int, pool: list[bytes], size: int) -> dict:
    """Every variant once for one thread count, back to back."""
    progress(args, f"{threads} thread(s): Postbox SYNC, bare mmap, bare pwrite, persist-queue")
    return {"postbox_sync": measure_store_sync(args, threads, pool),
            "bare_mmap": measure_bare(args, threads, pool, size, WriteMode.MMAP),
            "bare_pwrite": measure_bare(args, threads, pool, size, WriteMode.PWRITE),
            "persist_queue": measure_persist_queue(args, threads, pool)}


def median_row(rows: list[dict]) -> dict:
    """The repetition with the median throughput (lower middle for an even count)."""
    ranked = sorted(rows, key=lambda row: row["per_s"])
    return ranked[(len(ranked) - 1) // 2] | {"rep_per_s": [row["per_s"] for row in rows]}


def flushing_doubt(postbox: dict, bare: dict) -> str | None:
    """Why the SYNC row looks as if it did not flush, or None when it looks plausible."""
    floor_us = NOT_FLUSHING_FRACTION * bare["sync_p50_us"]
    if postbox["p50_us"] < floor_us:
        return (f"p50 {postbox['p50_us']:.0f} us < half the bare fdatasync median "
                f"({bare['sync_p50_us']:.0f} us)")
    needed = postbox["count"] / postbox["threads"]  # each flush confirms <= one put a thread
    for name, label in (("syncs", "store flushes"), ("device_flushes", "device flushes")):
        flushes = postbox[name]
        if flushes is not None and flushes < NOT_FLUSHING_FRACTION * needed:
            return (f"{flushes} {label} for {postbox['count']} puts by "
                    f"{postbox['threads']} threads")
    return None


def thread_rows(args: argparse.Namespace, pool: list[bytes], size: int) -> list[dict]:
    """Median rows per thread count, with ratios and the not-flushing check."""
    reps = {threads: [] for threads in args.thread_list}
    for rep in range(args.reps):
        progress(args, f"thread rows, rep {rep + 1}/{args.reps}")
        for threads in args.thread_list:
            reps[threads].append(thread_rep(args, threads, pool, size))
    rows = []
    for threads, runs in reps.items():
        row = {"threads": threads}
        for variant in VARIANTS:
            row[variant] = median_row([run[variant] for run in runs])
        postbox = row["postbox_sync"]["per_s"]
        row["ratio_vs_bare_mmap"] = postbox / row["bare_mmap"]["per_s"]
        row["ratio_vs_bare_pwrite"] = postbox / row["bare_pwrite"]["per_s"]
        row["ratio_vs_persist_queue"] = postbox / row["persist_queue"]["per_s"]
        row["not_flushing"] = flushing_doubt(row["postbox_sync"], row["bare_mmap"])
        rows.append(row)
    return rows


# ---------------------------------------------------------------- ASYNC and driver


def async_row(args: argparse.Namespace, pool: list[bytes]) -> dict:
    """``bench.store_bench``'s put_message ASYNC measurement, one producer."""
    progress(args, f"ASYNC put_message x{args.async_count}")
    store_args = argparse.Namespace(dir=args.dir, segment_mib=ASYNC_SEGMENT_MIB)
    with fresh_store(store_args) as store:
        messages = build_messages(pool, 0, args.async_count)
        seconds, calls_s, _ = time_single_puts(store, messages)
    return {"count": args.async_count, "seconds": seconds, "per_s": args.async_count / seconds,
            "calls_per_s": args.async_count / calls_s, "segment_mib": ASYNC_SEGMENT_MIB}


def run(args: argparse.Namespace) -> dict:
    """Every measurement; returns the report as plain data."""
    pool = body_pool(BODY_BYTES, args.seed)
    size = record_size(args, pool)
    report = {"machine": machine_facts(args), "targets": TARGETS,
              "settings": {name: getattr(args, name) for name in (
                  "quick", "thread_list", "count", "reps", "async_count", "segment_mib",
                  "recovery_mib", "recovery_segment_mib", "seed")},
              "body_bytes": BODY_BYTES, "record_bytes": size}
    report["threads"] = thread_rows(args, pool, size)
    report["async"] = async_row(args, pool)
    report["recovery"] = measure_recovery(args) if args.recovery_mib > 0 else None
    return report


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``python -m bench.durability_bench``."""
    args = parse_args(argv)
    if args.recovery_writer:
        return recovery_writer(args)
    created_dirs = [d for d in (Path(args.dir), *Path(args.dir).parents) if not d.exists()]
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    try:
        return run_and_print(run, render, args)
    finally:
        for directory in created_dirs:  # deepest first; only if empty (another run may use it)
            with contextlib.suppress(OSError):
                directory.rmdir()


if __name__ == "__main__":
    sys.exit(main())
