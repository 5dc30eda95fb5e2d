"""``LeaseBook``: every ``PopQueue`` of the server, the deadline heap of their leases, and the
commit of each queue's watermark as the group's consumer offset.

``queue(group, topic, queue_id)`` creates a queue's state on first use, starting at the
group's committed offset (or the consume-from-last rule of ``Broker.start_offset`` for a group
that never committed there). ``schedule`` records a lease deadline; ``due(now_ms)`` hands back
the (queue, offset, token) entries whose deadline passed — entries are never removed early, so
a caller re-checks the token under the queue's lock and ignores stale ones (acked, renewed
under a new token). ``commit(queue)`` writes the queue's watermark with
``Broker.commit_offset`` when it changed (a group that consumed nothing from a new queue gets
no offset entry); it is called with the queue's lock held, so commits
of one queue happen in order.

Limits: at most ``queue_count_max`` queue states (a receive beyond it is refused) and the heap
holds one entry per lease deadline ever scheduled and not yet due.

Thread-safety: every method may be called from any thread; ``queue`` and the heap use one
internal lock, queue contents their own ``PopQueue.lock``. Nothing here survives a crash; the
committed offsets do, through the broker's offset table.
"""

from __future__ import annotations

import heapq
import itertools
import threading

from postbox.storage_engine.broker.broker import Broker
from postbox.storage_engine.contract.model import ConsumeFrom

from .pop_queue import Lease, PopQueue
from .protocol import Code
from .statuses import RequestError

QUEUE_COUNT_MAX = 100_000
QueueKey = tuple[str, str, int]  # (group, topic, queue id)


class LeaseBook:
    """Pop queue states and lease deadlines of one server."""

    def __init__(self, broker: Broker, *, queue_count_max: int = QUEUE_COUNT_MAX) -> None:
        self._broker = broker
        self._queue_count_max = queue_count_max
        self._lock = threading.Lock()
        self._queues: dict[QueueKey, PopQueue] = {}
        self._heap: list[tuple[int, int, QueueKey, int, str]] = []
        self._sequence = itertools.count()

    def queue(self, group: str, topic: str, queue_id: int) -> PopQueue:
        """The state of (group, topic, queue id), created at the group's start offset."""
        key = (group, topic, queue_id)
        existing = self._queues.get(key)
        if existing is not None:
            return existing
        committed = self._broker.query_offset(group, topic, queue_id)
        start = committed if committed is not None else self._broker.start_offset(
            group, topic, queue_id, ConsumeFrom.LAST)
        with self._lock:
            existing = self._queues.get(key)
            if existing is not None:
                return existing
            if len(self._queues) >= self._queue_count_max:
                raise RequestError(Code.TOO_MANY_REQUESTS,
                                   f"the server tracks {self._queue_count_max} pop queues "
                                   "already (LeaseBook queue_count_max)")
            state = PopQueue(group, topic, queue_id, start, committed)
            self._queues[key] = state
            return state

    def find(self, group: str, topic: str, queue_id: int) -> PopQueue | None:
        """The state of (group, topic, queue id) if it exists."""
        return self._queues.get((group, topic, queue_id))

    def queues(self) -> list[PopQueue]:
        """A snapshot of every queue state."""
        with self._lock:
            return list(self._queues.values())

    def schedule(self, state: PopQueue, offset: int, lease: Lease) -> None:
        """Remember that ``lease`` on ``offset`` is due at ``lease.deadline_ms``."""
        entry = (lease.deadline_ms, next(self._sequence), state.key, offset, lease.token)
        with self._lock:
            heapq.heappush(self._heap, entry)

    def due(self, now_ms: int, limit: int) -> list[tuple[PopQueue, int, str]]:
        """Up to ``limit`` (queue, offset, token) entries whose deadline is ``<= now_ms``."""
        found: list[tuple[PopQueue, int, str]] = []
        with self._lock:
            while self._heap and self._heap[0][0] <= now_ms and len(found) < limit:
                _, _, key, offset, token = heapq.heappop(self._heap)
                state = self._queues.get(key)
                if state is not None:
                    found.append((state, offset, token))
        return found

    def next_deadline_ms(self) -> int | None:
        """The earliest scheduled deadline, or None."""
        with self._lock:
            return self._heap[0][0] if self._heap else None

    def commit(self, state: PopQueue) -> None:
        """Commit the queue's watermark if it moved (call with ``state.lock`` held)."""
        watermark = state.watermark()
        if state.committed_offset is None and watermark == 0:
            return  # nothing consumed yet on a new queue: write no offset
        if watermark != state.committed_offset:
            self._broker.commit_offset(state.group, state.topic, state.queue_id, watermark)
            state.committed_offset = watermark

    def lease_count(self) -> int:
        """How many leases are open in all queues (for stats and tests)."""
        return sum(len(state.leases) for state in self.queues())


__all__ = ["QUEUE_COUNT_MAX", "LeaseBook"]
