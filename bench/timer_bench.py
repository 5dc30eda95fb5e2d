"""Timers benchmark: delivery lateness of many timers spread over a window, and the timer
store's recovery after kill -9 with many timers pending, through public APIs only.

Run ``python -m bench.timer_bench`` (``postbox bench timers``; ``--quick`` for a short run,
``--json`` for one JSON document on stdout; progress goes to stderr). Two parts (``--only``):

* **lateness**, per target (``--targets``): *broker*, a ``postbox broker start`` process (ASYNC
  flush) with ``App(store_url="rocketmq://NAMESRV")`` here; *embedded*, ``App(broker=...)`` on
  a ``Broker`` in this process. First a **baseline**: ``--baseline`` normal messages sent at
  200/s, each one's latency = the handler's clock when it runs minus the message's born
  timestamp. Then ``--timers`` N timers (default 100 000; quick 5 000) with ``deliver_at``
  spread at random over ``--window-s`` (600 s; quick 30 s) starting ``--lead-s`` after the
  start, sent in order of their moment by ``--threads`` threads (4). A handler of a new group
  records each delivery; lateness = the handler's clock minus ``deliver_at`` (what an
  application sees), and the delivered copy's store timestamp minus ``deliver_at`` (the timer
  service alone). Timers whose moment passed before their send returned are counted and left
  out. Target: p99 <= 1 100 ms (Apache's 1 s timer precision + 100 ms).
* **recovery**: a child process opens a ``Broker`` on a fresh store, sends ``--pending`` M
  messages (quick 20 000; default 200 000) and then 100 *probe* timers due 2 s later, and is
  killed with SIGKILL as soon as the last send returned and was dispatched. Once the probes
  are overdue, this process opens that store (``Broker.open``: abnormal recovery, the timer
  service's included) and the clock runs from the call until (a) it returned and (b) all 100
  probes are in their topic (``Broker.pull``). (A ``postbox broker start`` process opens its
  store the same way; its own start-up, 10 s and more on a loaded machine, would drown the
  difference measured here.) Done twice
  in the same run: the **baseline** with M normal messages, then with M timers due in an hour
  (pending at the kill). The difference is what M pending timers add; it is reported per
  million pending (target <= 10 s per million).

Every figure comes from one run on one machine; the load average is printed with them. A wrong
result (a timer never delivered, delivered twice, a probe missing) raises ``BenchError``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from bench.peers import BenchError, run_and_print
from bench.store_bench import machine_facts, progress
from bench.transaction_bench import postbox_broker
from bench.workdir import temp_dir

TIMER_TOPIC, BASE_TOPIC, PROBE_TOPIC, FILL_TOPIC = ("bench-timers", "bench-baseline",
                                                    "bench-probes", "bench-pending")
BODY = b"t" * 100
MIB = 1 << 20
BROKER_SETTINGS = {"mappedFileSizeCommitLog": str(64 * MIB), "flushDiskType": "ASYNC_FLUSH"}
BROKER_CONF = "".join(f"{key}={value}\n" for key, value in BROKER_SETTINGS.items())
TARGET_P99_MS = 1_100
TARGET_S_PER_MILLION = 10.0
BASELINE_RATE = 200
PROBES = 100
PROBE_DELAY_MS = 2_000
PENDING_DELAY_MS = 3_600_000
RECOVERY_TIMEOUT_S = 300  # under the test suite's 600 s per test: the bench says why, not pytest
SOURCE_ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("broker", "embedded")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m bench.timer_bench",
                                description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="short run: 5 000 timers over 30 s, 20 000 pending")
    p.add_argument("--timers", type=int, help="timers (default 100 000)")
    p.add_argument("--window-s", type=float, help="window they are spread over (default 600)")
    p.add_argument("--lead-s", type=float, help="start of the window after the first send "
                                                "(default 5; quick 2)")
    p.add_argument("--baseline", type=int, help="normal messages of the baseline (default "
                                                "2 000; quick 300)")
    p.add_argument("--pending", type=int, help="timers pending at the kill (default 200 000)")
    p.add_argument("--threads", type=int, default=4, help="sender threads")
    p.add_argument("--targets", default=",".join(TARGETS), help="subset of broker,embedded")
    p.add_argument("--only", choices=("lateness", "recovery"), help="one part only")
    p.add_argument("--dir", default=None, help="parent of the temp dirs (None: system temp)")
    p.add_argument("--json", action="store_true", help="print one JSON document, no table")
    args = p.parse_args(argv)
    defaults = ({"timers": 5_000, "window_s": 30.0, "lead_s": 2.0, "baseline": 300,
                 "pending": 20_000} if args.quick else
                {"timers": 100_000, "window_s": 600.0, "lead_s": 5.0, "baseline": 2_000,
                 "pending": 200_000})
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.targets = [t for t in args.targets.split(",") if t]
    if min(args.timers, args.window_s, args.baseline, args.pending, args.threads) <= 0 \
            or args.lead_s < 0 or not set(args.targets) <= set(TARGETS):
        p.error("counts and the window must be positive; --targets from broker,embedded")
    return args


def percentiles(values: list[int]) -> dict:
    """n, p50, p99, max (ms) of ``values``; zeros when empty."""
    ordered = sorted(values)
    if not ordered:
        return {"n": 0, "p50": 0, "p99": 0, "max": 0, "min": 0}
    return {"n": len(ordered), "min": ordered[0], "p50": ordered[len(ordered) // 2],
            "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
            "max": ordered[-1]}


def now_ms() -> int:
    """Wall clock in ms (the clock of ``deliver_at`` and of store timestamps)."""
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------- lateness


@contextlib.contextmanager
def app_options(target: str, root: Path) -> Iterator[dict]:
    """What ``App`` is given for ``target`` on a fresh store under ``root``."""
    if target == "broker":
        with postbox_broker(root, BROKER_CONF) as process:
            yield {"store_url": f"rocketmq://{process.namesrv_address}"}
        return
    from postbox.storage_engine import Broker, CommitLogConfig, StoreConfig

    config = StoreConfig(root_dir=root / "store",
                         commit_log=CommitLogConfig(segment_size_bytes=64 * MIB))
    with Broker.open(config) as broker:
        yield {"broker": broker}


class Deliveries:
    """What the handlers saw: (handler clock, view) per message id, per topic."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[str, dict[str, tuple[int, object]]] = {BASE_TOPIC: {}, TIMER_TOPIC: {}}
        self.duplicates = 0

    def record(self, topic: str, message) -> None:
        clock = now_ms()
        with self.lock:
            table = self.seen[topic]
            if message.msg_id in table:
                self.duplicates += 1
            table[message.msg_id] = (clock, message.view)

    def handler(self, topic: str):
        """A handler recording deliveries of ``topic``."""
        def handle(message) -> None:
            self.record(topic, message)
        return handle

    def count(self, topic: str) -> int:
        with self.lock:
            return len(self.seen[topic])

    def wait(self, topic: str, count: int, deadline: float) -> None:
        while self.count(topic) < count:
            if time.monotonic() > deadline:
                raise BenchError(f"{topic}: {self.count(topic)} of {count} delivered in time")
            time.sleep(0.1)


