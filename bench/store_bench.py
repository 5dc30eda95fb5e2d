"""Store benchmark: Postbox put / get / key-lookup throughput and peer queues, in one run.

Run ``python -m bench.store_bench`` (or ``postbox bench store``); ``--help`` lists the options.
For every body size (100 B and 1 KiB by default; every message has one key and one tag):

* **put**: a fresh store in a temp dir, ASYNC flush; the clock runs from the first put until
  ``wait_dispatched()`` returned *and* ``get_message`` at the last put's queue offset returned
  FOUND, so dispatch (consume queues and key index) is included. Measured for single
  ``put_message`` calls (queue ``i % 4``), for ``put_messages`` batches (queue = batch number
  ``% 4``) and, on fewer messages, for ``put_message`` in SYNC flush mode (fsync per put). The
  time until the last put call returned is reported too ("calls only"). A bare ``write`` +
  ``fdatasync`` loop gives the most one producer can do with one flush per put on this disk; a
  SYNC rate well above it is flagged (SYNC flush not in effect).
* **get**: every message read back through ``get_message(max_count=32)`` following
  ``next_offset``, touching each body.
* **key lookups**: ``query_by_key`` on random existing keys; each must return exactly its message.
* **peers** (``bench.peers``): litequeue, diskcache, persist-queue and raw sqlite3, fewer
  messages, per-second rates. Ratios compare like with like: async per-message puts with
  per-message peers that do not fsync, async batches with batch peers, SYNC puts with peers that
  fsync per put. The headline is Postbox async put against the fastest non-fsyncing peer.
* **memory** (``--memory N``): in a child process, N 100-byte messages; peak ``RssAnon`` from
  ``/proc/self/status`` sampled every 100 000 messages (anonymous memory only: the mapped store
  files are file-backed pages and not counted). No tracemalloc (far too slow at millions).

Message objects are built before the clock starts; the store is closed after it stops. Figures
are medians over ``--reps`` fresh stores. Temp dirs are removed even when a step fails. A wrong
result (missing message, wrong lookup) raises ``BenchError``; store exceptions propagate as is.
Targets are printed next to the figures, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench.peers import PEERS, BenchError, measure_peer, ratios, run_and_print
from bench.report import NOTE, TARGETS, render

TOPIC = "bench"
GROUP = "bench"
QUEUE_COUNT = 4
BODY_POOL_SIZE = 1024
READ_BATCH = 32
RSS_SAMPLE_EVERY = 100_000
WAIT_DISPATCHED_TIMEOUT_MS = 120_000
MIB = 1 << 20
FSYNC_PROBE_COUNT = 500
SYNC_SLACK = 1.5  # a SYNC put rate above SYNC_SLACK x the bare fdatasync rate is implausible


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options; see the module docstring for what each phase measures."""
    p = argparse.ArgumentParser(prog="python -m bench.store_bench", description=__doc__.split(
        "\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--count", type=int, default=200_000, help="Postbox messages per body size")
    p.add_argument("--peer-count", type=int, default=20_000,
                   help="messages per non-fsyncing peer (capped at --count)")
    p.add_argument("--fsync-peer-count", type=int, default=5_000,
                   help="messages per fsync-per-put peer and for Postbox SYNC put (0: skip)")
    p.add_argument("--sizes", default="100,1024", help="body sizes in bytes, comma-separated")
    p.add_argument("--reps", type=int, default=3, help="repetitions; the median is reported")
    p.add_argument("--batch", type=int, default=256, help="messages per put_messages call")
    p.add_argument("--lookups", type=int, default=20_000, help="query_by_key calls per rep")
    p.add_argument("--memory", type=int, default=0, metavar="N",
                   help="also measure peak RssAnon writing N 100-byte messages (0: skip)")
    p.add_argument("--segment-mib", type=int, default=1024, help="commit-log segment size")
    p.add_argument("--only", choices=("postbox", "peers", "memory"), help="run one part only")
    p.add_argument("--dir", default=None, help="parent of the temp dirs (None: system temp)")
    p.add_argument("--seed", type=int, default=20240601, help="seed for bodies and key picks")
    p.add_argument("--json", action="store_true", help="print one JSON document, no table")
    p.add_argument("--memory-child", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.size_list = [int(size) for size in args.sizes.split(",") if size.strip()]
    if args.count < 1 or args.reps < 1 or args.batch < 1 or not args.size_list:
        p.error("--count, --reps, --batch must be positive and --sizes non-empty")
    if args.only == "memory" and args.memory < 1:
        p.error("--only memory needs --memory N")
    return args


# ---------------------------------------------------------------- machine facts and /proc


def proc_status_kb(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (``RssAnon``, ``VmHWM``, ...); -1 if absent."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def filesystem_of(path: str) -> str:
    """The filesystem type of the mount holding ``path`` (longest mount-point prefix)."""
    best, fs_type = "", "?"
    with contextlib.suppress(OSError), open("/proc/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            mount_point = fields[1]
            if (path == mount_point or path.startswith(mount_point.rstrip("/") + "/")) \
                    and len(mount_point) > len(best):
                best, fs_type = mount_point, fields[2]
    return fs_type


def machine_facts(args: argparse.Namespace) -> dict:
    """CPU, memory, Python and the temp dir's filesystem, for the top of the report."""
    cpu_model, mem_total_kb = "?", -1
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        cpu_model = next((line.split(":", 1)[1].strip() for line in cpuinfo
                          if line.startswith("model name")), "?")
    with contextlib.suppress(OSError), open("/proc/meminfo") as meminfo:
        mem_total_kb = int(next(line.split()[1] for line in meminfo
                                if line.startswith("MemTotal")))
    tmp_root = os.path.realpath(args.dir or tempfile.gettempdir())
    return {
        "cpu_count": os.cpu_count(), "cpu_affinity": len(os.sched_getaffinity(0)),
        "cpu_model": cpu_model, "mem_total_mb": round(mem_total_kb / 1024),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(), "tmp_dir": tmp_root,
        "tmp_filesystem": filesystem_of(tmp_root),
    }


# ---------------------------------------------------------------- Postbox measurements


def body_pool(size: int, seed: int) -> list[bytes]:
    """``BODY_POOL_SIZE`` random bodies of ``size`` bytes, reused round-robin."""
    rng = random.Random(f"{seed}:{size}")
    return [rng.randbytes(size) for _ in range(BODY_POOL_SIZE)]


def build_messages(pool: list[bytes], start: int, stop: int) -> list:
    """Messages ``start..stop-1``: key ``k{i}``, tag ``t``, a body from the pool."""
    from postbox.storage_engine import Message

    return [Message(TOPIC, pool[i % BODY_POOL_SIZE], tags="t", keys=[f"k{i}"])
            for i in range(start, stop)]


@contextlib.contextmanager
def fresh_store(args: argparse.Namespace, sync: bool = False) -> Iterator:
    """An open store in a new temp dir; closed and deleted on exit."""
    from postbox.storage_engine import FlushMode, MessageStore, StoreConfig
    from postbox.storage_engine.config import CommitLogConfig, FlushConfig

    root = Path(tempfile.mkdtemp(prefix="postbox-bench-", dir=args.dir))
    try:
        config = StoreConfig(
            root_dir=root,
            commit_log=CommitLogConfig(segment_size_bytes=args.segment_mib * MIB),
            flush=FlushConfig(mode=FlushMode.SYNC if sync else FlushMode.ASYNC))
        with MessageStore.open(config) as store:
            yield store
    finally:
        shutil.rmtree(root, ignore_errors=True)


def wait_readable(store, last) -> None:
    """Wait for dispatch, then require ``get_message`` at the last put's offset to be FOUND."""
    from postbox.storage_engine.contract.message import GetStatus

    if not store.wait_dispatched(timeout_ms=WAIT_DISPATCHED_TIMEOUT_MS):
        raise BenchError(f"wait_dispatched(timeout_ms={WAIT_DISPATCHED_TIMEOUT_MS}) returned "
                         f"False; last put {last!r}")
    got = store.get_message(GROUP, TOPIC, last.queue_id, last.queue_offset, max_count=1)
    if got.status is not GetStatus.FOUND or not got.messages \
            or got.messages[0].log_position != last.log_position:
        raise BenchError(f"after wait_dispatched() returned True, get_message(queue_id="
                         f"{last.queue_id}, offset={last.queue_offset}) gave {got!r} "
                         f"for last put {last!r}")


def time_single_puts(store, messages: list) -> tuple[float, float, list]:
    """Seconds for ``put_message`` of every message until the last one is readable, and
    seconds until the last call returned (dispatch not awaited)."""
    put = store.put_message
    gc.collect()
    start = time.perf_counter()
    results = [put(message, queue_id=i % QUEUE_COUNT) for i, message in enumerate(messages)]
    calls_s = time.perf_counter() - start
    wait_readable(store, results[-1])
    return time.perf_counter() - start, calls_s, results


def time_batched_puts(store, messages: list, batch: int) -> tuple[float, float]:
    """Seconds for ``put_messages`` in batches until the last message is readable, and
    seconds until the last call returned."""
    put_many = store.put_messages
    batches = [messages[i:i + batch] for i in range(0, len(messages), batch)]
    gc.collect()
    start = time.perf_counter()
    for number, chunk in enumerate(batches):
        results = put_many(chunk, queue_id=number % QUEUE_COUNT)
    calls_s = time.perf_counter() - start
    wait_readable(store, results[-1])
    elapsed = time.perf_counter() - start
    if len(results) != len(batches[-1]):
        raise BenchError(f"put_messages returned {len(results)} results for "
                         f"{len(batches[-1])} messages")
    return elapsed, calls_s


def time_gets(store, count: int, size: int) -> float:
    """Seconds to read every message back with ``get_message``, touching each body."""
    from postbox.storage_engine.contract.message import GetStatus

    get = store.get_message
    read = body_bytes = 0
    gc.collect()
    start = time.perf_counter()
    for queue_id in range(QUEUE_COUNT):
        offset = 0
        while True:
            got = get(GROUP, TOPIC, queue_id, offset, max_count=READ_BATCH)
            if got.status is not GetStatus.FOUND:
                break
            for view in got.messages:
                body_bytes += len(view.body)
            read += len(got.messages)
            if got.next_offset <= offset:
                raise BenchError(f"get_message(queue_id={queue_id}, offset={offset}) FOUND "
                                 f"but next_offset={got.next_offset}: {got!r}")
            offset = got.next_offset
    elapsed = time.perf_counter() - start
    if read != count or body_bytes != count * size:
        raise BenchError(f"get_message read {read} messages / {body_bytes} body bytes, "
                         f"expected {count} / {count * size}; last status {got!r}")
    return elapsed


def time_lookups(store, results: list, lookups: int, seed: int) -> float:
    """Seconds for ``query_by_key`` on random existing keys; checks every answer afterwards."""
    rng = random.Random(seed)
    picks = [rng.randrange(len(results)) for _ in range(lookups)]
    keys = [f"k{i}" for i in picks]
    query = store.query_by_key
    gc.collect()
    start = time.perf_counter()
    answers = [query(TOPIC, key) for key in keys]
    elapsed = time.perf_counter() - start
    for i, key, views in zip(picks, keys, answers, strict=True):
        if len(views) != 1 or views[0].log_position != results[i].log_position:
            raise BenchError(f"query_by_key({TOPIC!r}, {key!r}) returned {views!r}, expected "
                             f"exactly the message at log_position={results[i].log_position}")
    return elapsed


def time_fdatasync_probe(args: argparse.Namespace, size: int) -> float:
    """Seconds for ``FSYNC_PROBE_COUNT`` bare ``os.write`` + ``os.fdatasync`` of ``size`` bytes.

    One producer waiting for one flush per message can go no faster than this on the temp dir's
    filesystem, so a SYNC put rate far above it means SYNC flush was not in effect.
    """
    directory = tempfile.mkdtemp(prefix="postbox-bench-fsync-", dir=args.dir)
    body = bytes(size)
    fd = os.open(os.path.join(directory, "probe"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        start = time.perf_counter()
        for _ in range(FSYNC_PROBE_COUNT):
            os.write(fd, body)
            os.fdatasync(fd)
        return time.perf_counter() - start
    finally:
        os.close(fd)
        shutil.rmtree(directory, ignore_errors=True)


def postbox_rep(size: int, args: argparse.Namespace) -> dict[str, float]:
    """One repetition of every Postbox measurement for one body size (seconds each)."""
    pool = body_pool(size, args.seed)
    seconds: dict[str, float] = {}
    with fresh_store(args) as store:
        messages = build_messages(pool, 0, args.count)
        seconds["put_single"], seconds["put_single_calls"], results = time_single_puts(
            store, messages)
        del messages
        seconds["get"] = time_gets(store, args.count, size)
        seconds["lookup"] = time_lookups(store, results, args.lookups, args.seed)
        del results
    with fresh_store(args) as store:
        seconds["put_batch"], seconds["put_batch_calls"] = time_batched_puts(
            store, build_messages(pool, 0, args.count), args.batch)
    if args.fsync_peer_count > 0:
        with fresh_store(args, sync=True) as store:
            sync_messages = build_messages(pool, 0, min(args.fsync_peer_count, args.count))
            seconds["put_sync"] = time_single_puts(store, sync_messages)[0]
        seconds["fsync_probe"] = time_fdatasync_probe(args, size)
    return seconds


def postbox_figures(size: int, args: argparse.Namespace) -> dict:
    """Median rates over ``args.reps`` repetitions of ``postbox_rep``."""
    reps = []
    for rep in range(args.reps):
        progress(args, f"postbox size={size} rep {rep + 1}/{args.reps}")
        reps.append(postbox_rep(size, args))
    counts = {"put_single": args.count, "put_batch": args.count, "get": args.count,
              "put_single_calls": args.count, "put_batch_calls": args.count,
              "lookup": args.lookups, "put_sync": min(args.fsync_peer_count, args.count),
              "fsync_probe": FSYNC_PROBE_COUNT}
    figures = {}
    for name in reps[0]:
        samples = [rep[name] for rep in reps]
        median_s = statistics.median(samples)
        figures[name] = {"count": counts[name], "seconds": samples, "median_seconds": median_s,
                         "per_s": counts[name] / median_s,
                         "mb_per_s": counts[name] * size / median_s / 1e6}
    if "put_sync" in figures:
        figures["put_sync"]["fsync_plausible"] = (
            figures["put_sync"]["per_s"] <= SYNC_SLACK * figures["fsync_probe"]["per_s"])
    return figures


# ---------------------------------------------------------------- peers and ratios


def peer_figures(size: int, args: argparse.Namespace) -> list[dict]:
    """Every peer on ``--peer-count`` messages (``--fsync-peer-count`` if it fsyncs per put)."""
    pool = body_pool(size, args.seed)
    figures = []
    for peer_cls in PEERS:
        count = args.fsync_peer_count if peer_cls.fsync_per_put else args.peer_count
        count = min(count, args.count)
        if count < 1:
            continue
        progress(args, f"peer size={size} {peer_cls.name} x{count}")
        keys = [f"k{i}" for i in range(count)]
        bodies = [pool[i % BODY_POOL_SIZE] for i in range(count)]
        figures.append(measure_peer(peer_cls, keys, bodies, args.reps, args.dir))
    return figures


# ---------------------------------------------------------------- memory (child process)


def memory_child(args: argparse.Namespace) -> dict:
    """Write ``args.memory_child`` 100-byte messages, sampling ``RssAnon``; runs in a child."""
    count, pool = args.memory_child, body_pool(100, args.seed)
    baseline_kb = proc_status_kb("RssAnon")
    samples: list[tuple[int, int]] = []
    with fresh_store(args) as store:
        opened_kb = proc_status_kb("RssAnon")
        next_sample = RSS_SAMPLE_EVERY
        start = time.perf_counter()
        for first in range(0, count, args.batch):
            stop = min(first + args.batch, count)
            results = store.put_messages(build_messages(pool, first, stop),
                                         queue_id=(first // args.batch) % QUEUE_COUNT)
            if stop >= next_sample:
                samples.append((stop, proc_status_kb("RssAnon")))
                next_sample += RSS_SAMPLE_EVERY
        wait_readable(store, results[-1])
        elapsed = time.perf_counter() - start
        samples.append((count, proc_status_kb("RssAnon")))
    peak_kb = max(kb for _, kb in samples)
    return {"count": count, "body_bytes": 100, "baseline_rss_anon_mb": baseline_kb / 1024,
            "after_open_rss_anon_mb": opened_kb / 1024, "peak_rss_anon_mb": peak_kb / 1024,
            "peak_minus_baseline_mb": (peak_kb - baseline_kb) / 1024,
            "vm_hwm_mb": proc_status_kb("VmHWM") / 1024, "put_seconds": elapsed,
            "put_msgs_per_s": count / elapsed,
            "sample_every": RSS_SAMPLE_EVERY,
            "samples": [{"messages": n, "rss_anon_mb": kb / 1024} for n, kb in samples]}


def run_memory(args: argparse.Namespace) -> dict:
    """Run ``memory_child`` in a fresh interpreter so earlier phases do not inflate the heap."""
    repo_root = str(Path(__file__).resolve().parents[1])
    cmd = [sys.executable, "-m", "bench.store_bench", "--memory-child", str(args.memory),
           "--seed", str(args.seed), "--batch", str(args.batch),
           "--segment-mib", str(args.segment_mib)] + (["--dir", args.dir] if args.dir else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [repo_root, os.environ.get("PYTHONPATH")])))
    progress(args, f"memory: {args.memory} messages of 100 B in a child process")
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=repo_root, env=env,
                          check=False)
    if done.returncode != 0:
        raise BenchError(f"memory child exited {done.returncode}:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout)


# ---------------------------------------------------------------- driver and report


def progress(args: argparse.Namespace, text: str) -> None:
    """A progress line on stderr (silent with ``--json`` so stdout stays one document)."""
    if not args.json:
        print(f"[bench] {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> dict:
    """Every requested measurement; returns the full report as plain data."""
    report = {"note": NOTE, "machine": machine_facts(args), "targets": TARGETS,
              "settings": {name: getattr(args, name) for name in (
                  "count", "peer_count", "fsync_peer_count", "size_list", "reps", "batch",
                  "lookups", "memory", "segment_mib", "seed", "only")},
              "sizes": {}, "memory": None}
    for size in args.size_list if args.only != "memory" else []:
        postbox = postbox_figures(size, args) if args.only in (None, "postbox") else {}
        peers = peer_figures(size, args) if args.only in (None, "peers") else []
        report["sizes"][str(size)] = {"postbox": postbox, "peers": peers,
                                      "ratios": ratios(postbox, peers)}
    if args.memory > 0:
        report["memory"] = run_memory(args)
    return report


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``python -m bench.store_bench`` and ``postbox bench store``."""
    args = parse_args(argv)
    if args.memory_child:
        print(json.dumps(memory_child(args)))
        return 0
    return run_and_print(run, render, args)


if __name__ == "__main__":
    sys.exit(main())
