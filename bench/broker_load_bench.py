"""Broker load benchmark: ``postbox broker`` against Apache RocketMQ's Java broker under many
senders of the official Java client and a concurrent consumer, in one run.

Run ``python -m bench.broker_load_bench`` (``--quick`` for a short run, ``--json`` for one JSON
document on stdout; progress goes to stderr). It needs the compatibility lab (a JDK and Maven;
``tests/support/rocketmq_install.py`` fetches the jars into the lab cache). The targets are
started as ``bench.remoting_peers_bench`` starts them (ASYNC flush, 128 MiB commit-log
segments, 8 queues), one after the other, each alone on the machine:

* **java**: Apache RocketMQ 5.3.3's name server and broker;
* **postbox**: ``postbox broker start`` (its name server in the same process).

Against each, for every load (``--modes`` x ``--sizes``; default sync, async and tx, 100 B
and 1 KiB), a fresh topic is created and one JVM (the lab driver's ``load`` command,
``tests/lab/driver/.../Load.java``) runs the official remoting client 5.3.3:

* *sync*: ``--threads`` threads (32) share one ``DefaultMQProducer`` sending synchronously;
* *async*: ``--in-flight`` (128) asynchronous sends kept outstanding;
* *tx*: ``--threads`` threads share one ``TransactionMQProducer`` whose local transaction
  commits at once: each message is a half send, then END_TRANSACTION (which the Java client
  sends one-way); a message counts when its commit was sent, and is consumed once committed;
* all along, a new group's ``DefaultMQPushConsumer`` (default settings) consumes the topic.

Each broker is first warmed up, unmeasured: ``--broker-warmup-s`` (20; quick 2) of async sends
to a topic of its own with its consumer (Apache's JIT compiles its send and pull paths then).
Each load's senders run ``--warmup-s`` (5; quick 1) first, so that the client's JIT, the
connections and the consumer's rebalance are done; then a window of ``--window-s`` (10; quick
2) is measured: the messages sent (SEND_OK) and consumed in it, and the broker process's CPU
time over the same wall-clock span (``/proc/PID/stat``, sampled every 50 ms). After the window
the senders stop and the consumer has ``--drain-s`` (30) to catch up; the backlog left then is
reported.

Figures per load and target: sends/s, consumed/s, the backlog at the window's end (sent but not
yet consumed; the consumer "keeps up" when it is at most 1 % of all sent by then), broker CPU µs
per message and cores busy, failed sends. Ratios are postbox ÷ java of the same
load; the targets (a native core's) are throughput ≥ 1.5×, the consumer keeping up,
CPU per message ≤ 0.5× (printed, never asserted). With *sync* and *tx* both run, each broker's
transactional ratio (tx ÷ sync sends/s, same size) is printed too, and Postbox's ratio over
Apache's (the transactions' target: ≥ 1; ``bench.transaction_bench`` measures the same ratio
through the framework's Python client). A target that fails is reported as failed,
and the exit code is then 2. VM noise is easily ±20 %.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from bisect import bisect_left

from bench.peers import run_and_print
from bench.remoting_peers_bench import Target, java_target, postbox_target
from bench.sampling import PeriodicSampler
from bench.store_bench import machine_facts, progress

QUEUE_COUNT = 8
MODES = ("sync", "async", "tx")
SIZES = (100, 1024)
TARGETS = ("java", "postbox")
CLIENT_JVM = ("-Xms512m", "-Xmx512m", "-XX:+UseG1GC")
SAMPLE_S = 0.05
KEEP_UP = 0.99
TARGET_THROUGHPUT = 1.5
TARGET_CPU = 0.5


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m bench.broker_load_bench",
                                description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short run: 1 s warm-up, 2 s window")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated sync,async,tx")
    p.add_argument("--sizes", default=",".join(map(str, SIZES)), help="body bytes, comma-separated")
    p.add_argument("--threads", type=int, default=32, help="sync sender threads")
    p.add_argument("--in-flight", type=int, default=128, help="outstanding async sends")
    p.add_argument("--broker-warmup-s", type=float,
                   help="seconds of async sends to each broker before its loads (20)")
    p.add_argument("--warmup-s", type=float, help="seconds of sending before the window (5)")
    p.add_argument("--window-s", type=float, help="seconds measured (10)")
    p.add_argument("--drain-s", type=float, default=30.0, help="seconds the consumer may catch up")
    p.add_argument("--targets", default=",".join(TARGETS), help="comma-separated java,postbox")
    p.add_argument("--dir", default=None, help="parent of the temp dirs (None: system temp)")
    p.add_argument("--json", action="store_true", help="print one JSON document, no table")
    args = p.parse_args(argv)
    if args.broker_warmup_s is None:
        args.broker_warmup_s = 2.0 if args.quick else 20.0
    if args.warmup_s is None:
        args.warmup_s = 1.0 if args.quick else 5.0
    if args.window_s is None:
        args.window_s = 2.0 if args.quick else 10.0
    args.modes = [m for m in args.modes.split(",") if m]
    args.targets = [t for t in args.targets.split(",") if t]
    try:
        args.sizes = [int(size) for size in args.sizes.split(",") if size]
    except ValueError:
        p.error("--sizes takes whole numbers of bytes")
    if (not set(args.modes) <= set(MODES) or not set(args.targets) <= set(TARGETS)
            or min([args.threads, args.in_flight, *args.sizes]) < 1
            or min(args.window_s, args.warmup_s, args.drain_s, args.broker_warmup_s) <= 0):
        p.error("--modes from sync,async,tx; --targets from java,postbox; sizes, threads, "
                "in-flight and times must be positive")
    return args


# ---------------------------------------------------------------- broker CPU


class CpuSampler(PeriodicSampler):
    """The CPU time (user + system) of one process, sampled on a thread, read back for any
    wall-clock span by interpolating between samples."""

    def __init__(self, pid: int) -> None:
        super().__init__(SAMPLE_S, "cpu-sampler")
        self._path = f"/proc/{pid}/stat"
        self._tick = os.sysconf("SC_CLK_TCK")
        self._times: list[float] = []
        self._cpu: list[float] = []

    def sample(self) -> None:
        """Read the process's CPU seconds now."""
        with open(self._path) as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / self._tick  # utime, stime
        self._times.append(time.time())
        self._cpu.append(cpu)

    def at(self, moment: float) -> float:
        """CPU seconds used by ``moment`` (epoch seconds; inside the sampled span)."""
        i = min(max(bisect_left(self._times, moment), 1), len(self._times) - 1)
        t0, t1 = self._times[i - 1], self._times[i]
        c0, c1 = self._cpu[i - 1], self._cpu[i]
        return c0 if t1 == t0 else c0 + (c1 - c0) * (moment - t0) / (t1 - t0)

    def between(self, start: float, end: float) -> float:
        """CPU seconds used from ``start`` to ``end``."""
        return self.at(end) - self.at(start)


