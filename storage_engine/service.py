"""``Service``: a background worker with ``start``/``stop``/``wakeup`` and a bounded ``run_once``.

The thread loop calls ``run_once(now_ms)``; when it did nothing it waits for ``wakeup()`` or the
interval. Tests drive ``run_once`` directly instead of starting threads. Threads are not daemons:
``stop()`` joins them (storage threads are never abandoned mid-write). A ``run_once`` that raises
stops the loop and records the error in ``failure`` for the owner to surface.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .clock import Clock

log = logging.getLogger(__name__)


class Service:
    """Base class for background services."""

    name = "service"
    interval_ms = 1000

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._wakeup_event = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None
        self.failure_listeners: list[Callable[[BaseException], None]] = []
        """Called (on the service thread) once ``run_once`` raised: owners go fail-stop."""

    def run_once(self, now_ms: int) -> int:
        """Do one bounded batch of work; return how many items were processed."""
        raise NotImplementedError

    def fail(self, error: BaseException) -> None:
        """Record the error that stopped this service (whatever thread hit it) and tell the
        owner; only the first one counts."""
        if self.failure is not None:
            return
        self.failure = error
        self.on_failure(error)
        for listener in self.failure_listeners:
            listener(error)

    def start(self) -> None:
        """Start the thread (idempotent)."""
        if self._thread is not None:
            return
        self._stopping.clear()
        self._thread = threading.Thread(target=self._loop, name=f"postbox-{self.name}")
        self._thread.start()

    def wakeup(self) -> None:
        """Ask the loop to run again now."""
        self._wakeup_event.set()

    def stop(self, timeout_ms: int = 10_000) -> None:
        """Stop the loop and join the thread (idempotent)."""
        thread = self._thread
        if thread is None:
            return
        self._stopping.set()
        self._wakeup_event.set()
        thread.join(timeout_ms / 1000)
        if thread.is_alive():
            log.error("[%s] thread did not stop within %d ms", self.name, timeout_ms)
        self._thread = None

    @property
    def is_running(self) -> bool:
        """Whether the thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                processed = self.run_once(self.clock.now_ms())
            except BaseException as error:  # surfaced through ``failure``; loop ends
                log.exception("[%s] stopped by an error", self.name)
                self.fail(error)
                return
            if not processed:
                self._wakeup_event.wait(self.interval_ms / 1000)
                self._wakeup_event.clear()

    def on_failure(self, error: BaseException) -> None:
        """Hook for subclasses: called once when ``run_once`` raised."""
