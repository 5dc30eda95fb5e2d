"""Transactions benchmark: a transactional send + commit against a normal send, over remoting,
on a ``postbox broker`` process and on Apache RocketMQ 5.3.3, in one run.

Run ``python -m bench.transaction_bench`` (``postbox bench transactions``; ``--quick`` for a
short run, ``--json`` for one JSON document on stdout; progress goes to stderr). Targets, one
after the other, each alone on the machine and on a fresh store in a temp dir:

* **postbox**: ``postbox broker start`` as a child process serving its name server and remoting
  broker on free loopback ports (ASYNC flush, 64 MiB segments).
* **apache**: Apache RocketMQ 5.3.3's name server and broker from the compatibility lab
  (``tests/support/rocketmq_processes``, the lab's settings: ASYNC flush, 256 MiB heap). Needs
  a JDK and Maven (``tests/support/rocketmq_install.py``); without them the target is reported
  as failed and the other figures still print.

Against each, a topic of 8 queues is created, then this process's
``App(store_url="rocketmq://NAMESRV")`` (the framework's remoting client) sends, with
``--threads`` threads (4) sharing the app's producer, ``--messages`` N (default 10 000; quick
1 000) 100-byte messages:

* *normal*: ``app.producer.send(topic, body)``, one round trip each;
* *transactional*: ``app.producer.send_in_transaction(topic, body, execute=..., check=...)``
  whose local transaction commits at once: the half send, then the END_TRANSACTION commit,
  whose answer the client waits for (the Java client sends it one-way; measured on 2 cores, a
  commit sent without waiting raised Apache's ratio to 0.72 and left Postbox's at 0.57, whose
  single remoting thread is then the limit); each result must say committed and ended.

A warm-up of 50 of each kind comes first (connections, routes, the producer group's heartbeat).
Then the two phases alternate ``--reps`` times (default 2; quick 1) and the best rate of each
phase counts. The figure of merit is the ratio transactional / normal, for Postbox and for
Apache; the target is Postbox's ratio >= Apache's (printed, never asserted). With ``--java``,
the lab's Java ``TransactionMQProducer`` and ``DefaultMQProducer`` (one JVM per phase, the
driver's ``produce`` / ``transaction`` commands, one thread) are timed too: their rates include
the JVM's start, so only their ratio means much.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bench import producers
from bench.peers import BenchError, run_and_print
from bench.store_bench import machine_facts, progress
from bench.workdir import temp_dir

TOPIC = "bench-transactions"
BODY = b"t" * 100
QUEUE_COUNT = 8
WARM_UP = 50
MIB = 1 << 20
TARGETS = ("postbox", "apache")
POSTBOX_CONF = f"mappedFileSizeCommitLog={64 * MIB}\nflushDiskType=ASYNC_FLUSH\n"
JAVA_MESSAGES_MAX = 2_000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m bench.transaction_bench",
                                description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short run: 1 000 messages, 1 rep")
    p.add_argument("--messages", type=int, help="messages per phase (default 10 000)")
    p.add_argument("--reps", type=int, help="alternations of the two phases (default 2)")
    p.add_argument("--threads", type=int, default=4, help="producer threads")
    p.add_argument("--targets", default=",".join(TARGETS),
                   help="comma-separated subset of postbox,apache")
    p.add_argument("--java", action="store_true",
                   help="also time the lab's Java TransactionMQProducer (needs the lab)")
    p.add_argument("--dir", default=None, help="parent of the temp dirs (None: system temp)")
    p.add_argument("--json", action="store_true", help="print one JSON document, no table")
    args = p.parse_args(argv)
    if args.messages is None:
        args.messages = 1_000 if args.quick else 10_000
    if args.reps is None:
        args.reps = 1 if args.quick else 2
    args.targets = [t for t in args.targets.split(",") if t]
    if min(args.messages, args.threads, args.reps) < 1 or not set(args.targets) <= set(TARGETS):
        p.error("--messages, --threads, --reps must be positive; --targets from postbox,apache")
    return args


# ---------------------------------------------------------------- targets


@contextlib.contextmanager
def postbox_target(root: Path) -> Iterator[str]:
    """A ``postbox broker start`` process; yields its name server's address."""
    with postbox_broker(root, POSTBOX_CONF) as process:
        yield process.namesrv_address


