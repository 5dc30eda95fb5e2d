"""``SendCoalescer``: concurrent sends of one client share ``SendBatch`` calls (group commit).

A unary gRPC call costs far more than storing a message, so when several threads send at once
their messages travel together: each ``submit`` queues its message; a caller that finds a free
call slot (at most ``calls_max`` batches in flight) takes the queued messages of the oldest
one's topic — up to ``batch_count_max`` messages and ``batch_bytes_max`` body bytes — and makes
the call for all of them, then everyone whose message was in it returns its own result. A lone
sender makes a call of one at once, so no latency is added. One topic per batch keeps access
control exact (a denied topic fails only its own messages); the server stores a batch's
messages in order, and a thread's sends stay in its call order (each waits for its result).

Thread-safety: ``submit`` may be called from any thread (one condition). Nothing is kept.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

BATCH_COUNT_MAX = 256
BATCH_BYTES_MAX = 1 << 20
CALLS_MAX = 1


class _Entry:
    __slots__ = ("topic", "header", "body", "done", "outcome")

    def __init__(self, topic: object, header: bytes, body: bytes) -> None:
        self.topic = topic
        self.header = header
        self.body = body
        self.done = False
        self.outcome: Any = None  # the call's answer for this message, or an exception


SendBatch = Callable[[list[bytes], list[bytes]], list[Any]]
"""(encoded headers, bodies) → one outcome per message (an answer, or an exception instance)."""


class SendCoalescer:
    """Batches concurrent sends; see the module docstring."""

    def __init__(self, send_batch: SendBatch, *, calls_max: int = CALLS_MAX,
                 batch_count_max: int = BATCH_COUNT_MAX,
                 batch_bytes_max: int = BATCH_BYTES_MAX) -> None:
        self._send_batch = send_batch
        self._calls_max = calls_max
        self._count_max = batch_count_max
        self._bytes_max = batch_bytes_max
        self._condition = threading.Condition()
        self._pending: list[_Entry] = []
        self._calls = 0

    def submit(self, topic: object, header: bytes, body: bytes) -> Any:
        """Send one message (in some batch); its answer, or raise its error."""
        entry = _Entry(topic, header, body)
        with self._condition:
            self._pending.append(entry)
            while not entry.done:
                if self._calls < self._calls_max and self._pending:
                    self._lead(self._take())
                else:
                    self._condition.wait()
        if isinstance(entry.outcome, BaseException):
            raise entry.outcome
        return entry.outcome

    def _take(self) -> list[_Entry]:
        """Queued messages of the oldest one's topic, within the limits (under the lock)."""
        topic = self._pending[0].topic
        batch: list[_Entry] = []
        rest: list[_Entry] = []
        size = 0
        for entry in self._pending:
            fits = len(batch) < self._count_max and (
                not batch or size + len(entry.body) <= self._bytes_max)
            if entry.topic == topic and fits:
                batch.append(entry)
                size += len(entry.body)
            else:
                rest.append(entry)
        self._pending = rest
        return batch

    def _lead(self, batch: list[_Entry]) -> None:
        """Make the call for ``batch`` (called under the lock; released during the call)."""
        self._calls += 1
        self._condition.release()
        try:
            try:
                outcomes = self._send_batch([e.header for e in batch], [e.body for e in batch])
            except BaseException as error:  # the whole call failed: every message fails
                outcomes = [error] * len(batch)
        finally:
            self._condition.acquire()
            self._calls -= 1
            for entry, outcome in zip(batch, outcomes, strict=True):
                entry.outcome = outcome
                entry.done = True
            self._condition.notify_all()


__all__ = ["BATCH_BYTES_MAX", "BATCH_COUNT_MAX", "CALLS_MAX", "SendCoalescer"]
