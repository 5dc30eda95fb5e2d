"""``Service``: the one background loop of the project — ``start``/``stop``/``wakeup`` around a
bounded ``run_once(now_ms)``.

Every background chore (the engine's flushes, dispatch, retention, delay delivery, replication,
persistence and lease expiry; the framework's consumer scheduler; the outbox relay) is a
subclass. A pass is ``run_once(now_ms)``: one bounded batch of work given the time, returning how
much it did. The thread loop calls it with ``clock.now_ms()``; after a pass that did nothing it
sleeps ``idle_wait_ms(now_ms)`` (``interval_ms`` unless a subclass knows when its next work is
due), or less when ``wakeup()`` is called. Tests drive ``run_once`` directly with a ``FakeClock``
instead of starting the thread and sleeping.

Threads are named ``postbox-<name>``. They are not daemons unless the subclass says so
(``daemon = True``: it writes nothing that a half-done pass could damage); ``stop()`` joins the
thread (storage threads are never abandoned mid-write). A ``run_once`` that raises stops the loop
and records the error in ``failure`` for the owner to surface (fail-stop); a subclass that must
outlive errors catches them in its ``run_once``. One failure is transient by nature: the process
out of file descriptors (``EMFILE``/``ENFILE``, raised by the ``open`` before anything is
written). A subclass whose pass is safe to repeat sets ``retries_out_of_descriptors``: such a
pass is retried after ``idle_wait_ms`` instead (one warning per ``SHORTAGE_LOG_INTERVAL_S``, one
line when a pass succeeds again), so a descriptor flood cannot latch the store into fail-stop.

``Service.state`` (``ServiceState``) says whether a service runs, was stopped or failed, and
why: a broker reports its services so that one that died (a timer service refusing damaged
files, say) shows in its runtime information and metrics, not only in its log.

Thread-safety: ``start``, ``stop`` and ``wakeup`` may be called from any thread, ``stop`` also
from the service's own thread (it then does not join itself). Nothing here is persisted.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Self

from .clock import Clock

log = logging.getLogger(__name__)

SHORTAGE_LOG_INTERVAL_S = 10.0
_SHORTAGE_ERRNOS = (errno.EMFILE, errno.ENFILE)


def out_of_descriptors(error: BaseException | None) -> bool:
    """Whether ``error`` (or an error it was raised from) is ``EMFILE`` or ``ENFILE``."""
    seen = 0
    while error is not None and seen < 8:
        if isinstance(error, OSError) and error.errno in _SHORTAGE_ERRNOS:
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


@dataclass(frozen=True)
class ServiceState:
    """Whether one service runs."""

    name: str
    state: str
    """``running``, ``stopped`` (never started, or stopped by its owner) or ``failed``."""
    failure: str | None = None
    """The error that stopped a failed service (its type and message)."""


class Service:
    """Base class for background services."""

    name = "service"
    interval_ms = 1000
    daemon = False
    retries_out_of_descriptors = False
    """A pass that failed for want of file descriptors is retried (see the module docstring);
    only for passes that write nothing partial when an ``open`` fails."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._wakeup_event = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None
        self.failure_listeners: list[Callable[[BaseException], None]] = []
        """Called (on the service thread) once ``run_once`` raised: owners go fail-stop."""
        self.descriptor_shortages = 0
        """Passes that failed for want of file descriptors and were retried."""
        self._shortage_logged_at: float | None = None  # None: the last pass succeeded
        self._shortages_unlogged = 0

    def run_once(self, now_ms: int) -> int:
        """Do one bounded batch of work; return how many items were processed."""
        raise NotImplementedError

    def idle_wait_ms(self, now_ms: int) -> int:
        """How long the thread sleeps after a pass that did nothing (``wakeup`` cuts it short);
        0 runs the next pass at once."""
        return self.interval_ms

    def fail(self, error: BaseException) -> None:
        """Record the error that stopped this service (whatever thread hit it) and tell the
        owner; only the first one counts."""
        if self.failure is not None:
            return
        self.failure = error
        self.on_failure(error)
        for listener in self.failure_listeners:
            listener(error)

    def start(self) -> Self:
        """Start the thread (idempotent); returns the service."""
        if self._thread is not None:
            return self
        self._stopping.clear()
        self._thread = threading.Thread(target=self._loop, name=f"postbox-{self.name}",
                                        daemon=self.daemon)
        self._thread.start()
        return self

    def wakeup(self) -> None:
        """Ask the loop to run again now."""
        self._wakeup_event.set()

    def stop(self, timeout_ms: int = 10_000) -> None:
        """Stop the loop and join the thread (idempotent)."""
        self._stopping.set()
        self._wakeup_event.set()
        thread, self._thread = self._thread, None
        if thread is None or thread is threading.current_thread():
            return
        thread.join(timeout_ms / 1000)
        if thread.is_alive():
            log.error("[%s] thread did not stop within %d ms", self.name, timeout_ms)

    @property
    def stopping(self) -> bool:
        """Whether ``stop`` was called (and ``start`` not called since)."""
        return self._stopping.is_set()

    @property
    def is_running(self) -> bool:
        """Whether the thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def state(self) -> ServiceState:
        """Running, stopped or failed (and why), now."""
        if self.failure is not None:
            return ServiceState(self.name, "failed",
                                f"{type(self.failure).__name__}: {self.failure}")
        return ServiceState(self.name, "running" if self.is_running else "stopped")

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wakeup_event.clear()  # a wakeup from here on makes the wait below return
            try:
                processed = self.run_once(self.clock.now_ms())
            except BaseException as error:  # surfaced through ``failure``; loop ends
                if not (self.retries_out_of_descriptors and out_of_descriptors(error)):
                    log.exception("[%s] stopped by an error", self.name)
                    self.fail(error)
                    return
                self._descriptor_shortage(error)
                processed = 0
            else:
                if self._shortage_logged_at is not None:
                    self._shortage_logged_at = None
                    log.warning("[%s] file descriptors available again: passes resume (%d "
                                "retried in all)", self.name, self.descriptor_shortages)
            if not processed:
                wait_ms = self.idle_wait_ms(self.clock.now_ms())
                if wait_ms > 0:
                    self._wakeup_event.wait(wait_ms / 1000)

    def _descriptor_shortage(self, error: BaseException) -> None:
        """A pass failed for want of file descriptors: count it, warn once per interval."""
        self.descriptor_shortages += 1
        now = time.monotonic()
        logged_at = self._shortage_logged_at
        if logged_at is not None and now - logged_at < SHORTAGE_LOG_INTERVAL_S:
            self._shortages_unlogged += 1
            return
        self._shortage_logged_at = now
        log.warning("[%s] out of file descriptors, retrying every %d ms (nothing written "
                    "this pass; %d more like it since the last line): %s", self.name,
                    self.interval_ms, self._shortages_unlogged, error)
        self._shortages_unlogged = 0

    def on_failure(self, error: BaseException) -> None:
        """Hook for subclasses: called once when ``run_once`` raised."""