# ---------------------------------------------------------------- measurements


def measure_load(install, target: Target, mode: str, size: int,
                 args: argparse.Namespace, label: str = "") -> dict:
    """One load against ``target``: a fresh topic, the driver's ``load``, the broker's CPU."""
    from tests.support.rocketmq_lab import LabDriver

    topic = f"load-{label or mode}-{size}"
    driver = LabDriver(install, target.root / "driver", target.namesrv)
    driver.run("create-topic", broker_addr=target.broker_addr, topic=topic, queues=QUEUE_COUNT)
    driver.run("await-route", topics=[topic], timeout_ms=60_000)
    client = LabDriver(install, target.root / "client", target.namesrv, jvm_flags=CLIENT_JVM,
                       timeout_s=args.warmup_s + args.window_s + args.drain_s + 300)
    with CpuSampler(target.pid) as cpu:
        report = client.run("load", topic=topic, group=f"load-{time.time_ns()}", mode=mode,
                            threads=args.threads, in_flight=args.in_flight, body_bytes=size,
                            warmup_ms=int(args.warmup_s * 1000),
                            window_ms=int(args.window_s * 1000),
                            drain_ms=int(args.drain_s * 1000))
    cpu_s = cpu.between(report["window_started_ms"] / 1000, report["window_ended_ms"] / 1000)
    sent = report["sent_in_window"]
    backlog = report["sent_at_window_end"] - report["consumed_at_window_end"]
    return {"send_per_s": sent / report["window_s"],
            "consume_per_s": report["consumed_in_window"] / report["window_s"],
            "backlog_at_window_end": backlog,
            "keeps_up": backlog <= (1 - KEEP_UP) * report["sent_at_window_end"],
            "cpu_us_per_message": cpu_s / sent * 1e6 if sent else None,
            "cpu_cores": cpu_s / report["window_s"],
            "backlog_after_drain": report["sent"] - report["consumed"],
            **{key: report[key] for key in ("window_s", "sent_in_window",
                                            "consumed_in_window", "sent", "consumed", "failed",
                                            "first_failure", "drain_s")}}


def loads(args: argparse.Namespace) -> list[tuple[str, int]]:
    """The (mode, body size) pairs to run, in order."""
    return [(mode, size) for mode in args.modes for size in args.sizes]


def run(args: argparse.Namespace) -> dict:
    """Every load against every requested target; failures are recorded, not raised."""
    from tests.support.rocketmq_install import LabInstall

    install = LabInstall.prepare()
    report: dict = {"machine": machine_facts(args),
                    "settings": {key: getattr(args, key) for key in (
                        "modes", "sizes", "threads", "in_flight", "broker_warmup_s",
                        "warmup_s", "window_s",
                        "drain_s", "targets")},
                    "results": {}, "failures": {}}
    openers = {"java": java_target, "postbox": postbox_target}
    for name in args.targets:
        results = report["results"][name] = {}
        try:
            with openers[name](install, args.dir, f"load-{name}") as target:
                progress(args, f"{name}: warming up for {args.broker_warmup_s:g} s ...")
                warm_up = argparse.Namespace(**{**vars(args), "warmup_s": args.broker_warmup_s,
                                                "window_s": 1.0})
                measure_load(install, target, "async", min(args.sizes), warm_up, "warm-up")
                for mode, size in loads(args):
                    progress(args, f"{name}: {mode}, {size} B ...")
                    results[f"{mode}-{size}"] = measure_load(install, target, mode, size, args)
        except Exception as error:  # any failure is reported with the other target's figures
            report["failures"][name] = f"{type(error).__name__}: {error}"[:4000]
            progress(args, f"{name} FAILED: {report['failures'][name]}")
    report["ratios"] = ratios(report["results"])
    report["transactions"] = transaction_ratios(report["results"])
    return report


