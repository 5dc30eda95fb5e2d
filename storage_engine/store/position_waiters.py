"""``PositionWaiters``: threads waiting for a growing log position (durable, acknowledged).

One position only grows (the flushed end of the commit log; the end a slave acknowledged) and
puts wait until it covers their own end. Each waiting put parks on its own lock in a heap ordered
by target position, and every advance releases exactly the waiters it covers (one heap pop each):
a released thread returns at once, with no shared lock to take again, so a thousand waiting
producers cost one wake-up each, not a thousand re-checks per advance.

**Leaders.** Where the waiting threads can move the position themselves (a disk sync), one of
them at a time *leads*: ``wait_or_lead`` either returns (covered, or timed out) or makes the
caller the leader, which syncs, advances and calls ``end_lead``. ``end_lead`` hands leadership
straight to the lowest waiter still not covered — it wakes up as the next leader — or, with
nobody waiting, lets it lapse. While a leader syncs, the other threads write and park, so the
next sync covers all of them (group commit with no dedicated flusher thread to wake: one
hand-off per group instead of two). A thread that is not a waiter (a background flusher) takes
part with ``try_lead``/``end_lead``.

One instance serves either plain waiters (``wait``) or leading ones (``wait_or_lead``), never
both: leadership is handed only to a thread that can lead.

Thread-safety: every method may be called from any thread; the heap and the leadership are
guarded by one lock. Nothing here is persisted.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time

_allocate_lock = threading.Lock


class PositionWaiters:
    """A position that only grows, and the threads waiting for it to reach theirs."""

    def __init__(self, position: int = 0) -> None:
        self.position = position
        self._lock = threading.Lock()
        self._heap: list[tuple[int, int, threading.Lock]] = []
        self._sequence = itertools.count()  # ties: heap entries never compare locks
        self._abandoned = False  # release_all(final=True): the position never moves again
        self._leading = False  # a leader is moving the position (or leadership is handed on)
        self._handed_to: threading.Lock | None = None  # the waiter woken to lead next

    def advance(self, position: int) -> int:
        """The position reached ``position``: release the waiters it covers; returns how many."""
        if position <= self.position:
            return 0
        with self._lock:
            if position <= self.position:
                return 0
            self.position = position
            heap = self._heap
            covered = []
            while heap and heap[0][0] <= position:
                covered.append(heapq.heappop(heap)[2])
        for waiter in covered:  # outside the lock: a woken thread never waits for it
            waiter.release()
        return len(covered)

    def wait(self, position: int, timeout_ms: int) -> bool:
        """Block until the position reached ``position``; False after ``timeout_ms`` (or when
        ``release_all`` gave up on every waiter)."""
        return bool(self._park(position, time.monotonic() + max(0, timeout_ms) / 1000, lead=False))

    def wait_or_lead(self, position: int, deadline: float) -> bool | None:
        """Wait for ``position`` as ``wait`` does, or lead: None means the caller is now the
        leader and must move the position, call ``end_lead``, then call this again.

        ``deadline`` is a ``time.monotonic()`` value; True when covered, False past the
        deadline (or abandoned)."""
        return self._park(position, deadline, lead=True)

    def _park(self, position: int, deadline: float, *, lead: bool) -> bool | None:
        if self.position >= position:
            return True
        waiter = _allocate_lock()
        waiter.acquire()
        entry = (position, next(self._sequence), waiter)
        with self._lock:
            if self.position >= position or self._abandoned:
                return self.position >= position
            if lead and not self._leading:
                self._leading = True
                return None
            heapq.heappush(self._heap, entry)
        if waiter.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return self._woken(waiter, position)
        with self._lock:  # timed out, unless an advance or a hand-over released us just now
            try:
                self._heap.remove(entry)
            except ValueError:  # already popped (and released) by advance, end_lead, release_all
                pass
            else:
                heapq.heapify(self._heap)
                return self.position >= position
        return self._woken(waiter, position)

    def _woken(self, waiter: threading.Lock, position: int) -> bool | None:
        """A released waiter: covered, handed the leadership, or given up on."""
        if self._handed_to is waiter:
            with self._lock:
                self._handed_to = None
            if self.position < position:
                return None
            self.end_lead()  # covered after all (a later advance): pass it on
        return self.position >= position

    def try_lead(self) -> bool:
        """Become the leader unless there is one; True if the caller now leads."""
        with self._lock:
            if self._leading or self._abandoned:
                return False
            self._leading = True
            return True

    def end_lead(self) -> None:
        """The leader is done: hand leadership to the lowest waiter not yet covered, if any."""
        with self._lock:
            if not self._heap or self._abandoned:
                self._leading = False
                return
            waiter = heapq.heappop(self._heap)[2]
            self._handed_to = waiter
        waiter.release()

    def release_all(self, *, final: bool = False) -> None:
        """Wake every waiter (shutdown, failure); those not yet covered see False. ``final``:
        the position will never move again (its mover failed), so later waits return at once
        and nobody leads again."""
        with self._lock:
            self._abandoned = self._abandoned or final
            heap, self._heap = self._heap, []
            if final:
                self._handed_to = None
        for _position, _sequence, waiter in heap:
            waiter.release()

    @property
    def waiting_count(self) -> int:
        """Threads currently waiting."""
        return len(self._heap)
