"""``Scheduler``: one ``Service`` thread that runs callables at (injected-clock) times.

A consumer's housekeeping — rebalance, offset persistence, heartbeats, lock renewal, resuming a
suspended orderly queue, re-consuming a message whose send-back failed — runs here, off the pull
and consume threads. A pass (``run_once(now_ms)``, also named ``run_due``) runs everything due on
the caller's thread, so tests (and the inline runner) drive it with a fake clock and no thread;
the thread sleeps until the earliest action is due, and at most ``IDLE_WAIT_MS`` so that it sees
a fake clock move. A failing action is logged and the others go on. Thread-safe; nothing is
persisted (``stop`` drops the pending actions).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable

from postbox.storage_engine import Clock
from postbox.storage_engine.service import Service

log = logging.getLogger(__name__)

IDLE_WAIT_MS = 100  # with a fake clock the thread re-reads the time at least this often


class Scheduler(Service):
    """Timed callables on one thread (or driven by ``run_due``)."""

    daemon = True

    def __init__(self, clock: Clock, name: str) -> None:
        super().__init__(clock)
        self.name = name
        self._heap: list[tuple[int, int, Callable[[], object]]] = []
        self._sequence = itertools.count()
        self._lock = threading.Lock()

    def call_at(self, due_ms: int, action: Callable[[], object]) -> None:
        """Run ``action`` at ``due_ms`` (or as soon after as the thread gets to it)."""
        with self._lock:
            heapq.heappush(self._heap, (due_ms, next(self._sequence), action))
        self.wakeup()

    def call_later(self, delay_ms: int, action: Callable[[], object]) -> None:
        """Run ``action`` after ``delay_ms``."""
        self.call_at(self.clock.now_ms() + delay_ms, action)

    def call_every(self, interval_ms: int, action: Callable[[], object]) -> None:
        """Run ``action`` every ``interval_ms`` (first after one interval)."""

        def repeat() -> None:
            try:
                action()
            finally:
                if not self.stopping:
                    self.call_later(interval_ms, repeat)

        self.call_later(interval_ms, repeat)

    def next_due_ms(self) -> int | None:
        """When the earliest pending action is due (None when none is)."""
        with self._lock:
            return self._heap[0][0] if self._heap else None

    def run_once(self, now_ms: int) -> int:
        """Run every action due at ``now_ms`` on this thread; return how many ran."""
        ran = 0
        while True:
            with self._lock:
                if not self._heap or self._heap[0][0] > now_ms or self.stopping:
                    return ran
                _, _, action = heapq.heappop(self._heap)
            self._run(action)
            ran += 1

    run_due = run_once

    def idle_wait_ms(self, now_ms: int) -> int:
        """Until the earliest action is due, at most ``IDLE_WAIT_MS`` (and at least 1 ms)."""
        due_ms = self.next_due_ms()
        return IDLE_WAIT_MS if due_ms is None else max(min(IDLE_WAIT_MS, due_ms - now_ms), 1)

    def _run(self, action: Callable[[], object]) -> None:
        try:
            action()
        except Exception:  # one failing chore must not stop the others
            log.exception("[%s] scheduled action failed", self.name)

    def stop(self, timeout_ms: int = 10_000) -> None:
        """Stop the thread (not joined when called from it); pending actions are dropped."""
        with self._lock:
            self._stopping.set()
            self._heap.clear()
        super().stop(timeout_ms)
