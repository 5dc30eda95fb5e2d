"""``OutageBackoff``: how long a relay waits while the broker is unavailable.

A publish that fails for a transient reason (``framework.SendFailure.TRANSIENT``: the broker
unreachable, busy, closed, no route yet) says nothing about the stub: it is not counted toward
``max_send_count``, and the relay as a whole backs off instead. The waits are exponential,
capped and jittered: after the n-th pass in a row whose publishes all failed that way the relay
waits ``min(first_ms × 2^(n-1), max_ms)``, shortened by a random share of up to
``jitter_ratio`` (so the relays of many processes do not all come back in the same
millisecond), and neither claims nor publishes before then. A pass that publishes anything
ends the outage: the next transient failure starts again from ``first_ms``.

No wait here ever ends in ``void``: an outage of any length is ridden out, and once the broker
is back the stubs go out at the end of the current wait (at most ``max_ms``).

Thread-safe (one lock); nothing survives a restart, by design: a new process simply tries at
once and backs off again if the broker is still away.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

EXPONENT_MAX = 30
"""Doublings counted at most (the cap is reached long before; keeps the arithmetic small)."""


class OutageBackoff:
    """Failures in a row and the time before which the relay must not try again.

    Args:
        first_ms: the wait after the first failed pass.
        max_ms: the longest wait.
        jitter_ratio: each wait is shortened by up to this share of it (0: exact waits).
        draw: a source of floats in [0, 1) for the jitter (tests pass a fixed one).
    """

    def __init__(self, first_ms: int, max_ms: int, jitter_ratio: float, *,
                 draw: Callable[[], float] = random.random) -> None:
        self.first_ms = first_ms
        self.max_ms = max_ms
        self.jitter_ratio = jitter_ratio
        self._draw = draw
        self._lock = threading.Lock()
        self.failures = 0
        """Passes in a row whose publishes all failed for a transient reason."""
        self.until_ms = 0
        """No claim and no publish before this (epoch ms; 0: no outage)."""

    def waiting(self, now_ms: int) -> bool:
        """Whether the relay is backing off at ``now_ms``."""
        with self._lock:
            return now_ms < self.until_ms

    def failed(self, now_ms: int, *, published: bool) -> int:
        """Some publishes failed for a transient reason at ``now_ms``: the wait in ms before the
        stubs are tried again. With nothing ``published`` the relay backs off (one more
        failure in a row); with something published the broker is reachable, the outage is
        over, and only the failed stubs wait the first wait."""
        with self._lock:
            if published:
                self.failures, self.until_ms = 0, 0
                return self._jittered(self.first_ms)
            self.failures += 1
            exponent = min(self.failures - 1, EXPONENT_MAX)
            wait_ms = self._jittered(min(self.first_ms * 2 ** exponent, self.max_ms))
            self.until_ms = now_ms + wait_ms
            return wait_ms

    def reachable(self) -> None:
        """A pass published without a transient failure: the outage, if any, is over."""
        with self._lock:
            self.failures, self.until_ms = 0, 0

    def _jittered(self, wait_ms: int) -> int:
        return max(wait_ms - int(wait_ms * self.jitter_ratio * self._draw()), 1)


__all__ = ["OutageBackoff"]