@contextlib.contextmanager
def postbox_broker(root: Path, broker_conf: str, *, verbose: bool = False) -> Iterator:
    """``postbox broker start`` (``BrokerProcess``) on a fresh store under ``root``, logging
    as an operator runs it (warnings only; ``verbose``: INFO, the test fixture's ``-v``);
    stopped with SIGTERM afterwards (it must exit 0)."""
    from tests.support.broker_process import BrokerProcess

    root.mkdir(parents=True, exist_ok=True)
    conf = root / "broker.conf"
    conf.write_text(broker_conf)
    process = BrokerProcess(root / "store", broker_conf=conf)
    if not verbose:
        process.args.remove("-v")
    process.start()
    try:
        yield process
    finally:
        code = process.stop()
        if code != 0:
            raise BenchError(f"the broker exited {code}: {process.stderr_text()[-2000:]}")


@contextlib.contextmanager
def apache_target(root: Path) -> Iterator[str]:
    """Apache RocketMQ's name server and broker (the lab's); yields the name server's address."""
    from tests.support.rocketmq_install import LabInstall
    from tests.support.rocketmq_processes import start_broker, start_namesrv

    install = LabInstall.prepare()
    namesrv_server, namesrv = start_namesrv(install, root)
    try:
        broker = start_broker(install, root, namesrv, root / "store", name="bench-apache",
                              extra={"mappedFileSizeCommitLog": str(64 * MIB),
                                     "mappedFileSizeConsumeQueue": str(300_000 * 20)})
        try:
            yield namesrv
        finally:
            broker.stop()
    finally:
        namesrv_server.stop()


OPENERS: dict[str, Callable[[Path], contextlib.AbstractContextManager[str]]] = {
    "postbox": postbox_target, "apache": apache_target}


def create_topic(namesrv: str) -> None:
    """``TOPIC`` with ``QUEUE_COUNT`` queues on the one broker behind ``namesrv``."""
    from postbox.network.client.remote_broker import RemotingBroker

    with RemotingBroker(namesrv, timeout_ms=30_000) as remote:
        remote.create_topic(TOPIC, QUEUE_COUNT)
        deadline = time.monotonic() + 60
        while len(remote.queue_ids(TOPIC)) < QUEUE_COUNT:
            if time.monotonic() > deadline:
                raise BenchError(f"{TOPIC}'s route did not show {QUEUE_COUNT} queues in 60 s")
            time.sleep(0.2)


# ---------------------------------------------------------------- measurements


def send_normal(app) -> None:
    """One normal send."""
    app.producer.send(TOPIC, BODY)


def send_transactional(app) -> None:
    """One transactional send whose local transaction commits; it must end committed."""
    result = app.producer.send_in_transaction(TOPIC, BODY, execute=lambda _half: True,
                                              check=lambda _message: True)
    if not result.ended or result.state.name != "COMMIT":
        raise BenchError(f"a transaction did not end committed: {result}")


def timed_threads(app, send: Callable, count: int, threads: int) -> dict:
    """``threads`` threads call ``send(app)`` ``count`` times in all; the rate."""
    return producers.timed_threads(lambda: send(app), count, threads)


def measure_target(args: argparse.Namespace, target: str) -> dict:
    """Both phases, alternating, against one target; the best rate of each."""
    from postbox.framework import App

    with temp_dir(args.dir, f"tx-{target}") as root, OPENERS[target](root) as namesrv:
        create_topic(namesrv)
        app = App(store_url=f"rocketmq://{namesrv}")
        try:
            timed_threads(app, send_normal, WARM_UP, 1)
            timed_threads(app, send_transactional, WARM_UP, 1)
            runs: dict[str, list[dict]] = {"normal": [], "transactional": []}
            for rep in range(args.reps):
                for phase, send in (("normal", send_normal),
                                    ("transactional", send_transactional)):
                    progress(args, f"{target}: {phase} x {args.messages:,} (rep {rep + 1})")
                    runs[phase].append(timed_threads(app, send, args.messages, args.threads))
        finally:
            app.stop()
        java = measure_java(args, root, namesrv) if args.java else None
    best = {phase: max(run["per_s"] for run in figures) for phase, figures in runs.items()}
    return {"normal_per_s": best["normal"], "transactional_per_s": best["transactional"],
            "ratio": best["transactional"] / best["normal"], "runs": runs, "java": java}


