"""``GroupCommit``: one call of a batch function for the items of every thread waiting on it.

Consume threads each ask for a little work that costs the same however many items it covers (a
database transaction, a Redis round trip). A thread that arrives while no round runs becomes the
leader: it takes every item queued so far (its own and those of threads that arrived before it,
up to ``max_items``), runs the function once for all of them outside the lock, and hands each
waiting thread its own results — or the exception, re-raised in each of their threads. Threads
that arrive while a round runs queue up and wait; when it ends one of them leads the next round.
The storage engine's group flush works the same way.

Nothing waits for company: a lone thread leads a round of its own items at once, so the latency
of an uncontended call is the function's own. Thread-safe; nothing survives a crash (a thread
only returns after its round finished).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass(eq=False)
class _Request(Generic[Item, Result]):
    items: Sequence[Item]
    results: list[Result] = field(default_factory=list)
    error: BaseException | None = None
    done: bool = False


class GroupCommit(Generic[Item, Result]):
    """Coalesces concurrent ``run`` calls into calls of ``function`` (see the module docstring).

    Args:
        function: takes the items of one round, returns one result per item in order.
        max_items: most items in one round; a request is never split, so a larger one runs
            alone.
    """

    def __init__(self, function: Callable[[list[Item]], list[Result]], *,
                 max_items: int = 256) -> None:
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items}")
        self._function = function
        self.max_items = max_items
        self._condition = threading.Condition()
        self._queue: list[_Request[Item, Result]] = []
        self._leading = False
        self.rounds = 0
        """Calls of ``function`` so far."""

    def run(self, items: Sequence[Item]) -> list[Result]:
        """``function``'s results for ``items``, computed in some round (maybe with others')."""
        request: _Request[Item, Result] = _Request(items)
        with self._condition:
            self._queue.append(request)
            while not request.done:
                if self._leading:
                    self._condition.wait()
                    continue
                self._leading = True
                round_requests = self._take_round()
                self._condition.release()
                try:
                    self._run_round(round_requests)
                finally:
                    self._condition.acquire()
                    self._leading = False
                    self._condition.notify_all()
        if request.error is not None:
            raise request.error
        return request.results

    def _take_round(self) -> list[_Request[Item, Result]]:
        """The queued requests of the next round (in arrival order, at least one)."""
        taken: list[_Request[Item, Result]] = []
        count = 0
        while self._queue and (not taken or count + len(self._queue[0].items) <= self.max_items):
            request = self._queue.pop(0)
            taken.append(request)
            count += len(request.items)
        return taken

    def _run_round(self, requests: list[_Request[Item, Result]]) -> None:
        items = [item for request in requests for item in request.items]
        try:
            results = self._function(items)
            if len(results) != len(items):
                raise AssertionError(f"group commit function returned {len(results)} results "
                                     f"for {len(items)} items")
        except BaseException as error:  # each waiting thread re-raises it as its own
            for request in requests:
                request.error = error
                request.done = True
            return
        start = 0
        for request in requests:
            request.results = results[start:start + len(request.items)]
            request.done = True
            start += len(request.items)
        self.rounds += 1


__all__ = ["GroupCommit"]
