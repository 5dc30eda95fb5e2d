"""Group commit, the project's leader/follower mechanism for synchronous rounds: ``PositionWaiters``
and, on it, ``GroupCommit``. (The remote client's sends coalesce in ``network``'s send lanes
instead: their calls are asynchronous — answered later on the connection's reader thread, two in
flight, finished out of order — and each sender has its own timeout, none of which a round here
has; see the end of this docstring.)

**``PositionWaiters``**: threads waiting for a growing position. One position only grows (the
flushed end of the commit log; the end a slave acknowledged; the rounds a ``GroupCommit`` has
finished) and callers wait until it covers their own. Each waiting caller parks on its own lock
in a heap ordered by target position, and every advance releases exactly the waiters it covers
(one heap pop each): a released thread returns at once, with no shared lock to take again, so a
thousand waiting producers cost one wake-up each, not a thousand re-checks per advance.

**Leaders.** Where the waiting threads can move the position themselves (a disk sync, a batch
call), one of them at a time *leads*: ``wait_or_lead`` either returns (covered, or timed out) or
makes the caller the leader, which does the work, advances and calls ``end_lead``. ``end_lead``
hands leadership straight to the lowest waiter still not covered — it wakes up as the next
leader — or, with nobody waiting, lets it lapse. While a leader works, the other threads queue
and park, so the next round covers all of them (group commit with no dedicated thread to wake:
one hand-off per group instead of two). A thread that is not a waiter (a background flusher)
takes part with ``try_lead``/``end_lead``. One instance serves either plain waiters (``wait``)
or leading ones (``wait_or_lead``), never both: leadership is handed only to a thread that can
lead.

**``GroupCommit``**: one call of a batch function for the items of every thread waiting on it
(the idempotency admission rounds). Each ``run`` queues
its request under a ticket (1, 2, 3, …) and waits in a ``PositionWaiters`` for the finished
tickets to cover its own; the leader takes queued requests from the head (up to ``max_items``
items, and while ``joins`` accepts the next one; a request is never split), runs the function
once for all of them outside any lock, hands each request its own results — or the exception,
re-raised in each of their threads — and advances the position to the round's last ticket.
Nothing waits for company: a lone caller leads a round of its own items at once.

Why the send lanes are not a ``GroupCommit``: a round here ends before the next begins, so
finished rounds form one growing position and a waiter needs only its ticket. A lane writes a
call and returns; up to two calls are unanswered at once and may be answered in either order,
so each message is released on its own slot, and a sender that times out is taken out of the
queue or its call forgotten. Those are the lane's whole mechanism; a round function that
returns its results has no use for them.

Thread-safety: every method may be called from any thread; each structure is guarded by one
lock. Nothing here is persisted (a thread only returns after its position or round was reached).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

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

    def wait_or_lead(self, position: int, deadline: float | None) -> bool | None:
        """Wait for ``position`` as ``wait`` does, or lead: None means the caller is now the
        leader and must move the position, call ``end_lead``, then call this again.

        ``deadline`` is a ``time.monotonic()`` value (None: no deadline); True when covered,
        False past the deadline (or abandoned)."""
        return self._park(position, deadline, lead=True)

    def _park(self, position: int, deadline: float | None, *, lead: bool) -> bool | None:
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
        timeout_s = -1 if deadline is None else max(0.0, deadline - time.monotonic())
        if waiter.acquire(timeout=timeout_s):
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


Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass(eq=False)
class _Request(Generic[Item, Result]):
    items: Sequence[Item]
    ticket: int = 0
    results: list[Result] = field(default_factory=list)
    error: BaseException | None = None


class GroupCommit(Generic[Item, Result]):
    """Coalesces concurrent ``run`` calls into calls of ``function`` (see the module docstring).

    Args:
        function: takes the items of one round, returns one result per item in order.
        max_items: most items in one round; a request is never split, so a larger one runs
            alone.
        joins: ``joins(round_items, next_items)``: whether the next queued request may join
            a round holding ``round_items`` (which is never empty); default: always.
    """

    def __init__(self, function: Callable[[list[Item]], list[Result]], *,
                 max_items: int = 256,
                 joins: Callable[[list[Item], Sequence[Item]], bool] | None = None) -> None:
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items}")
        self._function = function
        self.max_items = max_items
        self._joins = joins
        self._lock = threading.Lock()
        self._queue: deque[_Request[Item, Result]] = deque()
        self._tickets = 0
        self._finished = PositionWaiters()  # the last ticket whose round ended
        self.rounds = 0
        """Calls of ``function`` that returned so far."""

    def run(self, items: Sequence[Item]) -> list[Result]:
        """``function``'s results for ``items``, computed in some round (maybe with others')."""
        request: _Request[Item, Result] = _Request(items)
        with self._lock:
            self._tickets += 1
            request.ticket = self._tickets
            self._queue.append(request)
        while (covered := self._finished.wait_or_lead(request.ticket, None)) is None:
            try:
                self._run_round(self._take_round())
            finally:
                self._finished.end_lead()
        assert covered, "a group commit round never ended"
        if request.error is not None:
            raise request.error
        return request.results

    def _take_round(self) -> list[_Request[Item, Result]]:
        """The queued requests of the next round: from the head, at least one."""
        taken: list[_Request[Item, Result]] = []
        items: list[Item] = []
        with self._lock:
            while self._queue:
                following = self._queue[0].items
                if taken and (len(items) + len(following) > self.max_items or (
                        self._joins is not None and not self._joins(items, following))):
                    break
                taken.append(self._queue.popleft())
                items.extend(following)
        return taken

    def _run_round(self, requests: list[_Request[Item, Result]]) -> None:
        """Run ``function`` once for ``requests``; each gets its results or the error."""
        if not requests:
            return
        items = [item for request in requests for item in request.items]
        try:
            results = self._function(items)
            if len(results) != len(items):
                raise AssertionError(f"group commit function returned {len(results)} results "
                                     f"for {len(items)} items")
        except BaseException as error:  # each waiting thread re-raises it as its own
            for request in requests:
                request.error = error
        else:
            start = 0
            for request in requests:
                request.results = results[start:start + len(request.items)]
                start += len(request.items)
            self.rounds += 1
        self._finished.advance(requests[-1].ticket)


__all__ = ["GroupCommit", "PositionWaiters"]
