"""Transport benchmark: the framework's producer and consumer over a remote transport vs
embedded, one run.

Run ``python -m bench.transport_bench`` (``--quick`` for a short run, ``--json`` for one JSON
document on stdout; progress goes to stderr). Every message has a 100-byte body (one seeded
body); each transport gets a fresh broker (ASYNC flush) in a temp dir, removed afterwards.

* **embedded**: ``App(broker=Broker.open(...))`` in this process.
* **rocketmq** (``REMOTE``): a ``postbox broker start`` process serving its name server and
  remoting broker on free loopback ports (ASYNC flush, 64 MiB segments), and
  ``App(store_url="rocketmq://127.0.0.1:NAMESRV_PORT")`` here, so client and broker each have
  their own interpreter, as deployed (Postbox's former ``grpc://`` transport is gone).

Per transport, with ``--messages`` N (default 20 000; quick 4 000):

* *send*: ``--producers`` threads (default 4) call ``app.producer.send(topic, body)`` N/threads
  times each through one app (one channel); the clock runs from the start until the last send
  returned.
* *consume*: a new group with a no-op handler (``consume_from="first"``, default
  ``ConsumerOptions``) consumes those N: the clock runs from ``app.start()`` until
  ``persist_offsets()`` plus ``consumer_progress(group)`` show every queue of the topic
  committed to its max offset (polled every 20 ms through the app's own client, so over the
  network for a remote run) and the handler saw at least N.

Ratios are remote / embedded of the same run. A wrong result raises ``BenchError`` (exit 2).
One repetition (about a minute at the defaults on 2 cores); VM noise is easily +-20 %.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import random
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bench import producers
from bench.peers import BenchError, run_and_print
from bench.store_bench import machine_facts, progress
from bench.workdir import temp_dir

TOPIC = "bench"
BODY_BYTES = 100
QUEUE_COUNT = 8
MIB = 1 << 20
POLL_INTERVAL_S = 0.02
COMMIT_TIMEOUT_S = 300.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m bench.transport_bench",
                                description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short run: 4 000 messages")
    p.add_argument("--messages", type=int, help="messages per run (default 20 000)")
    p.add_argument("--producers", type=int, default=4, help="producer threads")
    p.add_argument("--segment-mib", type=int, default=64, help="commit-log segment size")
    p.add_argument("--dir", default=None, help="parent of the temp dirs (None: system temp)")
    p.add_argument("--seed", type=int, default=20240601, help="seed for the body")
    p.add_argument("--json", action="store_true", help="print one JSON document, no table")
    args = p.parse_args(argv)
    if args.messages is None:
        args.messages = 4_000 if args.quick else 20_000
    if min(args.messages, args.producers, args.segment_mib) < 1:
        p.error("--messages, --producers and --segment-mib must be positive")
    return args


# ---------------------------------------------------------------- brokers


def store_config(root: Path, segment_mib: int, message_count: int):
    """ASYNC flush, ``segment_mib`` segments, a key index sized for ``message_count``."""
    from postbox.storage_engine import CommitLogConfig, KeyIndexConfig, StoreConfig

    return StoreConfig(root_dir=root,
                       commit_log=CommitLogConfig(segment_size_bytes=segment_mib * MIB),
                       key_index=KeyIndexConfig(slot_count_max=max(1024, message_count),
                                                entry_count_max=2 * message_count + 1024))


@contextlib.contextmanager
def embedded(args: argparse.Namespace, root: Path) -> Iterator[dict]:
    """An open embedded broker for ``App(broker=...)``."""
    from postbox.storage_engine import Broker

    with Broker.open(store_config(root, args.segment_mib, args.messages)) as broker:
        yield {"broker": broker}


@contextlib.contextmanager
def postbox_remoting(args: argparse.Namespace, root: Path) -> Iterator[dict]:
    """A ``postbox broker start`` process serving remoting; ``App`` options for its name
    server."""
    from tests.support.remoting_targets import PostboxRemotingServer

    server = PostboxRemotingServer(root / "broker", broker_conf=(
        f"mappedFileSizeCommitLog={args.segment_mib * MIB}\nflushDiskType=ASYNC_FLUSH\n")).start()
    try:
        yield {"store_url": f"rocketmq://{server.namesrv}"}
    finally:
        server.stop()


REMOTE: dict[str, Callable[[argparse.Namespace, Path], contextlib.AbstractContextManager[dict]]]
REMOTE = {"rocketmq": postbox_remoting}
"""Remote transports measured against embedded: name → a context manager yielding the
``App`` options (``store_url``) of a broker it runs under ``root``."""


@contextlib.contextmanager
def broker_url(args: argparse.Namespace, transport: str) -> Iterator[dict]:
    """What an ``App`` is given for ``transport``, on a fresh store in a temp dir."""
    opener = embedded if transport == "embedded" else REMOTE[transport]
    with temp_dir(args.dir, f"transport-{transport}") as root, opener(args, root) as options:
        yield options


# ---------------------------------------------------------------- measurements


def send_all(app, body: bytes, count: int, threads: int) -> dict:
    """``threads`` threads send ``count`` messages in all through ``app.producer``."""
    producer = app.producer
    producer.send(TOPIC, body)  # connect, create the topic: not part of the clock
    return producers.timed_threads(lambda: producer.send(TOPIC, body), count, threads) | {
        "threads": threads}


def consume_all(app_options: dict, count: int) -> dict:
    """A new group consumes the topic from the first offset until it committed everything."""
    from postbox.framework import App

    consumed = [0]
    app = App(**app_options)

    @app.handler(topic=TOPIC, consumer_group="bench-consume", consume_from="first")
    def handle(message) -> None:
        consumed[0] += 1

    try:
        gc.collect()
        start = time.perf_counter()
        app.start()
        deadline = start + COMMIT_TIMEOUT_S
        while not committed_all(app, "bench-consume", count + 1):
            if time.perf_counter() > deadline:
                raise BenchError(f"not committed within {COMMIT_TIMEOUT_S:.0f} s")
            time.sleep(POLL_INTERVAL_S)
        seconds = time.perf_counter() - start
    finally:
        app.stop()
    if consumed[0] < count + 1:
        raise BenchError(f"committed everything but the handler saw only {consumed[0]}")
    return {"count": count + 1, "seconds": seconds, "per_s": (count + 1) / seconds,
            "handled": consumed[0]}


def committed_all(app, group: str, count: int) -> bool:
    """Persist the consumer's offsets; True once they cover ``count`` messages of ``TOPIC``."""
    app.consumers[0].persist_offsets()
    rows = [row for row in app.client.consumer_progress(group) if row.topic == TOPIC]
    return (sum(row.max_offset for row in rows) >= count
            and all(row.committed_offset == row.max_offset for row in rows))


