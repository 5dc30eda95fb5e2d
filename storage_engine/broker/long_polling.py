"""Long polling: ``ArrivalWaiter`` blocks until dispatch grows one of a set of queues;
``long_poll`` is a pull that waits for one when it finds nothing new.

The store calls ``on_arrival(topic, queue_id, max_offset)`` on its dispatch thread for every
dispatched record, so that path must cost next to nothing while nobody waits: it is one
lock-free dictionary membership test; only a watched queue takes the condition and wakes the
waiters (RocketMQ's ``PullRequestHoldService`` + ``notifyMessageArriving``).

No lost wake-ups: a waiter registers its queues and reads their max offsets while holding the
condition. Dispatch publishes a queue's new max offset *before* it calls the listener, so an
arrival is either seen by that first check, or its listener finds the queue registered and
must take the condition, which it can only get once the waiter sleeps in ``wait``.

Waits are bounded: a caller's timeout is capped at ``max_wait_ms``
(``broker.long_polling_max_ms``); ``wake_all`` ends every current wait (shutdown, rebalance);
a ``cancel`` callable is checked at every wake-up and at least every
``CANCEL_CHECK_INTERVAL_MS``. Blocking uses the monotonic clock of ``threading.Condition``:
waiting is real time, not logical time, so the injected clock plays no part here.

Thread-safety: every method may be called from any thread. Nothing here survives a crash.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from ..contract.message import GetResult, GetStatus

QueueKey = tuple[str, int]  # (topic, queue_id)

CANCEL_CHECK_INTERVAL_MS = 100
"""Longest a cancelled waiter keeps sleeping when nothing else wakes it."""


class ArrivalWaiter:
    """Waiters keyed by queue; wake-ups from the dispatch thread.

    Args:
        max_offset: the current max offset of a queue (0 for a queue that does not exist yet).
        max_wait_ms: cap on every wait.
    """

    def __init__(self, max_offset: Callable[[str, int], int], max_wait_ms: int) -> None:
        self._max_offset = max_offset
        self._max_wait_ms = max_wait_ms
        self._condition = threading.Condition()
        self._watched: dict[QueueKey, int] = {}  # queue -> number of waiters on it
        self._wake_generation = 0  # bumped by wake_all

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Dispatch listener: wake the waiters if anyone watches this queue."""
        if (topic, queue_id) in self._watched:  # lock-free: the common case is "nobody"
            with self._condition:
                self._condition.notify_all()

    def wake_all(self) -> None:
        """End every wait in progress (they return False)."""
        with self._condition:
            self._wake_generation += 1
            self._condition.notify_all()

    def wait(self, positions: Mapping[QueueKey, int], timeout_ms: int,
             cancel: Callable[[], bool] | None = None) -> bool:
        """True as soon as some queue has ``max_offset > positions[queue]``; False on timeout
        (capped at ``max_wait_ms``), ``wake_all`` or ``cancel()``."""
        keys = list(positions)
        deadline = time.monotonic() + max(0, min(timeout_ms, self._max_wait_ms)) / 1000
        with self._condition:
            generation = self._wake_generation
            self._watch(keys, 1)
            try:
                while True:
                    if self._arrived(positions):
                        return True
                    if generation != self._wake_generation or (cancel is not None and cancel()):
                        return False
                    remaining_s = deadline - time.monotonic()
                    if remaining_s <= 0:
                        return False
                    if cancel is not None:
                        remaining_s = min(remaining_s, CANCEL_CHECK_INTERVAL_MS / 1000)
                    self._condition.wait(remaining_s)
            finally:
                self._watch(keys, -1)

    def watched_count(self) -> int:
        """How many queues have a waiter (for tests and stats)."""
        with self._condition:
            return len(self._watched)

    def _arrived(self, positions: Mapping[QueueKey, int]) -> bool:
        max_offset = self._max_offset
        return any(max_offset(topic, queue_id) > offset
                   for (topic, queue_id), offset in positions.items())

    def _watch(self, keys: list[QueueKey], delta: int) -> None:
        """Add (+1) or remove (-1) one waiter on each key (called under the condition)."""
        watched = self._watched
        for key in keys:
            count = watched.get(key, 0) + delta
            if count > 0:
                watched[key] = count
            else:
                watched.pop(key, None)


def long_poll(read: Callable[[int], GetResult], offset: int, waiter: ArrivalWaiter,
              queue: QueueKey, timeout_ms: int,
              stopped: Callable[[], bool] = lambda: False) -> GetResult:
    """Pull with ``read(offset)``; while that finds nothing new at the end of the queue, wait
    for an arrival (at most ``timeout_ms`` in all, and no longer than the waiter's cap) and
    read again. Returns the last read.

    After a NO_MATCHED_MESSAGE the next read starts at its ``next_offset``, so messages the tag
    filter rejected are not scanned twice and the caller's next pull starts past them.
    """
    result = read(offset)
    if timeout_ms <= 0:
        return result
    deadline_ms = _monotonic_ms() + timeout_ms
    while (wait_from := nothing_new_from(result)) is not None:
        remaining_ms = deadline_ms - _monotonic_ms()
        if remaining_ms <= 0 or stopped():
            break
        if result.status is GetStatus.NO_MATCHED_MESSAGE:
            offset = result.next_offset
        arrived = waiter.wait({queue: wait_from}, remaining_ms)
        result = read(offset)
        if not arrived:
            break
    return result


def nothing_new_from(result: GetResult) -> int | None:
    """The max offset to wait beyond when ``result`` found nothing new at the end of its queue
    (a queue that does not exist yet counts as empty), else None (it found messages, or the
    offset needs fixing first: too small, overflowing badly, or removed)."""
    status = result.status
    if status is GetStatus.OFFSET_OVERFLOW_ONE or status is GetStatus.NO_MESSAGE_IN_QUEUE:
        return result.max_offset
    if status is GetStatus.NO_MATCHED_LOGIC_QUEUE:
        return 0
    if status is GetStatus.NO_MATCHED_MESSAGE and result.next_offset >= result.max_offset:
        return result.max_offset
    return None


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


__all__ = ["CANCEL_CHECK_INTERVAL_MS", "ArrivalWaiter", "QueueKey", "long_poll",
           "nothing_new_from"]
