"""``Lane``: concurrent sends to one destination share calls, with a few calls in flight.

Each sender thread puts its message in the lane (a ``Slot``) and waits on the slot. While fewer
than ``max_in_flight`` calls of the lane are unanswered, a sender that finds nobody writing
becomes the writer: it takes every queued slot (up to ``BATCH_COUNT_MAX`` messages and
``BATCH_BYTES_MAX`` body bytes per call), hands them to ``write`` — which writes one request
and returns without waiting for the answer — and repeats while more slots queued meanwhile and
the cap allows; then it stops writing and waits for its own slot like everyone else. A lone
sender writes at once: nothing waits for company.

At the cap, senders queue: the thread that completes a call (the connection's reader, with
the answer) writes what queued meanwhile as the next call. So under load messages travel in
batches (one request, one store append per batch at the broker), while up to ``max_in_flight``
calls still overlap: one slow call does not hold the lane. The answer is delivered by the
connection's reader thread straight to the slots of that call (``Slot.finish``), so a send
costs one wake-up after the answer.

What an outcome means is the writer's business (``sending`` finishes slots with results,
errors, or a request to send the message alone, with failover). ``write(batch, done)`` calls
``done`` when the call is over — answered, failed, or never written — and the lane counts it
once however often it is called; a forgotten call (below) counts as over. A sender whose slot
is not finished within the timeout gets ``RemotingTimeoutError``: if its message was still
queued it is taken out (nothing was sent); if it was written, the call is forgotten (so its
entry does not stay on the connection) and the message may be stored.

Thread safety: ``submit`` may be called from any thread; a lane's queue, writer flag and call
count are guarded by one lock; a slot is finished once.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import RemotingTimeoutError

if TYPE_CHECKING:
    from .sending import Outgoing

BATCH_COUNT_MAX = 256
BATCH_BYTES_MAX = 1 << 20
MAX_CALLS_IN_FLIGHT = 2
_TIMEOUT_MARGIN_MS = 1_000


class Slot:
    """One message waiting in a lane, and its outcome (whatever the writer finishes it with)."""

    __slots__ = ("_done", "_finished", "forget", "outcome", "outgoing")

    def __init__(self, outgoing: Outgoing) -> None:
        self.outgoing = outgoing
        self.outcome: object = None
        self.forget: Callable[[], Any] | None = None  # drops the call from its connection
        self._finished = False
        self._done = threading.Lock()
        self._done.acquire()

    def finish(self, outcome: object) -> None:
        """Set the outcome and wake the sender (the first outcome wins)."""
        if self._finished:
            return
        self._finished = True
        self.outcome = outcome
        self._done.release()

    @staticmethod
    def finish_all(slots: list[Slot], outcome: object) -> None:
        """Finish every slot with the same outcome."""
        for slot in slots:
            slot.finish(outcome)

    def wait(self, timeout_ms: int) -> bool:
        """Whether the outcome arrived within ``timeout_ms``."""
        return self._done.acquire(timeout=timeout_ms / 1000)


class _Call:
    """One written call's end, counted once (``over`` may run from several threads)."""

    __slots__ = ("_lane", "_once")

    def __init__(self, lane: Lane) -> None:
        self._lane = lane
        self._once = threading.Lock()

    def over(self) -> None:
        """The call was answered, failed, forgotten or never written."""
        if self._once.acquire(blocking=False):
            self._lane._call_over()


class Lane:
    """The sends of one destination (see the module docstring)."""

    def __init__(self, write: Callable[[list[Slot], Callable[[], None]], None], *,
                 max_in_flight: int = MAX_CALLS_IN_FLIGHT) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, got {max_in_flight}")
        self._write = write
        self._max_in_flight = max_in_flight
        self._lock = threading.Lock()
        self._queue: deque[Slot] = deque()
        self._writing = False
        self._in_flight = 0
        self.calls = 0
        """Requests written so far (tests and benchmarks read it)."""

    def submit(self, outgoing: Outgoing, timeout_ms: int) -> object:
        """Queue ``outgoing``, write if nobody is and the cap allows, wait for its outcome."""
        slot = Slot(outgoing)
        with self._lock:
            self._queue.append(slot)
            lead = self._lead()
        if lead:
            self._write_queued()
        if not slot.wait(timeout_ms + _TIMEOUT_MARGIN_MS):
            with self._lock:
                queued = slot in self._queue
                if queued:
                    self._queue.remove(slot)
            if not queued and slot.forget is not None:
                slot.forget()
            what = "nothing was sent" if queued else "the message may be stored"
            return RemotingTimeoutError(
                f"no answer to a send to topic {outgoing.message.topic!r} within "
                f"{timeout_ms} ms ({what})")
        return slot.outcome

    def _lead(self) -> bool:
        """Under the lock: whether the caller becomes the writer (and then it is)."""
        if self._writing or self._in_flight >= self._max_in_flight or not self._queue:
            return False
        self._writing = True
        return True

    def _call_over(self) -> None:
        with self._lock:
            self._in_flight -= 1
            lead = self._lead()
        if lead:
            self._write_queued()

    def _write_queued(self) -> None:
        while True:
            with self._lock:
                if self._in_flight >= self._max_in_flight:
                    self._writing = False
                    return
                batch = self._take()
                if not batch:
                    self._writing = False
                    return
                self._in_flight += 1
                self.calls += 1
            call = _Call(self)
            try:
                self._write(batch, call.over)
            except BaseException as error:  # ``write`` finishes slots; never leave one waiting
                Slot.finish_all(batch, error)
                with self._lock:
                    self._writing = False
                call.over()
                raise

    def _take(self) -> list[Slot]:
        """Queued slots from the head, within the count and byte limits (none if empty)."""
        batch: list[Slot] = []
        size = 0
        while self._queue and len(batch) < BATCH_COUNT_MAX:
            body = len(self._queue[0].outgoing.body)
            if batch and size + body > BATCH_BYTES_MAX:
                break
            batch.append(self._queue.popleft())
            size += body
        return batch