def measure(args: argparse.Namespace, transport: str, body: bytes) -> dict:
    """Send then consume ``--messages`` over one transport."""
    from postbox.framework import App

    with broker_url(args, transport) as options:
        progress(args, f"{transport}: send {args.messages:,} x {BODY_BYTES} B, "
                       f"{args.producers} threads")
        app = App(**options)
        try:
            sent = send_all(app, body, args.messages, args.producers)
        finally:
            app.stop()
        progress(args, f"{transport}: consume {args.messages + 1:,}")
        consumed = consume_all(options, args.messages)
    return {"send": sent, "consume": consumed}


def run(args: argparse.Namespace) -> dict:
    """Every transport, embedded first; returns the report as plain data."""
    body = random.Random(args.seed).randbytes(BODY_BYTES)
    report = {"machine": machine_facts(args),
              "settings": {name: getattr(args, name) for name in (
                  "messages", "producers", "segment_mib", "seed")}}
    for transport in ("embedded", *REMOTE):
        report[transport] = measure(args, transport, body)
    report["ratio"] = {remote: {part: report[remote][part]["per_s"]
                                / report["embedded"][part]["per_s"]
                                for part in ("send", "consume")} for remote in REMOTE}
    return report


def render(report: dict) -> None:
    """The figures as a small table."""
    machine = report["machine"]
    settings = report["settings"]
    print(f"\nTransport benchmark: {settings['messages']:,} messages x {BODY_BYTES} B, "
          f"{settings['producers']} producer threads")
    print(f"machine: {machine.get('cpu_model')}, {machine.get('cpu_affinity')} cores, "
          f"Python {machine.get('python', '?')}\n")
    print(f"{'':10} {'transport':>10} {'msgs/s':>10} {'/embedded':>10}")
    for part in ("send", "consume"):
        for transport in ("embedded", *REMOTE):
            ratio = report["ratio"].get(transport, {}).get(part)
            shown = "" if ratio is None else f"{ratio:.2f}"
            print(f"{part:10} {transport:>10} {report[transport][part]['per_s']:>10,.0f} "
                  f"{shown:>10}")


def main(argv: list[str] | None = None) -> int:
    """Entry point (``python -m bench.transport_bench``)."""
    args = parse_args(argv)
    return run_and_print(run, render, args)


if __name__ == "__main__":
    sys.exit(main())
