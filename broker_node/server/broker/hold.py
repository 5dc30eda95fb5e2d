"""``PullHoldService``: long-polled pulls parked without a thread, answered on arrival or when
their suspend time passes (RocketMQ's ``PullRequestHoldService``).

A pull that finds nothing new (it would answer 19 PULL_NOT_FOUND) and carries the suspend flag
is ``park``-ed: keyed by its queue, with the max offset it waits beyond and a deadline. The
store's dispatch calls ``on_arrival(topic, queue_id, max_offset)`` for every dispatched record;
that path is one lock-free dictionary test while nobody waits on the queue. A queue that grew
past a parked pull's offset moves it to the ready list and wakes the service thread, which runs
the pull again (``retry(parked, final)``) and writes the answer; a pull whose deadline passed is
run one last time (``final=True``: it answers whatever it finds, 19 when still nothing).

No lost wake-ups: ``park`` registers the pull first and then re-reads the queue's max offset; an
arrival between the pull's read and its registration is seen by that re-read.

Bounds: at most ``max_parked`` pulls wait at once; ``park`` returns False beyond that and the
caller answers at once. ``release(owner)`` drops the pulls of one owner (a connection that
closed: nobody reads their answers, and they would hold room until their deadline). ``stop``
drops every parked pull (their connections are closing) and ends the thread.
Thread-safety: every method may be called from any thread.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

QueueKey = tuple[str, int]


class ParkedPull:
    """One waiting pull: where it waits and until when; ``state`` is the caller's."""

    __slots__ = ("deadline", "done", "owner", "queue", "state", "wait_from")

    def __init__(self, queue: QueueKey, wait_from: int, deadline: float, state: Any,
                 owner: object = None) -> None:
        self.queue, self.wait_from, self.deadline, self.state = queue, wait_from, deadline, state
        self.owner = owner
        self.done = False


class PullHoldService:
    """Parked pulls and the thread that answers them."""

    def __init__(self, retry: Callable[[ParkedPull, bool], None],
                 max_offset: Callable[[str, int], int], max_parked: int,
                 name: str = "remoting-pull-hold") -> None:
        self._retry = retry
        self._max_offset = max_offset
        self._max_parked = max_parked
        self._name = name
        self._condition = threading.Condition()
        self._by_queue: dict[QueueKey, list[ParkedPull]] = {}
        self._deadlines: list[tuple[float, int, ParkedPull]] = []
        self._ready: list[ParkedPull] = []
        self._by_owner: dict[object, set[ParkedPull]] = {}
        self._count = 0
        self._sequence = itertools.count()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the service thread."""
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Drop every parked pull and end the thread."""
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    @property
    def parked_count(self) -> int:
        """How many pulls wait now."""
        return self._count

    def park(self, queue: QueueKey, wait_from: int, timeout_ms: int, state: Any,
             owner: object = None) -> bool:
        """Hold a pull until ``queue`` grows beyond ``wait_from`` or ``timeout_ms`` passes;
        False (not parked) when ``max_parked`` pulls already wait or the service stopped.
        ``owner`` (the connection) lets ``release`` drop it."""
        parked = ParkedPull(queue, wait_from, time.monotonic() + timeout_ms / 1000, state,
                            owner)
        with self._condition:
            if self._stopping or self._count >= self._max_parked:
                return False
            self._by_queue.setdefault(queue, []).append(parked)
            if owner is not None:
                self._by_owner.setdefault(owner, set()).add(parked)
            if len(self._deadlines) > 4 * self._max_parked:  # drop answered pulls' entries
                self._deadlines = [entry for entry in self._deadlines if not entry[2].done]
                heapq.heapify(self._deadlines)
            heapq.heappush(self._deadlines, (parked.deadline, next(self._sequence), parked))
            self._count += 1
            if self._deadlines[0][2] is parked:
                self._condition.notify()
        if self._max_offset(*queue) > wait_from:  # arrived before we were registered
            self.on_arrival(queue[0], queue[1], self._max_offset(*queue))
        return True

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Dispatch listener: move the pulls this arrival satisfies to the ready list."""
        key = (topic, queue_id)
        if key not in self._by_queue:  # lock-free: the common case is "nobody waits"
            return
        with self._condition:
            waiting = self._by_queue.get(key)
            if not waiting:
                return
            still = [parked for parked in waiting if parked.wait_from >= max_offset]
            woken = [parked for parked in waiting if parked.wait_from < max_offset]
            if still:
                self._by_queue[key] = still
            else:
                del self._by_queue[key]
            if woken:
                self._take(woken)
                self._ready.extend(woken)
                self._condition.notify()

    def release(self, owner: object) -> None:
        """Drop every pull ``owner`` parked (unanswered)."""
        with self._condition:
            owned = self._by_owner.get(owner)
            if not owned:
                return
            pulls = [parked for parked in owned if not parked.done]
            self._unqueue(pulls)
            self._take(pulls)
            self._by_owner.pop(owner, None)

    def _unqueue(self, pulls: list[ParkedPull]) -> None:
        """Take ``pulls`` off their queues' waiting lists (under the condition)."""
        leaving = set(pulls)
        for queue in {parked.queue for parked in pulls}:
            still = [parked for parked in self._by_queue.get(queue, ())
                     if parked not in leaving]
            if still:
                self._by_queue[queue] = still
            else:
                self._by_queue.pop(queue, None)

    def _take(self, pulls: list[ParkedPull]) -> None:
        """Mark pulls answered (under the condition); their heap entries become stale."""
        for parked in pulls:
            parked.done = True
            owned = self._by_owner.get(parked.owner)
            if owned is not None:
                owned.discard(parked)
                if not owned:
                    del self._by_owner[parked.owner]
        self._count -= len(pulls)

    def _run(self) -> None:
        while True:
            with self._condition:
                ready, expired = self._next_batch()
                if ready is None:
                    return
            for parked in ready:
                self._answer(parked, False)
            for parked in expired:
                self._answer(parked, True)

    def _next_batch(self) -> tuple[list[ParkedPull] | None, list[ParkedPull]]:
        """Wait (under the condition) for ready or expired pulls; (None, []) when stopping."""
        while not self._stopping:
            expired = self._pop_expired(time.monotonic())
            if self._ready or expired:
                ready, self._ready = self._ready, []
                return ready, expired
            timeout = (self._deadlines[0][0] - time.monotonic()) if self._deadlines else None
            self._condition.wait(timeout)
        return None, []

    def _pop_expired(self, now: float) -> list[ParkedPull]:
        expired = []
        while self._deadlines and (self._deadlines[0][2].done or self._deadlines[0][0] <= now):
            _, _, parked = heapq.heappop(self._deadlines)
            if not parked.done:
                expired.append(parked)
        self._unqueue(expired)
        self._take(expired)
        return expired

    def _answer(self, parked: ParkedPull, final: bool) -> None:
        try:
            self._retry(parked, final)
        except Exception:  # the retry answers its own errors; this is a bug, logged
            log.exception("[remoting] answering a held pull failed")
