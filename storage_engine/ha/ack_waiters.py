"""``AckWaiters``: SYNC_MASTER puts waiting for a slave to acknowledge their end position.

RocketMQ's GroupTransferService as a group wait: the acknowledged position only grows; each
waiting put parks on its own lock in a heap ordered by target position, and every advance
releases exactly the waiters whose target it reached (one heap pop each), so a thousand waiting
producers cost one wake-up each, not a thousand re-checks per acknowledgement.

Thread-safety: ``advance`` (connection reader threads) and ``wait`` (producer threads) may be
called from any thread; the heap is guarded by one lock. Nothing here survives a restart: an
acknowledgement is about bytes in a live slave process.
"""

from __future__ import annotations

import heapq
import itertools
import threading

_allocate_lock = threading.Lock


class AckWaiters:
    """The highest position any slave acknowledged, and the puts waiting for it to grow."""

    def __init__(self) -> None:
        self.acked_position = 0
        self._lock = threading.Lock()
        self._heap: list[tuple[int, int, threading.Lock]] = []
        self._sequence = itertools.count()  # ties: heap entries never compare locks

    def advance(self, position: int) -> None:
        """A slave acknowledged everything below ``position``: release the waiters it covers."""
        if position <= self.acked_position:
            return
        with self._lock:
            if position <= self.acked_position:
                return
            self.acked_position = position
            heap = self._heap
            while heap and heap[0][0] <= position:
                heapq.heappop(heap)[2].release()

    def wait(self, position: int, timeout_ms: int) -> bool:
        """Block until some slave acknowledged ``position``; False after ``timeout_ms`` (or
        when ``release_all`` gave up on every waiter)."""
        if self.acked_position >= position:
            return True
        waiter = _allocate_lock()
        waiter.acquire()
        entry = (position, next(self._sequence), waiter)
        with self._lock:
            if self.acked_position >= position:
                return True
            heapq.heappush(self._heap, entry)
        if waiter.acquire(timeout=max(0, timeout_ms) / 1000):
            return self.acked_position >= position
        with self._lock:  # timed out, unless an advance released us just now
            try:
                self._heap.remove(entry)
            except ValueError:
                pass  # already popped (and released) by advance or release_all
            else:
                heapq.heapify(self._heap)
        return self.acked_position >= position

    def release_all(self) -> None:
        """Wake every waiter (shutdown); those not yet acknowledged see False."""
        with self._lock:
            heap, self._heap = self._heap, []
        for _position, _sequence, waiter in heap:
            waiter.release()

    @property
    def waiting_count(self) -> int:
        """Puts currently waiting."""
        return len(self._heap)
