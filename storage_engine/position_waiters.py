"""``PositionWaiters``: threads waiting for a growing log position (durable, acknowledged).

One position only grows (the flushed end of the commit log; the end a slave acknowledged) and
puts wait until it covers their own end. Each waiting put parks on its own lock in a heap ordered
by target position, and every advance releases exactly the waiters it covers (one heap pop each):
a released thread returns at once, with no shared lock to take again, so a thousand waiting
producers cost one wake-up each, not a thousand re-checks per advance.

The one thread that advances the position (a group flusher) may also wait until a number of puts
are parked (``wait_for_waiters``): that is how it gathers a whole group before a disk sync.

Thread-safety: ``advance``, ``release_all`` and ``wait_for_waiters`` may be called from any
thread (``wait_for_waiters`` by one thread at a time), ``wait`` from any number; the heap is
guarded by one lock. Nothing here is persisted.
"""

from __future__ import annotations

import heapq
import itertools
import threading

_allocate_lock = threading.Lock


class PositionWaiters:
    """A position that only grows, and the threads waiting for it to reach theirs."""

    def __init__(self, position: int = 0) -> None:
        self.position = position
        self._lock = threading.Lock()
        self._heap: list[tuple[int, int, threading.Lock]] = []
        self._sequence = itertools.count()  # ties: heap entries never compare locks
        self._count_wanted = 0  # wait_for_waiters: release _count_gate at this many waiters
        self._count_gate: threading.Lock | None = None
        self._abandoned = False  # release_all(final=True): the position never moves again

    def advance(self, position: int) -> int:
        """The position reached ``position``: release the waiters it covers; returns how many."""
        if position <= self.position:
            return 0
        released = 0
        with self._lock:
            if position <= self.position:
                return 0
            self.position = position
            heap = self._heap
            while heap and heap[0][0] <= position:
                heapq.heappop(heap)[2].release()
                released += 1
        return released

    def wait(self, position: int, timeout_ms: int) -> bool:
        """Block until the position reached ``position``; False after ``timeout_ms`` (or when
        ``release_all`` gave up on every waiter)."""
        if self.position >= position:
            return True
        waiter = _allocate_lock()
        waiter.acquire()
        entry = (position, next(self._sequence), waiter)
        with self._lock:
            if self.position >= position or self._abandoned:
                return self.position >= position
            heapq.heappush(self._heap, entry)
            gate = self._count_gate
            if gate is not None and len(self._heap) >= self._count_wanted:
                self._count_gate = None
                gate.release()
        if waiter.acquire(timeout=max(0, timeout_ms) / 1000):
            return self.position >= position
        with self._lock:  # timed out, unless an advance released us just now
            try:
                self._heap.remove(entry)
            except ValueError:
                pass  # already popped (and released) by advance or release_all
            else:
                heapq.heapify(self._heap)
        return self.position >= position

    def wait_for_waiters(self, count: int, timeout_s: float) -> bool:
        """Block until at least ``count`` threads wait; False after ``timeout_s``."""
        with self._lock:
            if len(self._heap) >= count:
                return True
            gate = _allocate_lock()
            gate.acquire()
            self._count_wanted, self._count_gate = count, gate
        if gate.acquire(timeout=timeout_s):
            return True
        with self._lock:
            self._count_gate = None
            return len(self._heap) >= count

    def release_all(self, *, final: bool = False) -> None:
        """Wake every waiter (shutdown, failure); those not yet covered see False. ``final``:
        the position will never move again (its mover failed), so later waits return at once."""
        with self._lock:
            self._abandoned = self._abandoned or final
            heap, self._heap = self._heap, []
            gate, self._count_gate = self._count_gate, None
        for _position, _sequence, waiter in heap:
            waiter.release()
        if gate is not None:
            gate.release()

    @property
    def waiting_count(self) -> int:
        """Threads currently waiting."""
        return len(self._heap)
