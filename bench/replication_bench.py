"""Replication benchmark: put latency and throughput of SYNC_MASTER and ASYNC_MASTER with a real
slave process on loopback, next to an embedded store without HA, all in one run.

Run ``python -m bench.replication_bench`` (default ~1 min on 2 cores), ``--quick`` for a smoke
run, ``--json`` for one JSON document on stdout (progress goes to stderr). Rows, each with 1 and
8 producer threads (``--threads``), ``--count`` puts per row split over the threads, 100-byte
bodies (one key and one tag per message, as ``bench.store_bench``), every put timed with
``perf_counter_ns`` (``bench.producers``):

1. **embedded**: ``MessageStore.put_message`` on a fresh ASYNC_MASTER store without HA (the
   baseline: no port, no slave).
2. **ASYNC_MASTER + slave**: the same with ``ha.ha_listen`` on loopback and a slave *process*
   (``--slave-child``) replicating it; puts do not wait. After the last put the clock also
   measures how long the slave took to acknowledge the master's log end ("drain").
3. **SYNC_MASTER + slave**: every put returns once the slave acknowledged it; a put answered
   otherwise (``FLUSH_SLAVE_TIMEOUT``/``SLAVE_NOT_AVAILABLE``) counts as unconfirmed.

All stores flush ASYNC, so the figures isolate replication (a SYNC flush adds the disk's
fdatasync on top; ``bench.durability_bench`` measures that). Every row uses fresh temp dirs under
``--dir`` and a fresh slave process, started and connected before the clock starts, and checks
afterwards that the slave's log reached the master's end. Rows run ``--reps`` times interleaved;
the repetition with the median throughput is shown. Ratios are between figures of this run.
A wrong result raises ``BenchError`` (exit status 2).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from bench.peers import BenchError
from bench.producers import ProducerRun, run_producers
from bench.store_bench import body_pool, build_messages, machine_facts
from bench.workdir import temp_dir

BODY_BYTES = 100
QUEUE_COUNT = 8
MIB = 1 << 20
SEGMENT_MIB = 64
REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = REPO_ROOT / ".postbox" / "bench-tmp"
CONNECT_TIMEOUT_S = 30
CATCH_UP_TIMEOUT_S = 60
VARIANTS = ("embedded", "async_master", "sync_master")
LABELS = {"embedded": "embedded store, no HA", "async_master": "ASYNC_MASTER + slave process",
          "sync_master": "SYNC_MASTER + slave process"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m bench.replication_bench",
                                description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short run (fewer puts and reps)")
    p.add_argument("--threads", default="1,8", help="producer thread counts, comma-separated")
    p.add_argument("--count", type=int, help="puts per row (default 10 000; quick 2 000)")
    p.add_argument("--reps", type=int, help="repetitions (default 3; quick 1)")
    p.add_argument("--dir", default=str(DEFAULT_DIR), help="parent of the temp dirs")
    p.add_argument("--seed", type=int, default=20240601, help="seed for the bodies")
    p.add_argument("--json", action="store_true", help="print one JSON document, no table")
    p.add_argument("--slave-child", nargs=2, metavar=("ROOT", "MASTER"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.count is None:
        args.count = 2_000 if args.quick else 10_000
    if args.reps is None:
        args.reps = 1 if args.quick else 3
    args.thread_list = [int(t) for t in args.threads.split(",") if t.strip()]
    if not args.thread_list or min(args.thread_list) < 1 or args.count < max(args.thread_list):
        p.error("--threads must be positive and --count at least the largest thread count")
    return args


def store_config(root: Path, role, put_count: int, ha_listen: str | None = None,
                 master: str | None = None):
    """ASYNC flush, 64 MiB segments, a key index sized for the run."""
    from postbox.storage_engine import (
        CommitLogConfig,
        HAConfig,
        KeyIndexConfig,
        StoreConfig,
    )

    return StoreConfig(root_dir=root, broker_role=role,
                       commit_log=CommitLogConfig(segment_size_bytes=SEGMENT_MIB * MIB),
                       key_index=KeyIndexConfig(slot_count_max=max(1024, put_count),
                                                entry_count_max=put_count + 64),
                       ha=HAConfig(ha_listen=ha_listen, master_address=master))


# ---------------------------------------------------------------- the slave process


def slave_child(root: str, master: str) -> int:
    """Run a slave store until stdin closes (``--slave-child ROOT MASTER``)."""
    from postbox.storage_engine import BrokerRole, MessageStore

    with MessageStore.open(store_config(Path(root), BrokerRole.SLAVE, 1 << 20, master=master)):
        print("ready", flush=True)
        sys.stdin.read()
    return 0


@contextlib.contextmanager
def slave_process(args: argparse.Namespace, master_address: str) -> Iterator[None]:
    """A slave child replicating ``master_address``; stopped (cleanly) on exit."""
    with temp_dir(args.dir, "slave") as root:
        child = subprocess.Popen(
            [sys.executable, "-m", "bench.replication_bench", "--slave-child", str(root),
             master_address], cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True)
        try:
            if child.stdout.readline().strip() != "ready":
                raise BenchError("the slave process did not start")
            yield
        finally:
            child.stdin.close()
            if child.wait(60) != 0:
                raise BenchError(f"the slave process exited with {child.returncode}")


def poll(predicate, timeout_s: float, what: str) -> float:
    """Poll ``predicate`` every 0.2 ms; seconds it took. Raises ``BenchError`` on timeout."""
    started = time.perf_counter()
    while not predicate():
        if time.perf_counter() - started > timeout_s:
            raise BenchError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.0002)
    return time.perf_counter() - started


# ---------------------------------------------------------------- one row


def measure(args: argparse.Namespace, variant: str, threads: int, pool: list[bytes]) -> dict:
    """One row: a fresh master (and slave process unless embedded), ``threads`` producers."""
    from postbox.storage_engine import BrokerRole, MessageStore, PutStatus

    per_thread = args.count // threads
    total = per_thread * threads
    role = BrokerRole.SYNC_MASTER if variant == "sync_master" else BrokerRole.ASYNC_MASTER
    listen = None if variant == "embedded" else "127.0.0.1:0"
    batches = [build_messages(pool, t * per_thread, (t + 1) * per_thread)
               for t in range(threads)]
    with temp_dir(args.dir, "master") as root, MessageStore.open(
            store_config(root, role, total + 64, listen)) as store:
        with contextlib.ExitStack() as stack:
            if listen is not None:
                host, port = store.ha_listen_address
                stack.enter_context(slave_process(args, f"{host}:{port}"))
                poll(lambda: store.ha_status()["slaves"], CONNECT_TIMEOUT_S, "the slave")

            def make_put(t: int):
                put, messages, queue_id = store.put_message, batches[t], t % QUEUE_COUNT
                return lambda i: put(messages[i], queue_id).status is PutStatus.PUT_OK

            run: ProducerRun = run_producers(threads, per_thread, make_put)
            row = run.summary() | {"variant": variant}
            if listen is not None:
                end = store.commit_log.max_position
                row["drain_ms"] = 1000 * poll(
                    lambda: store.ha_status()["acked_position"] >= end, CATCH_UP_TIMEOUT_S,
                    "the slave to acknowledge the log end")
        if not store.wait_dispatched(60_000):
            raise BenchError("dispatch did not catch up")
        stored = sum(store.max_offset("bench", q) for q in range(QUEUE_COUNT))
        if stored != total:
            raise BenchError(f"{variant}: {stored} messages stored, {total} put")
    if variant == "sync_master" and row["unconfirmed"]:
        progress(args, f"warning: {row['unconfirmed']} SYNC_MASTER puts not acknowledged")
    return row


def median_row(rows: list[dict]) -> dict:
    """The repetition with the median throughput."""
    return sorted(rows, key=lambda row: row["per_s"])[len(rows) // 2]


# ---------------------------------------------------------------- report


def ratios(figures: dict[str, dict]) -> dict:
    """Throughput and latency of each HA variant relative to the embedded store."""
    base = figures["embedded"]
    return {variant: {"throughput": figures[variant]["per_s"] / base["per_s"],
                      "p50": figures[variant]["p50_us"] / base["p50_us"],
                      "p99": figures[variant]["p99_us"] / base["p99_us"]}
            for variant in VARIANTS[1:]}


def render(report: dict) -> str:
    """The report as a plain-text table."""
    machine = report["machine"]
    lines = [f"Replication benchmark — {machine['cpu_model']}, {machine['cpu_affinity']} CPUs, "
             f"{machine['python']}; {report['settings']['count']:,} puts/row of "
             f"{BODY_BYTES} B, median of {report['settings']['reps']} rep(s)", ""]
    header = (f"{'row':<32} {'threads':>7} {'msgs/s':>9} {'p50 µs':>8} {'p99 µs':>8} "
              f"{'max µs':>9} {'unconf':>6} {'drain ms':>8}")
    for threads, figures in report["rows"].items():
        lines += [header, "-" * len(header)]
        for variant in VARIANTS:
            row = figures[variant]
            drain = f"{row['drain_ms']:.1f}" if "drain_ms" in row else ""
            lines.append(f"{LABELS[variant]:<32} {threads:>7} {row['per_s']:>9,.0f} "
                         f"{row['p50_us']:>8.0f} {row['p99_us']:>8.0f} {row['max_us']:>9.0f} "
                         f"{row['unconfirmed']:>6} {drain:>8}")
        for variant, ratio in report["ratios"][threads].items():
            lines.append(f"  {LABELS[variant]} / embedded: throughput x{ratio['throughput']:.2f}, "
                         f"p50 x{ratio['p50']:.1f}, p99 x{ratio['p99']:.1f}")
        lines.append("")
    lines.append("drain = time from the last put's return until the slave acknowledged the "
                 "master's log end.")
    return "\n".join(lines)


def progress(args: argparse.Namespace, text: str) -> None:
    """A progress line on stderr."""
    if not args.json:
        print(f"[bench] {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> dict:
    """Every row, interleaved by repetition; the full report as plain data."""
    pool = body_pool(BODY_BYTES, args.seed)
    samples: dict[int, dict[str, list[dict]]] = {
        threads: {variant: [] for variant in VARIANTS} for threads in args.thread_list}
    for rep in range(args.reps):
        for threads in args.thread_list:
            for variant in VARIANTS:
                row = measure(args, variant, threads, pool)
                samples[threads][variant].append(row)
                progress(args, f"rep {rep + 1}/{args.reps} {variant:<12} threads={threads}: "
                         f"{row['per_s']:,.0f} msgs/s, p50 {row['p50_us']:.0f} µs, "
                         f"p99 {row['p99_us']:.0f} µs")
    rows = {threads: {variant: median_row(rows) for variant, rows in by_variant.items()}
            for threads, by_variant in samples.items()}
    return {"machine": machine_facts(args),
            "settings": {"count": args.count, "reps": args.reps, "threads": args.thread_list,
                         "body_bytes": BODY_BYTES, "segment_mib": SEGMENT_MIB},
            "rows": rows, "ratios": {threads: ratios(figures) for threads, figures in rows.items()}}


def main(argv: list[str] | None = None) -> int:
    """Entry point; 0, or 2 when a result is wrong."""
    args = parse_args(argv)
    if args.slave_child:
        return slave_child(*args.slave_child)
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    try:
        report = run(args)
    except BenchError as error:
        print(f"[bench] wrong result: {error}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
