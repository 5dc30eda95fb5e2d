"""Plain-number tallies the store keeps for monitoring: latencies in fixed buckets, and the
messages and bytes stored per topic.

The store is standard-library only, so it records numbers here and knows nothing of any
metrics library: ``framework.metrics`` turns them into Prometheus families when a scrape asks
(reading, never resetting them).

- ``LatencyTally``: a histogram with fixed upper bounds (seconds), a count and a sum. One lock
  around ``observe`` and ``snapshot``; ``observe`` is a bisect and three additions.
- ``PutTally``: a dispatcher (``dispatch.Dispatcher``) that counts, per topic, the messages and
  bytes dispatch applies from ``start_position`` on. Counting in the dispatch thread keeps the
  put path (the put lock) untouched; ``MessageStore`` sets ``start_position`` to the log end
  found at open, so re-dispatch during recovery is not counted as new puts. Only the dispatch
  thread writes it; readers take a copy (``snapshot``) under its lock.

Nothing here survives a restart: the tallies count since the store was opened (Prometheus
counters reset with the process, and its ``rate()`` handles that).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence
from typing import NamedTuple

from ..formats import DispatchRecord

DEFAULT_LATENCY_BOUNDS_S: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds (seconds) of the buckets: from half a millisecond (an fdatasync on a fast
disk, a cached handler) to ten seconds; ``+Inf`` is implied."""


class LatencySnapshot(NamedTuple):
    """A copy of a tally: per-bucket counts (not cumulative; the last is ``+Inf``), the number
    of ``observations`` and their sum in seconds."""

    bounds_s: tuple[float, ...]
    bucket_counts: tuple[int, ...]
    observations: int
    sum_s: float


class LatencyTally:
    """Durations in fixed buckets (thread-safe)."""

    def __init__(self, bounds_s: Sequence[float] = DEFAULT_LATENCY_BOUNDS_S) -> None:
        bounds = tuple(float(bound) for bound in bounds_s)
        if not bounds or list(bounds) != sorted(set(bounds)) or bounds[0] <= 0:
            raise ValueError(f"latency bounds must be positive and increasing, got {bounds}")
        self.bounds_s = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._sum_s = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        """Record one duration (a negative one, from a clock step, counts as 0)."""
        seconds = max(0.0, seconds)
        index = bisect.bisect_left(self.bounds_s, seconds)
        with self._lock:
            self._counts[index] += 1
            self._sum_s += seconds

    def snapshot(self) -> LatencySnapshot:
        """The counts so far."""
        with self._lock:
            counts = tuple(self._counts)
            total = self._sum_s
        return LatencySnapshot(self.bounds_s, counts, sum(counts), total)


class TopicPuts(NamedTuple):
    """Messages and bytes (whole records) stored in one topic."""

    messages: int
    bytes: int


class PutTally:
    """Counts dispatched records per topic from ``start_position`` on (a ``Dispatcher``)."""

    def __init__(self) -> None:
        self.start_position = 1 << 63  # nothing is counted until the store has opened
        self._topics: dict[str, list[int]] = {}
        self._lock = threading.Lock()

    def dispatch_run(self, records: Sequence[DispatchRecord]) -> None:
        """Count records (the dispatch thread only)."""
        topics = self._topics
        for record in records:
            if record.log_position < self.start_position:
                continue
            counts = topics.get(record.topic)
            if counts is None:
                with self._lock:
                    counts = topics.setdefault(record.topic, [0, 0])
            counts[0] += 1
            counts[1] += record.size

    def batch_done(self) -> None:
        """Nothing is buffered."""

    def snapshot(self) -> dict[str, TopicPuts]:
        """Topic → messages and bytes so far."""
        with self._lock:
            items = list(self._topics.items())
        return {topic: TopicPuts(counts[0], counts[1]) for topic, counts in items}


__all__ = ["DEFAULT_LATENCY_BOUNDS_S", "LatencySnapshot", "LatencyTally", "PutTally",
           "TopicPuts"]
