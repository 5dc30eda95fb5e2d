"""Consume benchmark: framework end-to-end throughput and delay-level accuracy, in one run.

Run ``python -m bench.consume_bench`` (or ``postbox bench consume``); ``--quick`` for a short run,
``--json`` for one JSON document on stdout (progress goes to stderr). Everything runs in this one
process on embedded brokers (ASYNC flush, ``--segment-mib`` segments, key index sized for the
run) in fresh temp dirs, removed afterwards. Every message has a 100-byte body (one seeded body).

**Throughput** (``--messages`` N, default 200 000; ``--quick`` 20 000), topic ``bench`` with the
auto-created 8 queues, one consumer group with a no-op handler, per variant (``concurrent``:
default ``ConsumerOptions``, ``batch_size=1``; ``batch32``: ``batch_size=32``; ``orderly``):

* *end to end*: the app (and its consumer) is started first; the clock runs from the first
  ``app.producer.send`` (one producer thread, the main one) until the group's committed offsets
  cover all N: ``consumer.persist_offsets()`` then ``broker.consumer_progress(group)`` must show
  ``committed_offset == max_offset`` on every queue of the topic and N messages in total
  (polled every 5 ms once the last send returned). The handler must then have seen at least N
  (the table shows its count, more would be redeliveries, and for batch handlers the messages
  per call).
* *produce only*: the same N sends on a fresh broker with no consumer, until the last send
  returned and ``wait_dispatched()`` (the messages are consumable).
* *consume only*: on that pre-loaded broker, each variant in its own new group: the clock runs
  from ``app.start()`` until its committed offsets cover all N, as above.
* *raw baseline* (no framework, same run): ``MessageStore.put_message`` per message and
  ``put_messages`` in batches of 32 (queue round-robin over 8; ``Message`` objects, with a
  precomputed 32-hex ``unique_key`` as the producer would set, built inside the clock) until
  ``wait_dispatched()``; then ``get_message(max_count=32)`` over the 8 queues following
  ``next_offset``, touching every body. "raw put_messages + get" is N / (put s + get s), the
  rate of one thread doing both back to back: the ratio end to end / that is the framework's
  overhead (both share one interpreter and its GIL).

The issue's target, >= 100 000 msgs/s end to end, is printed next to the figures, never asserted.

**Delay accuracy** (``bench.delay_accuracy``): levels ``--delay-levels`` (default ``100ms 200ms
500ms 1s``); ``--delayed`` messages (default 20 000; quick 4 000) spread round-robin over the
levels, interleaved with ``--load-ratio`` x as many normal messages on another topic, sent by one
producer thread paced at ``--delay-rate`` msgs/s in total (default 5 000: fixed, so runs compare,
and low enough that the consumer keeps up and lateness is the scheduler's, not a backlog's; the
normal topic's send-to-handler latency shows whether it did), while one consumer group consumes
both topics. Lateness p50/p99/max from (a) the delay service's own samples (run time - deliver
time, per re-put message) and (b) end to end, wall clock: handler receive time - (send time +
the level's delay), send time carried in the body.

``--profile`` also profiles one end-to-end concurrent run with cProfile in every thread, timing
each thread's CPU time (``bench.thread_profile``), on ``--profile-messages`` (20 000), and prints
the top functions by cumulative and by own time (``--only profile``: that run alone). A wrong
result (missing message, timeout, an undelivered delayed message) raises ``BenchError`` (exit
status 2). One repetition of everything (~1.5 min at the defaults on 2 cores); run-to-run noise on
a VM is easily +-20 %, so compare figures of one run, not across runs. With 20 consume threads on
2 cores the concurrent consumer's rate is bimodal from run to run (GIL and lock convoys).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.consume_report import TARGETS, render
from bench.delay_accuracy import measure_delay_accuracy
from bench.peers import BenchError, run_and_print
from bench.store_bench import machine_facts, progress
from bench.workdir import temp_dir

TOPIC = "bench"
BODY_BYTES = 100
QUEUE_COUNT = 8  # the broker's default_topic_queue_count: what the producer round-robins over
RAW_BATCH = 32
MIB = 1 << 20
POLL_INTERVAL_S = 0.005
COMMIT_TIMEOUT_S = 600.0
WAIT_DISPATCHED_TIMEOUT_MS = 120_000


@dataclass(frozen=True)
class Variant:
    """One way of consuming: the handler options of ``@app.handler``."""

    name: str
    label: str
    batch_size: int = 1
    orderly: bool = False


VARIANTS = (Variant("concurrent", "concurrent, batch_size=1"),
            Variant("batch32", "concurrent, batch_size=32", batch_size=32),
            Variant("orderly", "orderly, batch_size=1", orderly=True))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options; ``--quick`` only changes the defaults of the counts."""
    p = argparse.ArgumentParser(prog="python -m bench.consume_bench", description=__doc__.split(
        "\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short run: 20 000 messages, 4 000 "
                   "delayed")
    p.add_argument("--messages", type=int, help="messages per throughput run (default 200 000; "
                   "quick 20 000)")
    p.add_argument("--variants", default=",".join(v.name for v in VARIANTS),
                   help="consumer variants, comma-separated")
    p.add_argument("--only", choices=("throughput", "delay", "profile"),
                   help="run one part only (profile: the --profile run alone)")
    p.add_argument("--delayed", type=int, help="delayed messages (default 20 000; quick 4 000)")
    p.add_argument("--load-ratio", type=int, default=3,
                   help="normal-topic messages sent per delayed message")
    p.add_argument("--delay-rate", type=int, default=5_000,
                   help="total send rate of the delay run, msgs/s")
    p.add_argument("--delay-levels", default="100ms 200ms 500ms 1s",
                   help="messageDelayLevel for the delay run")
    p.add_argument("--segment-mib", type=int, default=64, help="commit-log segment size")
    p.add_argument("--profile", action="store_true",
                   help="also cProfile one end-to-end concurrent run (all threads)")
    p.add_argument("--profile-messages", type=int, default=20_000,
                   help="messages of the profiled run (cProfile slows it about 8x)")
    p.add_argument("--profile-top", type=int, default=15, help="functions --profile prints")
    p.add_argument("--dir", default=None, help="parent of the temp dirs (None: system temp)")
    p.add_argument("--seed", type=int, default=20240601, help="seed for the body")
    p.add_argument("--json", action="store_true", help="print one JSON document, no table")
    args = p.parse_args(argv)
    if args.messages is None:
        args.messages = 20_000 if args.quick else 200_000
    if args.delayed is None:
        args.delayed = 4_000 if args.quick else 20_000
    by_name = {v.name: v for v in VARIANTS}
    names = [name.strip() for name in args.variants.split(",") if name.strip()]
    if not names or any(name not in by_name for name in names):
        p.error(f"--variants must name some of {', '.join(by_name)}")
    args.variant_list = [by_name[name] for name in names]
    if min(args.messages, args.delayed, args.segment_mib, args.profile_messages) < 1 \
            or args.load_ratio < 0 or args.delay_rate < 1:
        p.error("--messages, --delayed, --segment-mib, --profile-messages, --delay-rate must "
                "be positive, --load-ratio >= 0")
    return args


# ---------------------------------------------------------------- brokers and waiting


def store_config(root: Path, args: argparse.Namespace, message_count: int,
                 delay_levels: str | None = None):
    """ASYNC flush, ``--segment-mib`` segments, a key index file sized for ``message_count``."""
    from postbox.storage_engine import CommitLogConfig, DelayConfig, KeyIndexConfig, StoreConfig
    from postbox.storage_engine.config import parse_delay_levels

    extra = {} if delay_levels is None else {
        "delay": DelayConfig(levels_ms=parse_delay_levels(delay_levels))}
    return StoreConfig(root_dir=root,
                       commit_log=CommitLogConfig(segment_size_bytes=args.segment_mib * MIB),
                       key_index=KeyIndexConfig(slot_count_max=max(1024, message_count),
                                                entry_count_max=2 * message_count + 1024),
                       **extra)


@contextlib.contextmanager
def temp_broker(args: argparse.Namespace, label: str, message_count: int,
                delay_levels: str | None = None) -> Iterator:
    """An open embedded broker in a new temp dir; closed and deleted on exit."""
    from postbox.storage_engine import Broker

    with temp_dir(args.dir, f"consume-{label}") as root, \
            Broker.open(store_config(root, args, message_count, delay_levels)) as broker:
        yield broker


@contextlib.contextmanager
def temp_store(args: argparse.Namespace, label: str, message_count: int) -> Iterator:
    """An open bare ``MessageStore`` (no broker services) in a new temp dir."""
    from postbox.storage_engine import MessageStore

    with temp_dir(args.dir, f"consume-{label}") as root, \
            MessageStore.open(store_config(root, args, message_count)) as store:
        yield store


class NoopHandler:
    """The benchmark's handler: does nothing but note the size of each call of a batch handler
    (appends are atomic under the GIL, so any consume thread may call it)."""

    def __init__(self, batch: bool) -> None:
        self.batch_sizes: list[int] | None = [] if batch else None

    def __call__(self, argument) -> None:
        if self.batch_sizes is not None:
            self.batch_sizes.append(len(argument))


@contextlib.contextmanager
def running_app(broker, variant: Variant, group: str) -> Iterator[tuple]:
    """An ``App`` on ``broker`` with a ``NoopHandler`` for ``TOPIC`` in ``group``, and that
    handler; the app is stopped on exit."""
    from postbox.framework import App

    app, handler = App(broker=broker), NoopHandler(variant.batch_size > 1)
    app.handler(topic=TOPIC, consumer_group=group, consume_from="first",
                orderly=variant.orderly, batch_size=variant.batch_size)(handler)
    try:
        yield app, handler
    finally:
        app.stop()


def committed_all(app, group: str, count: int) -> bool:
    """Persist the consumer's offsets; True once they cover ``count`` messages of ``TOPIC``."""
    app.consumers[0].persist_offsets()
    rows = [row for row in app.broker.consumer_progress(group) if row.topic == TOPIC]
    return (sum(row.max_offset for row in rows) >= count
            and all(row.committed_offset == row.max_offset for row in rows))


def wait_committed(app, group: str, count: int) -> float:
    """``perf_counter()`` when the committed offsets of ``group`` first covered ``count``."""
    deadline = time.perf_counter() + COMMIT_TIMEOUT_S
    while not committed_all(app, group, count):
        if time.perf_counter() > deadline:
            rows = app.broker.consumer_progress(group)
            raise BenchError(f"group {group!r} did not commit {count} messages within "
                             f"{COMMIT_TIMEOUT_S:.0f} s: {rows!r}")
        time.sleep(POLL_INTERVAL_S)
    return time.perf_counter()


def handler_figures(app, handler: NoopHandler, group: str, count: int) -> dict:
    """Messages the handler saw (at least ``count`` once committed), its calls and their
    largest batch."""
    consumed = app.consumers[0].consumed_count()
    if consumed < count:
        raise BenchError(f"group {group!r} committed all {count} messages but its handler saw "
                         f"only {consumed}")
    sizes = handler.batch_sizes
    return {"consumed": consumed, "handler_calls": consumed if sizes is None else len(sizes),
            "largest_batch": 1 if sizes is None else max(sizes, default=0)}


def rate(count: int, seconds: float, **extra) -> dict:
    """One figure: count, seconds, per second, plus extra fields."""
    return {"count": count, "seconds": seconds, "per_s": count / seconds} | extra


# ---------------------------------------------------------------- framework measurements


def end_to_end(args: argparse.Namespace, variant: Variant, body: bytes, count: int) -> dict:
    """One producer thread sends ``count`` while the variant's consumer runs, until all are
    committed."""
    group = f"bench-e2e-{variant.name}"
    progress(args, f"end to end, {variant.label}: {count:,} messages")
    with temp_broker(args, "e2e", count) as broker, \
            running_app(broker, variant, group) as (app, handler):
        app.start()
        send = app.producer.send
        gc.collect()
        start = time.perf_counter()
        for _ in range(count):
            send(TOPIC, body)
        sent = time.perf_counter()
        done = wait_committed(app, group, count)
        handled = handler_figures(app, handler, group, count)
    return rate(count, done - start, sends_per_s=count / (sent - start), **handled)


def produce_then_consume(args: argparse.Namespace, body: bytes) -> tuple[dict, dict]:
    """Produce-only on a fresh broker, then consume-only of that load by each variant."""
    from postbox.framework import App

    count = args.messages
    progress(args, f"produce only: {count:,} messages, no consumer")
    with temp_broker(args, "preload", count) as broker:
        send = App(broker=broker).producer.send
        gc.collect()
        start = time.perf_counter()
        for _ in range(count):
            send(TOPIC, body)
        sent = time.perf_counter()
        if not broker.store.wait_dispatched(timeout_ms=WAIT_DISPATCHED_TIMEOUT_MS):
            raise BenchError(f"wait_dispatched(timeout_ms={WAIT_DISPATCHED_TIMEOUT_MS}) False")
        produced = rate(count, time.perf_counter() - start, calls_per_s=count / (sent - start))
        consumed = {variant.name: consume_preloaded(args, broker, variant)
                    for variant in args.variant_list}
    return produced, consumed


def consume_preloaded(args: argparse.Namespace, broker, variant: Variant) -> dict:
    """A new group of the variant consumes the pre-loaded topic, from ``app.start()``."""
    count, group = args.messages, f"bench-preloaded-{variant.name}"
    progress(args, f"consume only, {variant.label}: {count:,} pre-loaded messages")
    with running_app(broker, variant, group) as (app, handler):
        gc.collect()
        start = time.perf_counter()
        app.start()
        done = wait_committed(app, group, count)
        handled = handler_figures(app, handler, group, count)
    return rate(count, done - start, **handled)


# ---------------------------------------------------------------- raw store baseline


def raw_baseline(args: argparse.Namespace, body: bytes) -> dict:
    """``put_message``, ``put_messages`` and ``get_message`` on bare stores, no framework."""
    from postbox.storage_engine import Message

    count = args.messages
    keys = [f"{i:032X}" for i in range(count)]
    progress(args, f"raw store baseline: {count:,} messages")
    figures = {}
    with temp_store(args, "raw-single", count) as store:
        put = store.put_message
        gc.collect()
        start = time.perf_counter()
        for i in range(count):
            put(Message(TOPIC, body, unique_key=keys[i]), i % QUEUE_COUNT)
        wait_dispatched(store)
        figures["put_single"] = rate(count, time.perf_counter() - start)
    with temp_store(args, "raw-batch", count) as store:
        put_many = store.put_messages
        gc.collect()
        start = time.perf_counter()
        for number, first in enumerate(range(0, count, RAW_BATCH)):
            put_many([Message(TOPIC, body, unique_key=key)
                      for key in keys[first:first + RAW_BATCH]], number % QUEUE_COUNT)
        wait_dispatched(store)
        figures["put_batch"] = rate(count, time.perf_counter() - start)
        figures["get"] = rate(count, time_raw_gets(store, count))
    both_s = figures["put_batch"]["seconds"] + figures["get"]["seconds"]
    figures["put_batch_and_get"] = rate(count, both_s)
    return figures


def wait_dispatched(store) -> None:
    """``store.wait_dispatched`` or ``BenchError``."""
    if not store.wait_dispatched(timeout_ms=WAIT_DISPATCHED_TIMEOUT_MS):
        raise BenchError(f"wait_dispatched(timeout_ms={WAIT_DISPATCHED_TIMEOUT_MS}) False")


def time_raw_gets(store, count: int) -> float:
    """Seconds to read every message of ``TOPIC`` with ``get_message``, touching each body."""
    from postbox.storage_engine import GetStatus

    get, read, body_bytes = store.get_message, 0, 0
    gc.collect()
    start = time.perf_counter()
    for queue_id in range(QUEUE_COUNT):
        offset = 0
        while True:
            got = get("bench-raw", TOPIC, queue_id, offset, max_count=RAW_BATCH)
            if got.status is not GetStatus.FOUND:
                break
            for view in got.messages:
                body_bytes += len(view.body)
            read += len(got.messages)
            offset = got.next_offset
    elapsed = time.perf_counter() - start
    if read != count or body_bytes != count * BODY_BYTES:
        raise BenchError(f"get_message read {read} messages / {body_bytes} body bytes, "
                         f"expected {count} / {count * BODY_BYTES}")
    return elapsed


# ---------------------------------------------------------------- driver


def throughput(args: argparse.Namespace, body: bytes) -> dict:
    """Every throughput figure, with the ratios against the raw baseline."""
    raw = raw_baseline(args, body)
    produced, consumed = produce_then_consume(args, body)
    variants = {}
    for variant in args.variant_list:
        e2e = end_to_end(args, variant, body, args.messages)
        variants[variant.name] = {
            "label": variant.label, "end_to_end": e2e, "consume_only": consumed[variant.name],
            "e2e_vs_raw": e2e["per_s"] / raw["put_batch_and_get"]["per_s"],
            "consume_vs_raw_get": consumed[variant.name]["per_s"] / raw["get"]["per_s"],
            "target_met": e2e["per_s"] >= TARGETS["end_to_end_msgs_per_s"]}
    return {"raw": raw, "produce_only": produced, "variants": variants,
            "produce_vs_raw_put_single": produced["per_s"] / raw["put_single"]["per_s"]}


def delay_part(args: argparse.Namespace) -> dict:
    """The delay run on its own broker, paced at ``--delay-rate``."""
    total = args.delayed * (1 + args.load_ratio)
    progress(args, f"delay accuracy: {args.delayed:,} delayed + {total - args.delayed:,} normal "
             f"messages at {args.delay_rate:,} msgs/s, levels {args.delay_levels}")
    with temp_broker(args, "delay", 2 * total, args.delay_levels) as broker:
        return measure_delay_accuracy(broker, delayed_count=args.delayed,
                                      load_ratio=args.load_ratio,
                                      send_rate_per_s=args.delay_rate)


def profile_end_to_end(args: argparse.Namespace, body: bytes) -> dict:
    """One end-to-end concurrent run under cProfile in every thread; the top functions."""
    from bench.thread_profile import profiled_threads, top_functions

    progress(args, "profiling one end-to-end concurrent run (slower than unprofiled)")
    with profiled_threads() as profiles:
        figure = end_to_end(args, VARIANTS[0], body, args.profile_messages)
    return {"end_to_end": figure, "top": top_functions(profiles, args.profile_top),
            "top_own": top_functions(profiles, args.profile_top, key="own_s")}


def run(args: argparse.Namespace) -> dict:
    """Every requested measurement; returns the report as plain data."""
    body = random.Random(args.seed).randbytes(BODY_BYTES)
    report = {"machine": machine_facts(args), "targets": TARGETS,
              "settings": {name: getattr(args, name) for name in (
                  "quick", "messages", "variants", "delayed", "load_ratio", "delay_rate",
                  "delay_levels", "segment_mib", "profile", "profile_messages", "seed",
                  "only")},
              "body_bytes": BODY_BYTES, "throughput": None, "delay": None, "profile": None}
    if args.only in (None, "throughput"):
        report["throughput"] = throughput(args, body)
    if args.only in (None, "delay"):
        report["delay"] = delay_part(args)
    if args.profile or args.only == "profile":
        report["profile"] = profile_end_to_end(args, body)
    return report


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``python -m bench.consume_bench`` and ``postbox bench consume``."""
    args = parse_args(argv)
    return run_and_print(run, render, args)


if __name__ == "__main__":
    sys.exit(main())
