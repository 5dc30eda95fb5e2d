"""Remoting peers benchmark: the official Java client against Apache's broker and Postbox's.

Run ``python -m bench.remoting_peers_bench`` (``--quick`` for a short run, ``--json`` for one
JSON document on stdout; progress goes to stderr). It needs the compatibility lab (a JDK and
Maven; ``tests/support/rocketmq_install.py`` fetches the jars into the lab cache) and runs, one
target after the other, each alone on the machine:

* **java**: Apache RocketMQ 5.3.3's name server and broker (``tests/support/rocketmq_processes``,
  the lab's settings: ASYNC_FLUSH, 256 MiB heap, here with 128 MiB commit-log segments).
* **postbox**: ``postbox broker start --namesrv-listen ... --remoting-listen ...`` as a child
  process (``tests/support/remoting_targets.PostboxRemotingServer``), ASYNC flush, the same
  segment size.

Against each, a topic of 8 queues is created (``mqadmin``-equivalent admin call through the
lab driver), then **one JVM** (the lab driver's ``bench`` command, ``tests/lab/driver/.../
Bench.java``, full JIT, 512 MiB heap) runs the official remoting client 5.3.3:

* *send*: ``--threads`` threads (4) share one ``DefaultMQProducer`` and send ``--messages`` N
  (default 20 000; quick 3 000) messages of 100 bytes synchronously; the clock runs from the
  first send until the last returned (each must be SEND_OK).
* *consume*: a new group's ``DefaultMQPushConsumer`` (default settings: 20 consume threads, pull
  batches of 32, from the first offset) starts; the clock runs from ``start()`` until its
  listener saw all N (distinct unique keys): start-up, rebalance and the first pulls included.

Ratios are postbox / java of the same run (target >= 0.5 on each, printed, never asserted). A
target that fails (its server does not start, a send fails) is reported as failed; the exit code
is then 2. One repetition; VM noise is easily +-20 %.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.store_bench import machine_facts, progress
from bench.workdir import temp_dir

TOPIC = "bench"
BODY_BYTES = 100
QUEUE_COUNT = 8
SEGMENT_BYTES = 128 << 20
TARGET_RATIO = 0.5
BENCH_JVM = ("-Xms512m", "-Xmx512m", "-XX:+UseG1GC")
CLIENT_TIMEOUT_S = 1_800  # both phases; each phase gets a third of it
POSTBOX_CONF = f"""\
mappedFileSizeCommitLog={SEGMENT_BYTES}
flushDiskType=ASYNC_FLUSH
"""
TARGETS = ("java", "postbox")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m bench.remoting_peers_bench",
                                description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short run: 3 000 messages")
    p.add_argument("--messages", type=int, help="messages per target (default 20 000)")
    p.add_argument("--threads", type=int, default=4, help="producer threads")
    p.add_argument("--targets", default=",".join(TARGETS),
                   help="comma-separated subset of java,postbox")
    p.add_argument("--dir", default=None, help="parent of the temp dirs (None: system temp)")
    p.add_argument("--json", action="store_true", help="print one JSON document, no table")
    args = p.parse_args(argv)
    if args.messages is None:
        args.messages = 3_000 if args.quick else 20_000
    args.targets = [t for t in args.targets.split(",") if t]
    if min(args.messages, args.threads) < 1 or not set(args.targets) <= set(TARGETS):
        p.error("--messages and --threads must be positive; --targets from java,postbox")
    return args


def measure(install, root: Path, namesrv: str, broker_addr: str,
            args: argparse.Namespace) -> dict:
    """Create the topic on ``broker_addr``, then time the client against ``namesrv``."""
    from tests.support.rocketmq_lab import LabDriver

    driver = LabDriver(install, root / "driver", namesrv)
    driver.run("create-topic", broker_addr=broker_addr, topic=TOPIC, queues=QUEUE_COUNT)
    driver.run("await-route", topics=[TOPIC], timeout_ms=60_000)
    client = LabDriver(install, root / "client", namesrv, jvm_flags=BENCH_JVM,
                       timeout_s=CLIENT_TIMEOUT_S)
    report = client.run("bench", topic=TOPIC, group=f"bench-{time.time_ns()}",
                        count=args.messages, body_bytes=BODY_BYTES, threads=args.threads,
                        timeout_ms=CLIENT_TIMEOUT_S * 1000 // 3)
    return {"count": report["count"],
            "send_per_s": report["count"] / report["send_s"],
            "consume_per_s": report["count"] / report["consume_s"],
            "send_s": report["send_s"], "consume_s": report["consume_s"]}


@dataclass(frozen=True)
class Target:
    """A broker under measurement: where its name server and broker listen, its process id
    (for its CPU time) and a scratch directory for the drivers."""

    root: Path
    namesrv: str
    broker_addr: str
    pid: int


@contextlib.contextmanager
def java_target(install, parent: str | None, label: str = "peers-java") -> Iterator[Target]:
    """Apache's name server and broker on a fresh store, stopped afterwards."""
    from tests.support.rocketmq_processes import start_broker, start_namesrv

    with temp_dir(parent, label) as root:
        namesrv_server, namesrv = start_namesrv(install, root)
        try:
            broker = start_broker(install, root, namesrv, root / "store", name="bench-java",
                                  extra={"mappedFileSizeCommitLog": str(SEGMENT_BYTES),
                                         "mappedFileSizeConsumeQueue": str(300_000 * 20)})
            try:
                yield Target(root, namesrv, broker.address, broker.server.process.pid)
            finally:
                broker.stop()
        finally:
            namesrv_server.stop()