def measure_java(args: argparse.Namespace, root: Path, namesrv: str) -> dict:
    """The lab's Java producers, one JVM per phase (``produce`` vs ``transaction``)."""
    from tests.support.rocketmq_install import LabInstall
    from tests.support.rocketmq_lab import LabDriver

    count = min(args.messages, JAVA_MESSAGES_MAX)
    spec = {"topic": TOPIC, "body": BODY.decode()}
    driver = LabDriver(LabInstall.prepare(), root / "driver", namesrv)
    figures = {}
    for phase, command, request in (
            ("normal", "produce", {"sends": [{"message": spec}] * count}),
            ("transactional", "transaction",
             {"messages": [{**spec, "outcome": "commit"}] * count})):
        progress(args, f"java {phase} x {count:,} (one JVM, start included)")
        start = time.perf_counter()
        results = driver.run(command, **request)
        seconds = time.perf_counter() - start
        if len(results) != count or {r["status"] for r in results} != {"SEND_OK"}:
            raise BenchError(f"java {phase}: not every send was SEND_OK")
        figures[f"{phase}_per_s"] = count / seconds
    figures["ratio"] = figures["transactional_per_s"] / figures["normal_per_s"]
    figures["count"] = count
    return figures


def run(args: argparse.Namespace) -> dict:
    """Every requested target, one after the other; a target that fails is reported."""
    report: dict = {"machine": machine_facts(args), "load_average": os.getloadavg(),
                    "settings": {name: getattr(args, name) for name in (
                        "messages", "reps", "threads", "targets", "java")},
                    "results": {}, "failures": {}}
    for target in args.targets:
        try:
            report["results"][target] = measure_target(args, target)
        except BenchError:
            raise
        except Exception as error:  # the lab missing, a server not starting: reported
            report["failures"][target] = f"{type(error).__name__}: {error}"[:4000]
            progress(args, f"{target} FAILED: {report['failures'][target]}")
    results = report["results"]
    if {"postbox", "apache"} <= set(results):
        report["postbox_ratio_over_apache_ratio"] = (results["postbox"]["ratio"]
                                                     / results["apache"]["ratio"])
    report["load_average_after"] = os.getloadavg()
    return report


def render(report: dict) -> None:
    """The figures as a table, then the verdict."""
    settings = report["settings"]
    print(f"\nTransactions benchmark: {settings['messages']:,} x {len(BODY)} B per phase, "
          f"{settings['threads']} threads, best of {settings['reps']}; framework rocketmq:// "
          f"client; load average {report['load_average'][0]:.2f} -> "
          f"{report['load_average_after'][0]:.2f}")
    print(f"{'target':<10}{'normal msgs/s':>15}{'tx msgs/s':>12}{'tx/normal':>11}")
    for target, figures in report["results"].items():
        print(f"{target:<10}{figures['normal_per_s']:>15,.0f}"
              f"{figures['transactional_per_s']:>12,.0f}{figures['ratio']:>11.2f}")
        if figures["java"]:
            java = figures["java"]
            print(f"{'  java':<10}{java['normal_per_s']:>15,.0f}"
                  f"{java['transactional_per_s']:>12,.0f}{java['ratio']:>11.2f}"
                  f"  (Java client, {java['count']:,} msgs, JVM start included)")
    for target, failure in report["failures"].items():
        print(f"{target:<10}FAILED: {failure.splitlines()[0]}")
    if "postbox_ratio_over_apache_ratio" in report:
        relative = report["postbox_ratio_over_apache_ratio"]
        verdict = "meets" if relative >= 1 else "below"
        print(f"Postbox tx/normal over Apache tx/normal: {relative:.2f} ({verdict} the "
              f"target >= 1)")


def main(argv: list[str] | None = None) -> int:
    """Entry point; 2 when a result was wrong or a target failed."""
    args = parse_args(argv)
    reports: list[dict] = []
    code = run_and_print(lambda a: reports.append(run(a)) or reports[-1], render, args)
    return code or (2 if reports and reports[0]["failures"] else 0)


if __name__ == "__main__":
    sys.exit(main())
