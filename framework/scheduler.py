"""``Scheduler``: one thread that runs callables at (injected-clock) times.

A consumer's housekeeping — rebalance, offset persistence, heartbeats, lock renewal, resuming a
suspended orderly queue, re-consuming a message whose send-back failed — runs here, off the pull
and consume threads. ``run_due(now_ms)`` runs everything due on the caller's thread, so tests
(and the inline runner) drive it with a fake clock and no thread. Thread-safe.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable

from storage_engine import Clock

log = logging.getLogger(__name__)

_IDLE_WAIT_MS = 100  # with a fake clock the thread re-reads the time at least this often


class Scheduler:
    """Timed callables on one thread (or driven by ``run_due``)."""

    def __init__(self, clock: Clock, name: str) -> None:
        self._clock = clock
        self._name = name
        self._heap: list[tuple[int, int, Callable[[], object]]] = []
        self._sequence = itertools.count()
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def call_at(self, due_ms: int, action: Callable[[], object]) -> None:
        """Run ``action`` at ``due_ms`` (or as soon after as the thread gets to it)."""
        with self._condition:
            heapq.heappush(self._heap, (due_ms, next(self._sequence), action))
            self._condition.notify()

    def call_later(self, delay_ms: int, action: Callable[[], object]) -> None:
        """Run ``action`` after ``delay_ms``."""
        self.call_at(self._clock.now_ms() + delay_ms, action)

    def call_every(self, interval_ms: int, action: Callable[[], object]) -> None:
        """Run ``action`` every ``interval_ms`` (first after one interval)."""

        def repeat() -> None:
            try:
                action()
            finally:
                if not self._stopping:
                    self.call_later(interval_ms, repeat)

        self.call_later(interval_ms, repeat)

    def next_due_ms(self) -> int | None:
        """When the earliest pending action is due (None when none is)."""
        with self._condition:
            return self._heap[0][0] if self._heap else None

    def run_due(self, now_ms: int) -> int:
        """Run every action due at ``now_ms`` on this thread; return how many ran."""
        ran = 0
        while True:
            with self._condition:
                if not self._heap or self._heap[0][0] > now_ms or self._stopping:
                    return ran
                _, _, action = heapq.heappop(self._heap)
            self._run(action)
            ran += 1

    def _run(self, action: Callable[[], object]) -> None:
        try:
            action()
        except Exception:  # one failing chore must not stop the others
            log.exception("[%s] scheduled action failed", self._name)

    def start(self) -> None:
        """Start the scheduler thread."""
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name=f"postbox-{self._name}",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread; pending actions are dropped."""
        with self._condition:
            self._stopping = True
            self._heap.clear()
            self._condition.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)
        self._thread = None

    def _loop(self) -> None:
        while True:
            with self._condition:
                if self._stopping:
                    return
                now_ms = self._clock.now_ms()
                if not self._heap or self._heap[0][0] > now_ms:
                    wait_ms = _IDLE_WAIT_MS if not self._heap else min(
                        _IDLE_WAIT_MS, self._heap[0][0] - now_ms)
                    self._condition.wait(max(wait_ms, 1) / 1000)
                    continue
            self.run_due(now_ms)
