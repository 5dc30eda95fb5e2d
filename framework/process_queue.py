"""``ProcessQueue``: the pulled-but-not-finished messages of one message queue (reference §12.4).

A push consumer pulls batches of one (topic, queue id) into a ``ProcessQueue`` and hands them to
handler threads; as handlers finish, the queue says which offset may be committed. Orderly
consumers additionally *take* a batch into a consuming map, and either commit it, roll it back,
or put some of it back for a retry in place (§10.5).

Every message is in exactly one of two maps, both keyed by queue offset:

* **waiting** — pulled, not yet taken (concurrent consumers only use this one);
* **consuming** — taken by an orderly consumer, not yet committed or put back.

"In flight" means either map. Invariants:

* The offset to commit is never past an in-flight message: ``remove`` returns the smallest
  in-flight offset, or ``max_offset_seen + 1`` when nothing is in flight. A slow message holds
  the committed offset back (duplicates after a restart, never a loss).
* ``count`` and ``size_bytes`` cover both maps, so flow control sees everything not finished.
* An offset is held at most once; adding an offset already in flight does nothing.
* ``take`` always moves the lowest waiting offsets, so an orderly consumer sees offset order.

Once ``drop()`` has been called (the queue was rebalanced away or its lock lost), callers must
not commit offsets returned by ``remove`` or ``commit``; the methods keep working so in-flight
handlers can finish, but their results are stale. Checking ``dropped`` is the caller's job.

Thread-safety: every method and property takes the one lock. ``last_pull_ms``,
``last_consume_ms``, ``locked``, ``lock_renewed_ms`` and ``suspended_until_ms`` are plain
attributes owned by the consumer that holds this queue (single int/bool stores). Nothing here is
persisted: after a crash the messages are pulled again from the last committed offset.

Cost: offsets are kept in a sorted list, so adding in offset order and taking are O(batch), and
removing an arbitrary offset is O(log n) plus a memmove of the list tail.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable
from typing import Generic, Protocol, TypeVar

PULL_THRESHOLD_COUNT_DEFAULT = 1000
PULL_THRESHOLD_SIZE_BYTES_DEFAULT = 100 * 1024 * 1024
SUSPEND_CURRENT_QUEUE_MS_DEFAULT = 1000


class PulledMessage(Protocol):
    """What a ``ProcessQueue`` needs of a message (``storage_engine.MessageView`` fits)."""

    @property
    def queue_offset(self) -> int:
        """The message's offset in its consume queue."""
        ...

    @property
    def body(self) -> bytes:
        """The message body; its length counts towards ``size_bytes``."""
        ...


MessageT = TypeVar("MessageT", bound=PulledMessage)