def send_baseline(app, deliveries: Deliveries, count: int) -> dict:
    """``count`` normal messages at ``BASELINE_RATE``/s; their send → handler latency."""
    start = time.monotonic()
    for index in range(count):
        time.sleep(max(0.0, start + index / BASELINE_RATE - time.monotonic()))
        app.producer.send(BASE_TOPIC, BODY)
    deliveries.wait(BASE_TOPIC, count, time.monotonic() + 120)
    with deliveries.lock:
        seen = list(deliveries.seen[BASE_TOPIC].values())
    return percentiles([clock - view.born_timestamp_ms for clock, view in seen])


def send_timers(app, moments: list[int], threads: int) -> dict:
    """Send a timer per moment (sorted), ``threads`` threads taking every n-th; the ids of
    those sent in time, and how many were sent after their moment."""
    in_time: dict[str, int] = {}
    late = [0]
    failures: list[BaseException] = []
    lock = threading.Lock()

    def run(first: int) -> None:
        try:
            for moment in moments[first::threads]:
                result = app.producer.send(TIMER_TOPIC, BODY, deliver_at=moment)
                with lock:
                    if now_ms() < moment:
                        in_time[result.unique_key] = moment
                    else:
                        late[0] += 1
        except BaseException as error:  # the run is then wrong
            failures.append(error)

    start = time.perf_counter()
    workers = [threading.Thread(target=run, args=(first,)) for first in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if failures:
        raise BenchError(f"a timer send failed: {failures[0]!r}")
    seconds = time.perf_counter() - start
    return {"in_time": in_time, "sent_late": late[0], "send_s": seconds}


def measure_lateness(args: argparse.Namespace, target: str) -> dict:
    """Baseline, then the timers, on one target."""
    from postbox.framework import App

    deliveries = Deliveries()
    with temp_dir(args.dir, f"timers-{target}") as root, app_options(target, root) as options:
        app = App(**options)
        for topic in (BASE_TOPIC, TIMER_TOPIC):
            app.handler(topic=topic, consumer_group=f"{topic}-group",
                        consume_from="first")(deliveries.handler(topic))
        app.start()
        try:
            progress(args, f"{target}: baseline, {args.baseline:,} normal messages")
            baseline = send_baseline(app, deliveries, args.baseline)
            start = now_ms() + int(args.lead_s * 1000)
            window_ms = int(args.window_s * 1000)
            moments = sorted(start + random.randrange(window_ms) for _ in range(args.timers))
            progress(args, f"{target}: {args.timers:,} timers over {args.window_s:.0f} s")
            sent = send_timers(app, moments, args.threads)
            expected = len(sent["in_time"]) + sent["sent_late"]
            deadline = time.monotonic() + (moments[-1] - now_ms()) / 1000 + 120
            deliveries.wait(TIMER_TOPIC, expected, deadline)
            time.sleep(1.0)  # a duplicate would show up now
        finally:
            app.stop()
    return timer_figures(deliveries, sent, baseline)


def timer_figures(deliveries: Deliveries, sent: dict, baseline: dict) -> dict:
    """Lateness of the timers sent in time, by the handler's clock and the store's."""
    if deliveries.duplicates:
        raise BenchError(f"{deliveries.duplicates} messages were delivered twice")
    handler, stored = [], []
    with deliveries.lock:
        seen = deliveries.seen[TIMER_TOPIC]
        for msg_id, moment in sent["in_time"].items():
            if msg_id not in seen:
                raise BenchError(f"timer {msg_id} was never delivered")
            clock, view = seen[msg_id]
            handler.append(clock - moment)
            stored.append(view.store_timestamp_ms - moment)
    late = percentiles(handler)
    return {"timers": len(handler), "sent_late": sent["sent_late"],
            "send_per_s": (len(handler) + sent["sent_late"]) / sent["send_s"],
            "baseline_ms": baseline, "handler_lateness_ms": late,
            "store_lateness_ms": percentiles(stored),
            "early": sum(1 for value in handler if value < 0),
            "p99_over_baseline_p99": late["p99"] / max(1, baseline["p99"]),
            "meets_target": late["p99"] <= TARGET_P99_MS}


# ---------------------------------------------------------------- recovery


def fill(store: str, kind: str, count: int) -> None:
    """Child process: ``count`` messages of ``kind`` (``timers``: due in an hour; ``normal``)
    then ``PROBES`` probe timers due ``PROBE_DELAY_MS`` later; prints ``ready MOMENT``, waits
    for its SIGKILL."""
    from postbox.storage_engine import Broker, Message, StoreConfig

    broker = Broker.open(StoreConfig.from_broker_conf(BROKER_SETTINGS, root_dir=Path(store)))
    pending = {"TIMER_DELIVER_MS": str(now_ms() + PENDING_DELAY_MS)}
    for _ in range(count):
        broker.send(Message(FILL_TOPIC, BODY, properties=pending if kind == "timers" else None))
    moment = now_ms() + PROBE_DELAY_MS
    for _ in range(PROBES):
        broker.send(Message(PROBE_TOPIC, BODY, properties={"TIMER_DELIVER_MS": str(moment)}),
                    queue_id=0)
    broker.store.wait_dispatched()
    print(f"ready {moment}", flush=True)
    time.sleep(3600)  # killed before this ends


def filled_and_killed(store: Path, kind: str, count: int) -> dict:
    """Run ``fill`` in a child process, SIGKILL it once ready; its figures."""
    code = f"from bench.timer_bench import fill; fill({str(store)!r}, {kind!r}, {count})"
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", code], cwd=SOURCE_ROOT,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        seconds = time.perf_counter() - start
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    if not line.startswith("ready "):
        raise BenchError(f"filling the {kind} store failed (exit {child.returncode})")
    return {"fill_s": seconds, "probe_moment_ms": int(line.split()[1])}


def reopened(store: Path) -> dict:
    """Open ``store`` (abnormal recovery: its writer was killed) in this process; seconds until
    ``Broker.open`` returned and until all ``PROBES`` probe timers, overdue, are in their
    topic."""
    from postbox.storage_engine import Broker, StoreConfig

    config = StoreConfig.from_broker_conf(BROKER_SETTINGS, root_dir=store)
    start = time.perf_counter()
    with Broker.open(config) as broker:
        opened = time.perf_counter() - start
        found, offset = 0, 0
        while found < PROBES:
            if broker.timer_service.failure is not None:
                raise BenchError(f"the timer service stopped after {found} of the {PROBES} "
                                 f"probe timers: {broker.timer_service.failure!r}")
            if time.perf_counter() - start > RECOVERY_TIMEOUT_S:
                raise BenchError(f"{found} of the {PROBES} probe timers delivered in "
                                 f"{RECOVERY_TIMEOUT_S} s")
            pulled = broker.pull("bench-probe-reader", PROBE_TOPIC, 0, offset, 32)
            found, offset = found + len(pulled.messages), pulled.next_offset
            if not pulled.messages:
                time.sleep(0.01)
        delivered = time.perf_counter() - start
    return {"open_s": opened, "probes_delivered_s": delivered}


def measure_recovery(args: argparse.Namespace, kind: str) -> dict:
    """Fill, kill -9, reopen the store: how long until it is open and until the overdue
    probes are delivered."""
    with temp_dir(args.dir, f"timer-recovery-{kind}") as root:
        progress(args, f"recovery ({kind}): {args.pending:,} messages, then kill -9")
        filled = filled_and_killed(root / "store", kind, args.pending)
        time.sleep(max(0.0, (filled["probe_moment_ms"] - now_ms()) / 1000 + 0.2))
        return {"kind": kind, "messages": args.pending, "fill_s": filled["fill_s"],
                **reopened(root / "store")}


def recovery_figures(args: argparse.Namespace) -> dict:
    """Baseline (normal messages) and pending timers; the difference per million."""
    normal = measure_recovery(args, "normal")
    timers = measure_recovery(args, "timers")
    added = timers["probes_delivered_s"] - normal["probes_delivered_s"]
    per_million = added / args.pending * 1_000_000
    return {"normal": normal, "timers": timers, "added_s": added,
            "added_s_per_million": per_million,
            "total_s_per_million": timers["probes_delivered_s"] / args.pending * 1_000_000,
            "meets_target": per_million <= TARGET_S_PER_MILLION}


# ---------------------------------------------------------------- report


def run(args: argparse.Namespace) -> dict:
    """The requested parts; returns the report as plain data."""
    report: dict = {"machine": machine_facts(args), "load_average": os.getloadavg(),
                    "settings": {name: getattr(args, name) for name in (
                        "timers", "window_s", "lead_s", "baseline", "pending", "threads",
                        "targets", "only")},
                    "lateness": {}, "recovery": None}
    if args.only in (None, "lateness"):
        for target in args.targets:
            report["lateness"][target] = measure_lateness(args, target)
    if args.only in (None, "recovery"):
        report["recovery"] = recovery_figures(args)
    report["load_average_after"] = os.getloadavg()
    return report


def render(report: dict) -> None:
    """The figures as small tables, with the targets."""
    settings = report["settings"]
    print(f"\nTimers benchmark: load average {report['load_average'][0]:.2f} -> "
          f"{report['load_average_after'][0]:.2f}")
    if report["lateness"]:
        print(f"lateness of {settings['timers']:,} timers over {settings['window_s']:.0f} s "
              f"(ms; target p99 <= {TARGET_P99_MS}):")
        print(f"{'target':<10}{'clock':<10}{'p50':>8}{'p99':>8}{'max':>8}{'baseline p99':>14}"
              f"{'p99/base':>10}{'late sends':>12}")
        for target, figures in report["lateness"].items():
            for clock in ("handler", "store"):
                late = figures[f"{clock}_lateness_ms"]
                extra = (f"{figures['baseline_ms']['p99']:>14}"
                         f"{figures['p99_over_baseline_p99']:>10.1f}{figures['sent_late']:>12}"
                         if clock == "handler" else "")
                print(f"{target:<10}{clock:<10}{late['p50']:>8}{late['p99']:>8}"
                      f"{late['max']:>8}{extra}")
    recovery = report["recovery"]
    if recovery:
        print(f"recovery after kill -9 with {settings['pending']:,} pending (s; Broker.open / "
              f"until the overdue probes are delivered):")
        for kind in ("normal", "timers"):
            figures = recovery[kind]
            print(f"  {kind:<8} {figures['open_s']:>7.2f} {figures['probes_delivered_s']:>7.2f}"
                  f"   (fill {figures['fill_s']:.1f} s)")
        verdict = "meets" if recovery["meets_target"] else "misses"
        print(f"  pending timers add {recovery['added_s']:.2f} s = "
              f"{recovery['added_s_per_million']:.1f} s per million ({verdict} the "
              f"{TARGET_S_PER_MILLION:.0f} s target); total {recovery['total_s_per_million']:.1f}"
              f" s per million")


def main(argv: list[str] | None = None) -> int:
    """Entry point (``python -m bench.timer_bench``); 2 when a result was wrong."""
    return run_and_print(run, render, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
