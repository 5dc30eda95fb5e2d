"""Delay-level scheduling accuracy under load, for ``bench.consume_bench``.

``measure_delay_accuracy`` runs on a broker the caller opened with short delay levels (e.g.
``100ms 200ms 500ms 1s``). One app, one consumer group with two handlers: ``bench-delayed``
(delayed messages, delivered there by the delay service) and ``bench-load`` (normal messages).
The app is started first; then the main thread sends, paced at ``send_rate_per_s`` in total, one
delayed message followed by ``load_ratio`` normal ones, over and over; delayed message ``j`` uses
level ``j % levels + 1``. Every body is 100 bytes and starts with the send time (``time_ns``,
taken just before ``send``) and the level, so a handler computes, on the wall clock:

* delayed: lateness = receive time - (send time + the level's delay). The store computes the
  deliver time from its whole-millisecond store timestamp, so a lateness below -1 ms would be a
  message delivered early; those are counted ("early"), never expected.
* normal: latency = receive time - send time (shows whether the consumer kept up).

The delay service's own samples (``delay_service.lateness_ms_samples()``: the run's start time
minus each re-put message's deliver time, whole ms) are reported next to them. The run ends when
the handlers saw every message (``BenchError`` after ``DRAIN_TIMEOUT_S``). Handlers only append
to lists (atomic under the GIL), so any consume thread may run them.
"""

from __future__ import annotations

import gc
import struct
import time

from bench.peers import BenchError

DELAYED_TOPIC = "bench-delayed"
LOAD_TOPIC = "bench-load"
GROUP = "bench-delay"
BODY_BYTES = 100
BODY_HEADER = struct.Struct("<qB")  # send time (epoch ns), delay level (0: normal message)
assert BODY_HEADER.size == 9
PACE_SLACK_S = 0.002  # sleep only when this far ahead of the schedule
POLL_INTERVAL_S = 0.01
DRAIN_TIMEOUT_S = 120.0
EARLY_MS = -1.0  # lateness below this means delivered before its deliver time
NS_PER_MS = 1_000_000


class Receipts:
    """What the two handlers saw, appended from the consume threads."""

    def __init__(self, levels_ms: tuple[int, ...]) -> None:
        self.levels_ms = levels_ms
        self.lateness_ns: dict[int, list[int]] = {
            level: [] for level in range(1, len(levels_ms) + 1)}
        self.load_latency_ns: list[int] = []

    def on_delayed(self, message) -> None:
        """Handler of ``DELAYED_TOPIC``: lateness against send time + the level's delay."""
        received_ns = time.time_ns()
        sent_ns, level = BODY_HEADER.unpack_from(message.body)
        self.lateness_ns[level].append(
            received_ns - sent_ns - self.levels_ms[level - 1] * NS_PER_MS)

    def on_load(self, message) -> None:
        """Handler of ``LOAD_TOPIC``: latency from send to receive."""
        received_ns = time.time_ns()
        sent_ns, _ = BODY_HEADER.unpack_from(message.body)
        self.load_latency_ns.append(received_ns - sent_ns)

    def delayed_count(self) -> int:
        """Delayed messages received so far."""
        return sum(len(samples) for samples in self.lateness_ns.values())


def send_schedule(delayed_count: int, load_ratio: int, level_count: int) -> list[int]:
    """The level of every message to send, in order; 0 for a normal message."""
    schedule: list[int] = []
    for j in range(delayed_count):
        schedule.append(j % level_count + 1)
        schedule.extend([0] * load_ratio)
    return schedule


def send_paced(producer, schedule: list[int], rate_per_s: int) -> float:
    """Send the schedule at ``rate_per_s`` (never ahead of it); returns the seconds taken."""
    send, pad = producer.send, bytes(BODY_BYTES - BODY_HEADER.size)
    gc.collect()
    start = time.perf_counter()
    for i, level in enumerate(schedule):
        ahead_s = start + i / rate_per_s - time.perf_counter()
        if ahead_s > PACE_SLACK_S:
            time.sleep(ahead_s)
        body = BODY_HEADER.pack(time.time_ns(), level) + pad
        if level:
            send(DELAYED_TOPIC, body, delay_level=level)
        else:
            send(LOAD_TOPIC, body)
    return time.perf_counter() - start


def wait_received(receipts: Receipts, delayed_count: int, load_count: int) -> float:
    """Seconds until the handlers saw every message."""
    start = time.perf_counter()
    deadline = start + max(receipts.levels_ms) / 1000 + DRAIN_TIMEOUT_S
    while (receipts.delayed_count() < delayed_count
           or len(receipts.load_latency_ns) < load_count):
        if time.perf_counter() > deadline:
            raise BenchError(f"after {DRAIN_TIMEOUT_S:.0f} s the handlers had "
                             f"{receipts.delayed_count()}/{delayed_count} delayed and "
                             f"{len(receipts.load_latency_ns)}/{load_count} normal messages")
        time.sleep(POLL_INTERVAL_S)
    return time.perf_counter() - start


def spread(samples_ms: list[float]) -> dict:
    """Count, p50, p99 (nearest rank), min and max of some millisecond samples."""
    ranked = sorted(samples_ms)
    if not ranked:
        return {"count": 0}

    def rank(quantile: float) -> float:
        return ranked[min(len(ranked) - 1, max(0, int(quantile * len(ranked) + 0.5) - 1))]

    return {"count": len(ranked), "p50_ms": rank(0.50), "p99_ms": rank(0.99),
            "min_ms": ranked[0], "max_ms": ranked[-1]}


def measure_delay_accuracy(broker, *, delayed_count: int, load_ratio: int,
                           send_rate_per_s: int) -> dict:
    """Send, consume and summarise (see the module docstring); the caller owns ``broker``."""
    from postbox.framework import App

    levels_ms = broker.delay_service.levels_ms
    receipts = Receipts(levels_ms)
    schedule = send_schedule(delayed_count, load_ratio, len(levels_ms))
    load_count = len(schedule) - delayed_count
    app = App(broker=broker)
    app.handler(topic=DELAYED_TOPIC, consumer_group=GROUP, consume_from="first")(
        receipts.on_delayed)
    app.handler(topic=LOAD_TOPIC, consumer_group=GROUP, consume_from="first")(receipts.on_load)
    app.start()
    try:
        send_s = send_paced(app.producer, schedule, send_rate_per_s)
        drain_s = wait_received(receipts, delayed_count, load_count)
    finally:
        app.stop()
    service = broker.delay_service
    if service.delivered_count != delayed_count:
        raise BenchError(f"the delay service delivered {service.delivered_count} messages "
                         f"(skipped {service.skipped_count}), {delayed_count} were sent")
    lateness_ms = {level: [ns / NS_PER_MS for ns in samples]
                   for level, samples in receipts.lateness_ns.items()}
    every_ms = [value for samples in lateness_ms.values() for value in samples]
    return {
        "levels_ms": list(levels_ms), "delayed_count": delayed_count, "load_count": load_count,
        "target_rate_per_s": send_rate_per_s, "send_seconds": send_s,
        "achieved_rate_per_s": len(schedule) / send_s, "drain_seconds": drain_s,
        "service": spread([float(ms) for ms in service.lateness_ms_samples()]),
        "end_to_end": spread(every_ms),
        "end_to_end_by_level": {str(level): spread(samples)
                                for level, samples in lateness_ms.items()},
        "early_count": sum(1 for value in every_ms if value < EARLY_MS),
        "load_latency": spread([ns / NS_PER_MS for ns in receipts.load_latency_ns]),
        "delivered_count": service.delivered_count, "skipped_count": service.skipped_count,
    }