class ProcessQueue(Generic[MessageT]):
    """In-flight messages of one (topic, queue id), keyed by queue offset."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[int, MessageT] = {}
        self._waiting_offsets: list[int] = []  # the keys of _waiting, ascending
        self._consuming: dict[int, MessageT] = {}
        self._size_bytes = 0
        self._max_offset_seen: int | None = None
        self._dropped = False
        self.last_pull_ms = 0
        self.last_consume_ms = 0
        self.locked = False
        self.lock_renewed_ms = 0
        self.suspended_until_ms = 0

    # ---- concurrent consumption -----------------------------------------------------------

    def add(self, messages: Iterable[MessageT]) -> None:
        """Hold newly pulled messages; offsets already in flight are ignored."""
        with self._lock:
            for message in messages:
                offset = message.queue_offset
                if offset in self._waiting or offset in self._consuming:
                    continue
                self._insert_waiting(offset, message)
                self._size_bytes += len(message.body)
                if self._max_offset_seen is None or offset > self._max_offset_seen:
                    self._max_offset_seen = offset

    def remove(self, messages: Iterable[PulledMessage]) -> int | None:
        """Forget finished messages and return the offset that may now be committed.

        Returns the smallest offset still in flight, or ``max_offset_seen + 1`` when none is
        left, or None if nothing was ever added. Offsets not in flight are ignored. Callers must
        not commit the result once the queue is ``dropped``.
        """
        with self._lock:
            for message in messages:
                offset = message.queue_offset
                held = self._pop_waiting(offset)
                if held is None:
                    held = self._consuming.pop(offset, None)
                if held is not None:
                    self._size_bytes -= len(held.body)
            return self._commit_offset()

    # ---- orderly consumption --------------------------------------------------------------

    def take(self, batch_size: int) -> list[MessageT]:
        """Move up to ``batch_size`` lowest-offset waiting messages to consuming; return them.

        The list is in offset order and empty when nothing is waiting.

        Raises:
            ValueError: ``batch_size`` is below 1.
        """
        if batch_size < 1:
            raise ValueError(f"take batch_size must be >= 1, got {batch_size}")
        with self._lock:
            offsets = self._waiting_offsets[:batch_size]
            del self._waiting_offsets[:batch_size]
            batch = [self._waiting.pop(offset) for offset in offsets]
            self._consuming.update(zip(offsets, batch, strict=True))
            return batch

    def commit(self) -> int | None:
        """Finish every consuming message; return the offset to commit, or None if none.

        The offset is the highest consumed offset + 1, unless a lower offset is still waiting
        (put back by ``make_reconsume_later``): then it is that offset, so nothing is skipped.
        Callers must not commit the result once the queue is ``dropped``.
        """
        with self._lock:
            if not self._consuming:
                return None
            offset = max(self._consuming) + 1
            self._size_bytes -= sum(len(message.body) for message in self._consuming.values())
            self._consuming.clear()
            if self._waiting_offsets:
                offset = min(offset, self._waiting_offsets[0])
            return offset

    def rollback(self) -> None:
        """Put every consuming message back to waiting, to be taken again in offset order."""
        with self._lock:
            for offset, message in self._consuming.items():
                self._insert_waiting(offset, message)
            self._consuming.clear()

    def make_reconsume_later(self, messages: Iterable[MessageT]) -> None:
        """Put these consuming messages back to waiting at their offsets, for a retry in place.

        The given objects replace the held ones (they may carry a raised reconsume count).
        Messages that are not currently consuming are ignored: they are either still waiting or
        already finished, and a finished offset must not come back.
        """
        with self._lock:
            for message in messages:
                offset = message.queue_offset
                held = self._consuming.pop(offset, None)
                if held is None:
                    continue
                self._insert_waiting(offset, message)
                self._size_bytes += len(message.body) - len(held.body)

    # ---- state ----------------------------------------------------------------------------

    @property
    def count(self) -> int:
        """Messages in flight (waiting + consuming)."""
        with self._lock:
            return len(self._waiting) + len(self._consuming)

    @property
    def size_bytes(self) -> int:
        """Total body bytes of the messages in flight."""
        with self._lock:
            return self._size_bytes

    @property
    def span(self) -> int:
        """Highest in-flight offset minus the lowest; 0 when nothing is in flight."""
        with self._lock:
            bounds = self._in_flight_bounds()
            return 0 if bounds is None else bounds[1] - bounds[0]

    @property
    def max_offset_seen(self) -> int | None:
        """Highest offset ever added, or None if nothing was."""
        with self._lock:
            return self._max_offset_seen

    @property
    def dropped(self) -> bool:
        """True once ``drop()`` was called: results must no longer be committed."""
        with self._lock:
            return self._dropped

    def drop(self) -> None:
        """Mark the queue as no longer owned by this consumer (rebalanced away, lock lost)."""
        with self._lock:
            self._dropped = True

    def is_full(self, max_count: int = PULL_THRESHOLD_COUNT_DEFAULT,
                max_size_bytes: int = PULL_THRESHOLD_SIZE_BYTES_DEFAULT) -> bool:
        """True when pulling should pause: more than ``max_count`` messages or more than
        ``max_size_bytes`` body bytes in flight (RocketMQ's pullThresholdForQueue and
        pullThresholdSizeForQueue, which also trigger only when exceeded).
        """
        with self._lock:
            in_flight_count = len(self._waiting) + len(self._consuming)
            return in_flight_count > max_count or self._size_bytes > max_size_bytes

    # ---- helpers (lock held) --------------------------------------------------------------

    def _insert_waiting(self, offset: int, message: MessageT) -> None:
        self._waiting[offset] = message
        if not self._waiting_offsets or offset > self._waiting_offsets[-1]:
            self._waiting_offsets.append(offset)
        else:
            bisect.insort(self._waiting_offsets, offset)

    def _pop_waiting(self, offset: int) -> MessageT | None:
        message = self._waiting.pop(offset, None)
        if message is not None:
            del self._waiting_offsets[bisect.bisect_left(self._waiting_offsets, offset)]
        return message

    def _in_flight_bounds(self) -> tuple[int, int] | None:
        """(lowest, highest) in-flight offset, or None when nothing is in flight."""
        lows: list[int] = []
        highs: list[int] = []
        if self._waiting_offsets:
            lows.append(self._waiting_offsets[0])
            highs.append(self._waiting_offsets[-1])
        if self._consuming:
            lows.append(min(self._consuming))
            highs.append(max(self._consuming))
        return (min(lows), max(highs)) if lows else None

    def _commit_offset(self) -> int | None:
        if self._max_offset_seen is None:
            return None
        bounds = self._in_flight_bounds()
        return self._max_offset_seen + 1 if bounds is None else bounds[0]


__all__ = [
    "PULL_THRESHOLD_COUNT_DEFAULT", "PULL_THRESHOLD_SIZE_BYTES_DEFAULT",
    "SUSPEND_CURRENT_QUEUE_MS_DEFAULT", "ProcessQueue", "PulledMessage",
]
