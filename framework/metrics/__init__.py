"""Prometheus metrics of Postbox applications (docs/observability.md, "Metrics").

``App.metrics`` is an ``AppMetrics`` (a per-app registry whose collector reads the store, the
consumers and the sources the layers above add); ``App.metrics_server(port)`` serves it. The
store keeps plain numbers (``LatencyTally``, re-exported for the outbox, which may not import
``storage_engine``); ``families`` turns them into Prometheus families at scrape time.
"""

from postbox.storage_engine import LatencySnapshot, LatencyTally

from .app_metrics import AppMetrics, FamiliesCollector, MetricsSource
from .families import Metric, counter, gauge, histogram, merge_snapshots
from .server import MetricsServer, MetricsServerError
from .store_collector import store_families

__all__ = ["AppMetrics", "FamiliesCollector", "LatencySnapshot", "LatencyTally",
           "Metric", "MetricsServer", "MetricsServerError", "MetricsSource", "counter", "gauge",
           "histogram", "merge_snapshots", "store_families"]
