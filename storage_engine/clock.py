"""Time source for the engine.

The only module that reads the wall clock. Components receive a ``Clock`` in their constructor so
tests can drive them with ``FakeClock``. Thread-safe: both clocks only read or replace integers.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Anything that tells the time in epoch milliseconds."""

    def now_ms(self) -> int:
        """Return the current time in milliseconds since the epoch."""
        ...


class SystemClock:
    """The real wall clock."""

    def now_ms(self) -> int:
        """Return ``time.time()`` in whole milliseconds."""
        return time.time_ns() // 1_000_000


class FakeClock:
    """A clock that moves only when told to (tests)."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = start_ms

    def now_ms(self) -> int:
        """Return the fake current time."""
        return self._now_ms

    def advance(self, delta_ms: int) -> None:
        """Move the fake time forward by ``delta_ms`` milliseconds."""
        self._now_ms += delta_ms
