"""``AppMetrics``: the Prometheus registry of one ``App`` and the collectors on it.

The registry story. Each app owns a ``CollectorRegistry`` of its own (never prometheus-client's
global default) holding exactly one collector, registered once when ``app.metrics`` is first
used. That collector builds every family at scrape time from the numbers the components keep
(``families``): the embedded store's (when the app opened one), the running consumers', and
those of the *sources* the layers above add (``add_source``: the outbox's, which holds every
relay and resender of the app, and any middleware with a ``metric_families()`` method, the
idempotency middleware's). No metric object is created per app or per component, so any number
of apps in one process (the tests start hundreds) never meet "Duplicated timeseries"; a scrape
of one app's endpoint shows that app only. The servers ``serve`` starts stop at ``app.stop()``;
the registry itself holds no thread or socket and goes with the app.

A source whose ``metric_families()`` raises is logged and left out of that scrape: one broken
source never hides the others. Thread-safe: sources are added under a lock and copied for each
scrape.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from ..transport import embedded_broker
from .consumer_collector import consumer_families
from .server import MetricsServer
from .store_collector import store_families

if TYPE_CHECKING:
    from ..app import App

log = logging.getLogger(__name__)
S = TypeVar("S", bound="MetricsSource")


class MetricsSource(Protocol):
    """Anything that contributes families to an app's scrape."""

    def metric_families(self) -> Iterable[Metric]:
        """The families, built now."""
        ...


class AppMetrics:
    """The metrics of one app: ``registry``, ``add_source``, ``serve``."""

    def __init__(self, app: App) -> None:
        self._app = app
        self._sources: list[MetricsSource] = []
        self._named: dict[str, Any] = {}
        self._servers: list[MetricsServer] = []
        self._lock = threading.Lock()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_AppCollector(self))
        app.on_stop(self.stop_servers)

    def source(self, name: str, factory: Callable[[], S]) -> S:
        """The source called ``name``, made by ``factory`` and added on first use (one per
        app: the outbox's collects every relay and resender of the app)."""
        with self._lock:
            if name not in self._named:
                made = factory()
                self._named[name] = made
                self._sources.append(made)
            found: S = self._named[name]
            return found

    def add_source(self, source: MetricsSource) -> None:
        """Add ``source``'s families to every scrape of this app (once per object)."""
        with self._lock:
            if not any(known is source for known in self._sources):
                self._sources.append(source)

    def serve(self, port: int = 0, host: str = "127.0.0.1") -> MetricsServer:
        """Start an HTTP endpoint for this app's registry (stopped at ``app.stop()``)."""
        server = MetricsServer(self.registry, port, host).start()
        with self._lock:
            self._servers.append(server)
        return server

    def stop_servers(self) -> None:
        """Stop every endpoint ``serve`` started."""
        with self._lock:
            servers, self._servers = self._servers, []
        for server in servers:
            server.stop()

    def families(self) -> Iterator[Metric]:
        """Every family of the app, built now."""
        app = self._app
        client = app._client  # never opens the store: a scrape shows what is open
        broker = embedded_broker(client)
        if broker is not None:
            yield from store_families(broker.store)
        if client is not None:
            yield from consumer_families(list(app.consumers), client)
        with self._lock:
            sources = list(self._sources)
        sources += [layer for layer in app.middleware  # type: ignore[misc]
                    if callable(getattr(layer, "metric_families", None))]
        for source in sources:
            try:
                yield from list(source.metric_families())
            except Exception:  # one broken source must not hide the others
                log.exception("[metrics] source %r failed; left out of this scrape", source)


class FamiliesCollector:
    """A registry collector calling a function that builds families (``collect`` only)."""

    def __init__(self, build: MetricsSource) -> None:
        self._build = build

    def collect(self) -> Iterable[Metric]:
        """Families for one scrape."""
        return list(self._build.metric_families())


class _AppCollector:
    def __init__(self, metrics: AppMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return list(self._metrics.families())


__all__ = ["AppMetrics", "FamiliesCollector", "MetricsSource"]
