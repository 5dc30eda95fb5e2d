"""Remote benchmark: the official RocketMQ 5 client against a Postbox broker process, next to
embedded ``Broker`` figures measured in the same run.

Run ``python -m bench.remote_bench`` (``--quick`` for a short run, ``--json`` for one JSON
document on stdout; progress goes to stderr). Every message has a 100-byte body (one seeded
body); each side gets a fresh store (ASYNC flush, 64 MiB segments) in a temp dir, removed
afterwards.

* **remote**: ``postbox broker start --store DIR --listen 127.0.0.1:0`` as a child process
  (its own interpreter, as deployed) and rocketmq-python-client 5.1.2 here.

  - *send*: ``--threads`` threads (default 4) each call ``Producer.send`` (synchronous, one
    RPC per message) N/threads times on one shared producer; the clock runs until the last
    send returned.
  - *receive + ack*: ``--threads`` ``SimpleConsumer`` s of one group, each looping
    ``receive(32, 30 s)`` and acknowledging every message with ``ack`` (one RPC per message:
    the client has no batch ack, and its ``ack_async`` needs an asyncio loop in the calling
    thread); the clock runs until N distinct message ids were acknowledged.
* **embedded** (same run, this process): ``Broker.send`` of the same N messages from
  ``--threads`` threads, then ``Broker.pull(max_count=32)`` over the 8 queues following
  ``next_offset`` on one thread, touching every body.

Ratios are remote / embedded. A wrong result (missing or duplicate message) raises
``BenchError`` (exit 2). One repetition (about a minute at the defaults on 2 cores); VM noise is
easily +-20 %.
"""

from __future__ import annotations

import argparse
import contextlib
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
from bench.workdir import temp_dir

TOPIC = "bench"
GROUP = "bench-group"
BODY_BYTES = 100
QUEUE_COUNT = 8
MIB = 1 << 20
SERVER_START_TIMEOUT_S = 60.0
CONSUME_TIMEOUT_S = 600.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m bench.remote_bench",
                                description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short run: 3 000 messages")
    p.add_argument("--messages", type=int, help="messages per run (default 20 000; quick 3 000)")
    p.add_argument("--threads", type=int, default=4, help="client threads (send and consume)")
    p.add_argument("--dir", default=None, help="parent of the temp dirs (None: system temp)")
    p.add_argument("--seed", type=int, default=20240601, help="seed for the body")
    p.add_argument("--json", action="store_true", help="print one JSON document, no table")
    args = p.parse_args(argv)
    if args.messages is None:
        args.messages = 3_000 if args.quick else 20_000
    if args.messages < 1 or args.threads < 1:
        p.error("--messages and --threads must be positive")
    return args


def write_broker_conf(root: Path) -> Path:
    """The store settings both sides use (64 MiB segments, ASYNC flush)."""
    path = root / "broker.conf"
    path.write_text(f"mappedFileSizeCommitLog={64 * MIB}\nflushDiskType=ASYNC_FLUSH\n")
    return path


@contextlib.contextmanager
def broker_process(root: Path) -> Iterator[str]:
    """``postbox broker start`` on ``root/store``; yields its address; SIGTERM at the end."""
    postbox = str(Path(sys.executable).with_name("postbox"))
    command = [postbox, "broker", "start", "--store", str(root / "store"), "--listen",
               "127.0.0.1:0", "--broker-conf", str(write_broker_conf(root)), "--grace", "2"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True)
    try:
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()),
                                  daemon=True)
        reader.start()
        reader.join(SERVER_START_TIMEOUT_S)
        if not lines or not lines[0].startswith("listening on "):
            raise BenchError(f"the broker process did not start: {lines!r}")
        yield lines[0].split()[-1]
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
        if code != 0:
            raise BenchError(f"the broker process exited with {code}")


