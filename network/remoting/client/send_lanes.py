"""``Lane``: concurrent sends to one destination share calls, and several calls are in flight.

Each sender thread puts its message in the lane (a ``Slot``) and waits on the slot. A sender
that finds nobody writing becomes the writer: it takes every queued slot (up to
``BATCH_COUNT_MAX`` messages and ``BATCH_BYTES_MAX`` body bytes per call), hands them to
``write`` — which writes one request and returns without waiting for the answer — and repeats
while more slots queued meanwhile; then it stops writing and waits for its own slot like
everyone else. The answer is delivered by the connection's reader thread straight to the slots
of that call (``Slot.finish``), so a send costs one wake-up after the answer, and calls are
pipelined: a new call goes out while earlier ones are still at the broker. A lone sender writes
at once: nothing waits for company.

What an outcome means is the writer's business (``sending`` finishes slots with results,
errors, or a request to send the message alone, with failover). A sender whose slot is not
finished within the timeout forgets the call (so its entry does not stay on the connection)
and gets ``RemotingTimeoutError``.

Thread safety: ``submit`` may be called from any thread; a lane's queue and its writer flag are
guarded by one lock; a slot is finished once.
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


class Lane:
    """The sends of one destination (see the module docstring)."""

    def __init__(self, write: Callable[[list[Slot]], None]) -> None:
        self._write = write
        self._lock = threading.Lock()
        self._queue: deque[Slot] = deque()
        self._writing = False
        self.calls = 0
        """Requests written so far (tests and benchmarks read it)."""

    def submit(self, outgoing: Outgoing, timeout_ms: int) -> object:
        """Queue ``outgoing``, write if nobody is, wait for its outcome."""
        slot = Slot(outgoing)
        with self._lock:
            self._queue.append(slot)
            lead = not self._writing
            self._writing = True
        if lead:
            self._write_queued()
        if not slot.wait(timeout_ms + _TIMEOUT_MARGIN_MS):
            if slot.forget is not None:
                slot.forget()
            return RemotingTimeoutError(
                f"no answer to a send to topic {outgoing.message.topic!r} within "
                f"{timeout_ms} ms")
        return slot.outcome

    def _write_queued(self) -> None:
        while True:
            with self._lock:
                batch = self._take()
                if not batch:
                    self._writing = False
                    return
                self.calls += 1
            try:
                self._write(batch)
            except BaseException as error:  # ``write`` finishes slots; never leave one waiting
                Slot.finish_all(batch, error)
                with self._lock:
                    self._writing = False
                raise

    def _take(self) -> list[Slot]:
        """Queued slots from the head, within the count and byte limits (at least one)."""
        batch: list[Slot] = []
        size = 0
        while self._queue and len(batch) < BATCH_COUNT_MAX:
            body = len(self._queue[0].outgoing.body)
            if batch and size + body > BATCH_BYTES_MAX:
                break
            batch.append(self._queue.popleft())
            size += body
        return batch
