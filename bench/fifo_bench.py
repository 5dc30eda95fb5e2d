"""FIFO benchmark: message groups consumed in order against the same messages without groups,
on a ``postbox broker`` process, in one run.

Run ``python -m bench.fifo_bench`` (``postbox bench fifo``; ``--quick`` for a short run,
``--json`` for one JSON document on stdout; progress goes to stderr). The broker is a
``postbox broker start`` process (ASYNC flush, 64 MiB segments) on a fresh store in a temp dir;
this process uses the framework over remoting: ``App(store_url="rocketmq://NAMESRV")``.
(The path measured is the framework's orderly consumer over remoting — pull, with the queues
locked by LOCK_BATCH_MQ — not the gRPC FIFO pop.)

``--groups`` G (default 1 000; quick 100) groups x ``--per-group`` M messages (default 100;
quick 50) of about 100 bytes, to a topic of 8 queues, sent by ``--threads`` threads (4): the
groups are dealt to the threads, and each thread sends message 0 of each of its groups, then
message 1, ..., so each group's messages go out one after the other from one thread. Two
phases, on two topics of the same broker:

* **plain** (the baseline): ``app.producer.send(topic, body)``, no group; a new group's
  default (concurrent) handler consumes them.
* **fifo**: ``app.producer.send(topic, body, message_group=f"g{n}")`` (one queue per group);
  a new group's ``orderly=True`` handler consumes them, and afterwards every group must have
  been seen exactly in the order sent (each message once).

Per phase: *send* msgs/s (the clock runs until the last send returned) and *consume* msgs/s
(from ``app.start()`` until the handler saw every message); ratios fifo / plain. A wrong result
(a message missing, twice, or out of its group's order) raises ``BenchError``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

from bench.peers import BenchError, run_and_print
from bench.store_bench import machine_facts, progress
from bench.transaction_bench import postbox_broker
from bench.workdir import temp_dir

MIB = 1 << 20
QUEUE_COUNT = 8
BROKER_CONF = f"mappedFileSizeCommitLog={64 * MIB}\nflushDiskType=ASYNC_FLUSH\n"
PADDING = "p" * 90
PHASES = ("plain", "fifo")
CONSUME_TIMEOUT_S = 900


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m bench.fifo_bench",
                                description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short run: 100 groups x 50")
    p.add_argument("--groups", type=int, help="message groups (default 1 000)")
    p.add_argument("--per-group", type=int, help="messages per group (default 100)")
    p.add_argument("--threads", type=int, default=4, help="sender threads")
    p.add_argument("--dir", default=None, help="parent of the temp dirs (None: system temp)")
    p.add_argument("--json", action="store_true", help="print one JSON document, no table")
    args = p.parse_args(argv)
    if args.groups is None:
        args.groups = 100 if args.quick else 1_000
    if args.per_group is None:
        args.per_group = 50 if args.quick else 100
    if min(args.groups, args.per_group, args.threads) < 1:
        p.error("--groups, --per-group and --threads must be positive")
    return args


def send_all(app, topic: str, args: argparse.Namespace, grouped: bool) -> dict:
    """Every message of every group; thread ``t`` sends groups ``t, t + threads, ...``."""
    failures: list[BaseException] = []

    def run(first: int) -> None:
        groups = range(first, args.groups, args.threads)
        try:
            for number in range(args.per_group):
                for group in groups:
                    body = f"{group}:{number}:{PADDING}".encode()
                    app.producer.send(topic, body,
                                      message_group=f"g{group}" if grouped else None)
        except BaseException as error:  # the run is then wrong
            failures.append(error)

    workers = [threading.Thread(target=run, args=(first,)) for first in range(args.threads)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    seconds = time.perf_counter() - start
    if failures:
        raise BenchError(f"a send failed: {failures[0]!r}")
    count = args.groups * args.per_group
    return {"count": count, "seconds": seconds, "per_s": count / seconds}


class Seen:
    """Per group, the message numbers in the order the handler saw them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_group: dict[int, list[int]] = {}
        self.count = 0

    def handle(self, message) -> None:
        group, number, _ = message.body.split(b":", 2)
        with self.lock:
            self.by_group.setdefault(int(group), []).append(int(number))
            self.count += 1

    def check(self, args: argparse.Namespace, ordered: bool) -> None:
        """Every message once; in each group's order when ``ordered``."""
        expected = list(range(args.per_group))
        for group in range(args.groups):
            seen = self.by_group.get(group, [])
            if sorted(seen) != expected:
                raise BenchError(f"group {group}: {len(seen)} delivered, "
                                 f"{len(set(seen))} distinct, of {args.per_group}")
            if ordered and seen != expected:
                wrong = next(index for index, (got, want)
                             in enumerate(zip(seen, expected, strict=True)) if got != want)
                raise BenchError(f"group {group} out of order at {wrong}: {seen[wrong]}")