def split(count: int, parts: int) -> list[int]:
    """``count`` split into ``parts`` near-equal shares."""
    return [count // parts + (1 if index < count % parts else 0) for index in range(parts)]


def run_threads(shares: list[int], work) -> float:
    """Run ``work(index, share)`` on one thread per share; seconds until all returned."""
    errors: list[BaseException] = []

    def guarded(index: int, share: int) -> None:
        try:
            work(index, share)
        except BaseException as error:  # re-raised on the main thread
            errors.append(error)

    threads = [threading.Thread(target=guarded, args=(index, share))
               for index, share in enumerate(shares)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise BenchError(f"a client thread failed: {errors[0]!r}") from errors[0]
    return elapsed


# ---------------------------------------------------------------- embedded


def embedded_figures(args: argparse.Namespace, body: bytes) -> dict:
    """``Broker.send`` from ``--threads`` threads, then ``Broker.pull`` of everything."""
    from postbox.storage_engine import Broker, Message, StoreConfig

    with temp_dir(args.dir, "remote-embedded") as root:
        config = StoreConfig.from_broker_conf(write_broker_conf(root), root_dir=root / "store")
        with Broker.open(config) as broker:
            def send(index: int, share: int) -> None:
                for number in range(share):
                    broker.send(Message(TOPIC, body, unique_key=f"e{index:02d}{number:010d}"))

            send_s = run_threads(split(args.messages, args.threads), send)
            broker.store.wait_dispatched(timeout_ms=120_000)
            started = time.perf_counter()
            total = 0
            for queue_id in broker.queue_ids(TOPIC):
                offset = 0
                while True:
                    result = broker.pull(GROUP, TOPIC, queue_id, offset, 32)
                    if not result.messages:
                        break
                    total += sum(len(view.body) > 0 for view in result.messages)
                    offset = result.next_offset
            pull_s = time.perf_counter() - started
    if total != args.messages:
        raise BenchError(f"embedded pull read {total} of {args.messages} messages")
    return {"send_per_s": args.messages / send_s, "consume_per_s": args.messages / pull_s}


# ---------------------------------------------------------------- remote


def remote_figures(args: argparse.Namespace, body: bytes) -> dict:
    """The official client's send and receive+ack against a broker process."""
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        FilterExpression,
        Message,
        Producer,
        SimpleConsumer,
    )

    with temp_dir(args.dir, "remote-remote") as root, broker_process(root) as address:
        config = ClientConfiguration(address, Credentials(), request_timeout=10)
        producer = Producer(config, (TOPIC,))
        producer.startup()
        sent: set[str] = set()
        sent_lock = threading.Lock()

        def send(index: int, share: int) -> None:
            for _ in range(share):
                message = Message()
                message.topic = TOPIC
                message.body = body
                receipt = producer.send(message)
                with sent_lock:
                    sent.add(receipt.message_id)

        try:
            send_s = run_threads(split(args.messages, args.threads), send)
        finally:
            producer.shutdown()
        if len(sent) != args.messages:
            raise BenchError(f"{len(sent)} distinct ids for {args.messages} sends")
        progress(args, f"remote send: {args.messages / send_s:,.0f} msgs/s")
        consumers = [SimpleConsumer(config, GROUP, {TOPIC: FilterExpression()},
                                    await_duration=5) for _ in range(args.threads)]
        for consumer in consumers:
            consumer.startup()
        acked: set[str] = set()
        deadline = time.monotonic() + CONSUME_TIMEOUT_S

        def consume(index: int, _share: int) -> None:
            consumer = consumers[index]
            while time.monotonic() < deadline:
                with sent_lock:
                    if len(acked) >= args.messages:
                        return
                messages = consumer.receive(32, 30)
                for message in messages:
                    consumer.ack(message)
                with sent_lock:
                    acked.update(message.message_id for message in messages)

        try:
            consume_s = run_threads([0] * args.threads, consume)
        finally:
            for consumer in consumers:
                consumer.shutdown()
    if acked != sent:
        raise BenchError(f"acknowledged {len(acked)} of {len(sent)} sent message ids")
    return {"send_per_s": args.messages / send_s, "consume_per_s": args.messages / consume_s}


# ---------------------------------------------------------------- report


def run(args: argparse.Namespace) -> dict:
    """Both sides; returns the report as plain data."""
    body = random.Random(args.seed).randbytes(BODY_BYTES)
    progress(args, f"embedded: {args.messages:,} messages, {args.threads} threads")
    embedded = embedded_figures(args, body)
    progress(args, f"remote: {args.messages:,} messages, {args.threads} client threads")
    remote = remote_figures(args, body)
    return {"machine": machine_facts(args),
            "settings": {"messages": args.messages, "threads": args.threads,
                         "body_bytes": BODY_BYTES},
            "embedded": embedded, "remote": remote,
            "ratios": {name: remote[name] / embedded[name] for name in embedded}}


def render(report: dict) -> None:
    """The figures as a small table."""
    settings = report["settings"]
    print(f"remote bench: {settings['messages']:,} messages of {settings['body_bytes']} B, "
          f"{settings['threads']} client threads; {report['machine']['cpu_affinity']} CPUs")
    print(f"{'':<24}{'embedded msgs/s':>18}{'remote msgs/s':>16}{'remote/embedded':>18}")
    for name, label in (("send_per_s", "send"), ("consume_per_s", "consume (recv+ack)")):
        print(f"{label:<24}{report['embedded'][name]:>18,.0f}{report['remote'][name]:>16,.0f}"
              f"{report['ratios'][name]:>18.3f}")


def main(argv: list[str] | None = None) -> int:
    """Entry point (``python -m bench.remote_bench``)."""
    return run_and_print(run, render, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
