"""``WaitSlots``: a cap on how many calls of Postbox's service may block at once.

A synchronous gRPC server runs each call on a worker thread of a fixed pool; a long poll holds
its thread for up to ``broker.long_polling_max_ms``. Without a cap, idle consumers could hold
every worker and starve sends and commits. A long wait first takes a slot without blocking;
when none is free it does not wait at all and says so (``busy``), and the client backs off
briefly instead (degrading to short polling, still correct). The server's pool must have more
workers than slots.

Thread-safety: every method may be called from any thread. Nothing survives a restart.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class WaitSlots:
    """At most ``limit`` holders at a time; taking a slot never blocks."""

    def __init__(self, limit: int) -> None:
        if type(limit) is not int or limit < 0:
            raise ValueError(f"wait slots must be an int >= 0, got {limit!r}")
        self.limit = limit
        self._lock = threading.Lock()
        self._held = 0

    @contextmanager
    def slot(self) -> Iterator[bool]:
        """Yield True while holding a slot, or False at once when every slot is taken."""
        with self._lock:
            granted = self._held < self.limit
            if granted:
                self._held += 1
        try:
            yield granted
        finally:
            if granted:
                with self._lock:
                    self._held -= 1

    @property
    def held(self) -> int:
        """Slots taken now (for tests and stats)."""
        with self._lock:
            return self._held


__all__ = ["WaitSlots"]