@contextlib.contextmanager
def postbox_target(install, parent: str | None,
                   label: str = "peers-postbox") -> Iterator[Target]:
    """``postbox broker start`` serving remoting on a fresh store, stopped afterwards."""
    from tests.support.remoting_targets import PostboxRemotingServer, RemotingTarget
    from tests.support.rocketmq_lab import LabDriver

    with temp_dir(parent, label) as root:
        server = PostboxRemotingServer(root / "server", broker_conf=POSTBOX_CONF).start()
        try:
            found = RemotingTarget.discover(
                "postbox", LabDriver(install, root / "driver", server.namesrv))
            yield Target(root, server.namesrv, found.broker_addr, server.process.process.pid)
        finally:
            server.stop()


def measure_java(install, args: argparse.Namespace) -> dict:
    """Apache's name server and broker, started for this measurement and stopped after it."""
    with java_target(install, args.dir) as target:
        return measure(install, target.root, target.namesrv, target.broker_addr, args)


def measure_postbox(install, args: argparse.Namespace) -> dict:
    """``postbox broker start`` serving remoting, started for this measurement."""
    with postbox_target(install, args.dir) as target:
        return measure(install, target.root, target.namesrv, target.broker_addr, args)


def run(args: argparse.Namespace) -> dict:
    """Every requested target, one after the other; failures are recorded, not raised."""
    from tests.support.rocketmq_install import LabInstall

    install = LabInstall.prepare()
    report: dict = {"machine": machine_facts(args), "messages": args.messages,
                    "threads": args.threads, "body_bytes": BODY_BYTES, "results": {},
                    "failures": {}}
    for target, measure_target in (("java", measure_java), ("postbox", measure_postbox)):
        if target not in args.targets:
            continue
        progress(args, f"{target}: {args.messages} messages ...")
        try:
            report["results"][target] = measure_target(install, args)
        except Exception as error:  # any failure is reported with the other target's figures
            report["failures"][target] = f"{type(error).__name__}: {error}"[:4000]
            progress(args, f"{target} FAILED: {report['failures'][target]}")
    results = report["results"]
    if {"java", "postbox"} <= set(results):
        report["ratios"] = {
            phase: results["postbox"][f"{phase}_per_s"] / results["java"][f"{phase}_per_s"]
            for phase in ("send", "consume")}
    return report


def render(report: dict) -> None:
    """The figures as a table, then the ratios against the target."""
    machine = report["machine"]
    print(f"Remoting peers: official Java client 5.3.3, {report['messages']} x "
          f"{report['body_bytes']} B, {report['threads']} sender threads; "
          f"{machine['cpu_count']} CPUs ({machine['cpu_model']})")
    print(f"{'target':<10}{'send msgs/s':>14}{'consume msgs/s':>17}")
    for target, figures in report["results"].items():
        print(f"{target:<10}{figures['send_per_s']:>14,.0f}{figures['consume_per_s']:>17,.0f}")
    for target, failure in report["failures"].items():
        print(f"{target:<10}FAILED: {failure.splitlines()[0]}")
    for phase, ratio in report.get("ratios", {}).items():
        verdict = "meets" if ratio >= TARGET_RATIO else "below"
        print(f"postbox / java {phase}: {ratio:.2f}x ({verdict} the {TARGET_RATIO}x target)")


def main(argv: list[str] | None = None) -> int:
    """Run, print; 2 when a target failed."""
    args = parse_args(argv)
    report = run(args)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render(report)
    return 2 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
