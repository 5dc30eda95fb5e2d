"""Building Prometheus metric families from the plain numbers Postbox components keep.

Every Postbox metric is produced at scrape time by a custom collector that reads counters the
components already keep (``ConsumeStats``, ``RelayStats``, the store's tallies) and turns them
into families here: no component calls a metrics library on its hot path, and no metric object
is registered globally (``app_metrics`` explains the registry). Families are plain values:
building them is thread-safe as long as the numbers read are.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from postbox.storage_engine import LatencySnapshot

Labelled = Iterable[tuple[Sequence[str], float]]
"""(label values, value) pairs of one family."""


def counter(name: str, documentation: str, labels: Sequence[str], samples: Labelled
            ) -> CounterMetricFamily:
    """A counter family (``name`` without ``_total``; the exposition adds it)."""
    return _filled(CounterMetricFamily(name, documentation, labels=list(labels)), samples)


def gauge(name: str, documentation: str, labels: Sequence[str], samples: Labelled
          ) -> GaugeMetricFamily:
    """A gauge family."""
    return _filled(GaugeMetricFamily(name, documentation, labels=list(labels)), samples)


F = TypeVar("F", CounterMetricFamily, GaugeMetricFamily)


def _filled(family: F, samples: Labelled) -> F:
    for values, value in samples:
        family.add_metric(list(values), value)
    return family


def histogram(name: str, documentation: str, labels: Sequence[str],
              samples: Iterable[tuple[Sequence[str], LatencySnapshot]]
              ) -> HistogramMetricFamily:
    """A histogram family from latency tallies (per-bucket counts made cumulative)."""
    family = HistogramMetricFamily(name, documentation, labels=list(labels))
    for values, snapshot in samples:
        buckets: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*snapshot.bounds_s, float("inf")), snapshot.bucket_counts,
                                strict=True):
            running += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
        family.add_metric(list(values), buckets, snapshot.sum_s)
    return family


def merge_snapshots(snapshots: Iterable[LatencySnapshot]) -> LatencySnapshot | None:
    """The sum of tallies with the same bounds (None when there are none)."""
    merged: LatencySnapshot | None = None
    for snapshot in snapshots:
        if merged is None:
            merged = snapshot
            continue
        if snapshot.bounds_s != merged.bounds_s:
            raise ValueError("cannot merge latency tallies with different bounds")
        merged = LatencySnapshot(merged.bounds_s, tuple(
            a + b for a, b in zip(merged.bucket_counts, snapshot.bucket_counts, strict=True)),
            merged.observations + snapshot.observations, merged.sum_s + snapshot.sum_s)
    return merged


__all__ = ["Labelled", "Metric", "counter", "gauge", "histogram", "merge_snapshots"]