def consume_all(options: dict, topic: str, args: argparse.Namespace, orderly: bool) -> dict:
    """A new group consumes ``topic`` from the first offset; the clock runs from ``start``
    until the handler saw every message."""
    from postbox.framework import App

    seen = Seen()
    app = App(**options)
    app.handler(topic=topic, consumer_group=f"{topic}-group", consume_from="first",
                orderly=orderly)(seen.handle)
    count = args.groups * args.per_group
    start = time.perf_counter()
    app.start()
    try:
        deadline = start + CONSUME_TIMEOUT_S
        while seen.count < count:
            if time.perf_counter() > deadline:
                raise BenchError(f"{topic}: {seen.count} of {count} consumed in "
                                 f"{CONSUME_TIMEOUT_S} s")
            time.sleep(0.02)
        seconds = time.perf_counter() - start
        time.sleep(0.5)  # a duplicate would show up now
    finally:
        app.stop()
    seen.check(args, ordered=orderly)
    return {"count": count, "seconds": seconds, "per_s": count / seconds}


def create_topics(namesrv: str) -> None:
    """Both phases' topics, ``QUEUE_COUNT`` queues each."""
    from postbox.network.client.remote_broker import RemotingBroker

    with RemotingBroker(namesrv, timeout_ms=30_000) as remote:
        for phase in PHASES:
            remote.create_topic(f"bench-{phase}", QUEUE_COUNT)
        deadline = time.monotonic() + 60
        while any(len(remote.queue_ids(f"bench-{phase}")) < QUEUE_COUNT for phase in PHASES):
            if time.monotonic() > deadline:
                raise BenchError("the topics' routes did not show up in 60 s")
            time.sleep(0.2)


def run(args: argparse.Namespace) -> dict:
    """Plain, then FIFO, on one broker process; the report as plain data."""
    from postbox.framework import App

    report: dict = {"machine": machine_facts(args), "load_average": os.getloadavg(),
                    "path": "framework orderly consumer over rocketmq:// (remoting pull)",
                    "settings": {name: getattr(args, name) for name in (
                        "groups", "per_group", "threads")}}
    with temp_dir(args.dir, "fifo") as root, postbox_broker(root, BROKER_CONF) as process:
        options = {"store_url": f"rocketmq://{process.namesrv_address}"}
        create_topics(process.namesrv_address)
        for phase in PHASES:
            topic, grouped = f"bench-{phase}", phase == "fifo"
            app = App(**options)
            try:
                progress(args, f"{phase}: send {args.groups * args.per_group:,}")
                sent = send_all(app, topic, args, grouped)
            finally:
                app.stop()
            progress(args, f"{phase}: consume{' orderly' if grouped else ''}")
            report[phase] = {"send": sent, "consume": consume_all(options, topic, args,
                                                                  orderly=grouped)}
    report["ratio"] = {part: report["fifo"][part]["per_s"] / report["plain"][part]["per_s"]
                       for part in ("send", "consume")}
    report["load_average_after"] = os.getloadavg()
    return report


def render(report: dict) -> None:
    """The figures as a small table."""
    settings = report["settings"]
    print(f"\nFIFO benchmark: {settings['groups']:,} groups x {settings['per_group']} messages, "
          f"{settings['threads']} sender threads; {report['path']}; load average "
          f"{report['load_average'][0]:.2f} -> {report['load_average_after'][0]:.2f}")
    print(f"{'':10}{'plain msgs/s':>14}{'fifo msgs/s':>14}{'fifo/plain':>12}")
    for part in ("send", "consume"):
        print(f"{part:10}{report['plain'][part]['per_s']:>14,.0f}"
              f"{report['fifo'][part]['per_s']:>14,.0f}{report['ratio'][part]:>12.2f}")
    print("every group consumed in the order sent, each message once")


def main(argv: list[str] | None = None) -> int:
    """Entry point (``python -m bench.fifo_bench``); 2 when a result was wrong."""
    return run_and_print(run, render, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
