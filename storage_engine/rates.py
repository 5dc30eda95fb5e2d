"""``CounterRates``: per-second rates of counters that only grow, over trailing windows.

The owner calls ``sample(now_ms, counts)`` whenever it likes (a sample is kept at most once per
``interval_ms``; samples older than ``keep_ms`` are dropped) and asks
``per_second(now_ms, counts, window_ms)``: the growth from the oldest sample inside the window to
``counts``, per second of the time between them (the latest sample when none is inside the
window: the rate since then). RocketMQ's rate keys are read this way: the broker's ``putTps``
and ``getTransferredTps`` over 10 s, 1 min and 10 min, the timer's enqueue and dequeue rates.

Thread-safety: one lock around the samples; ``counts`` are the caller's own reading.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence


class CounterRates:
    """Samples of a fixed number of counters, for their rates."""

    def __init__(self, start_ms: int, counts: Sequence[int], *, keep_ms: int,
                 interval_ms: int = 1_000) -> None:
        self._keep_ms = keep_ms
        self._interval_ms = interval_ms
        self._lock = threading.Lock()
        self._samples: deque[tuple[int, tuple[int, ...]]] = deque([(start_ms, tuple(counts))])

    def sample(self, now_ms: int, counts: Sequence[int]) -> None:
        """Keep ``counts`` as of ``now_ms`` when the last sample is ``interval_ms`` old."""
        with self._lock:
            if now_ms - self._samples[-1][0] >= self._interval_ms:
                self._samples.append((now_ms, tuple(counts)))
            while len(self._samples) > 1 and now_ms - self._samples[0][0] > self._keep_ms:
                self._samples.popleft()

    def per_second(self, now_ms: int, counts: Sequence[int], window_ms: int) -> list[float]:
        """Each counter's growth per second, from the window's oldest sample to ``counts``."""
        with self._lock:
            base_ms, base = next(((at_ms, taken) for at_ms, taken in self._samples
                                  if now_ms - at_ms <= window_ms), self._samples[-1])
        elapsed_ms = max(now_ms - base_ms, 1)
        return [(count - then) * 1000 / elapsed_ms
                for count, then in zip(counts, base, strict=True)]


__all__ = ["CounterRates"]