def transaction_ratios(results: dict) -> dict:
    """Per body size both *sync* and *tx* ran: each target's tx ÷ sync sends/s, and postbox's
    ratio ÷ java's when both targets have one."""
    found: dict = {}
    for name, loads_run in results.items():
        for load, figures in loads_run.items():
            mode, _, size = load.partition("-")
            sync = loads_run.get(f"sync-{size}")
            if mode == "tx" and sync and sync["send_per_s"]:
                found.setdefault(size, {})[name] = figures["send_per_s"] / sync["send_per_s"]
    for ratios_of_size in found.values():
        if ratios_of_size.get("java") and "postbox" in ratios_of_size:
            ratios_of_size["postbox_over_java"] = ratios_of_size["postbox"] / ratios_of_size[
                "java"]
    return found


def ratios(results: dict) -> dict:
    """postbox ÷ java for each load both targets measured."""
    java, postbox = results.get("java", {}), results.get("postbox", {})
    found = {}
    for load in sorted(set(java) & set(postbox)):
        ours, theirs = postbox[load], java[load]
        cpu = (ours["cpu_us_per_message"] / theirs["cpu_us_per_message"]
               if ours["cpu_us_per_message"] and theirs["cpu_us_per_message"] else None)
        found[load] = {"send": ours["send_per_s"] / theirs["send_per_s"],
                       "consume": (ours["consume_per_s"] / theirs["consume_per_s"]
                                   if theirs["consume_per_s"] else None),
                       "cpu_per_message": cpu}
    return found


def render(report: dict) -> None:
    """One row per target and load, then the ratios against the targets."""
    machine, settings = report["machine"], report["settings"]
    print(f"Broker load: official Java client 5.3.3, sync x {settings['threads']} threads, "
          f"async x {settings['in_flight']} in flight, {settings['window_s']:g} s windows after "
          f"{settings['warmup_s']:g} s warm-up (brokers warmed {settings['broker_warmup_s']:g} s); "
          f"{machine['cpu_count']} CPUs ({machine['cpu_model']})")
    print(f"{'target':<9}{'load':<12}{'sent/s':>10}{'consumed/s':>12}{'backlog':>9}"
          f"{'CPU us/msg':>12}{'cores':>7}{'drained':>9}{'failed':>8}")
    for name, results in report["results"].items():
        for load, f in results.items():
            cpu = f["cpu_us_per_message"]
            print(f"{name:<9}{load:<12}{f['send_per_s']:>10,.0f}{f['consume_per_s']:>12,.0f}"
                  f"{f['backlog_at_window_end']:>9,}"
                  f"{cpu if cpu is not None else float('nan'):>12,.1f}{f['cpu_cores']:>7.2f}"
                  f"{'yes' if f['backlog_after_drain'] <= 0 else 'no':>9}{f['failed']:>8,}")
    for name, failure in report["failures"].items():
        print(f"{name:<9}FAILED: {failure.splitlines()[0]}")
    for load, r in report["ratios"].items():
        send = "meets" if r["send"] >= TARGET_THROUGHPUT else "below"
        cpu = r["cpu_per_message"]
        cpu_text = "n/a" if cpu is None else (
            f"{cpu:.2f}x ({'meets' if cpu <= TARGET_CPU else 'above'} {TARGET_CPU}x)")
        kept = report["results"]["postbox"][load]["keeps_up"]
        print(f"postbox / java {load}: send {r['send']:.2f}x ({send} {TARGET_THROUGHPUT}x), "
              f"CPU per message {cpu_text}, consumer {'keeps up' if kept else 'falls behind'}")
    for size, found in report.get("transactions", {}).items():
        each = ", ".join(f"{name} {found[name]:.2f}" for name in TARGETS if name in found)
        over = found.get("postbox_over_java")
        verdict = "" if over is None else (
            f"; postbox / java {over:.2f} ({'meets' if over >= 1 else 'below'} 1)")
        print(f"transactional ratio (tx / sync sends per second), {size} B: {each}{verdict}")


def main(argv: list[str] | None = None) -> int:
    """Run, print; 2 when a target failed."""
    reports: list[dict] = []
    code = run_and_print(lambda args: reports.append(run(args)) or reports[-1], render,
                         parse_args(argv))
    return code or (2 if reports[-1]["failures"] else 0)


if __name__ == "__main__":
    sys.exit(main())
