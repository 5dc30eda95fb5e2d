"""``postbox broker start --metrics HOST:PORT``: the broker's Prometheus endpoint.

Serves the store's families (``framework.metrics.store_families``: puts per topic, flush
latency, disk use, log end, dispatch lag) and the remoting server's: open connections, the
requests it received by code (counted by its IO thread), whether each broker service runs
(``postbox_broker_service_up``), and the messages its SEND and PULL handlers counted (the
runtime statistics ``mqadmin brokerStatus`` reads, ``broker_node.admin.RuntimeStats``), and
the consumer lag of every group the broker knows
(committed offsets, subscription groups, live members) per topic and queue, computed from the
broker's own offsets: ``postbox_broker_consumer_lag_messages``. The lag is at most
``lag_series_max`` series (``POSTBOX_METRICS_LAG_SERIES_MAX``, default 5 000; groups in name
order); the series left out are counted in ``postbox_broker_consumer_lag_series_dropped`` and
logged, so a broker with very many groups cannot blow up the scrape. Everything is read at
scrape time; the registry is this process's own. The bound address is printed as
``metrics listening on HOST:PORT`` (port 0: any free port), after the other ``listening``
lines.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

import typer
from prometheus_client import CollectorRegistry

from postbox.framework.metrics import (
    FamiliesCollector,
    Metric,
    MetricsServer,
    MetricsServerError,
    counter,
    gauge,
    store_families,
)
from postbox.network.protocol.codes import RequestCode
from postbox.storage_engine import Broker

from .common import CliError

log = logging.getLogger(__name__)

LAG_SERIES_MAX_ENV = "POSTBOX_METRICS_LAG_SERIES_MAX"
LAG_SERIES_MAX_DEFAULT = 5_000
"""At most this many ``postbox_broker_consumer_lag_messages`` series in one scrape."""

MetricsOption = Annotated[str | None, typer.Option(
    "--metrics", metavar="HOST:PORT",
    help="Serve Prometheus metrics on this address (port 0: any free port; printed).")]


class BrokerMetrics:
    """The families of a broker process (a ``MetricsSource``)."""

    def __init__(self, broker: Broker, node: Any, *,
                 lag_series_max: int = LAG_SERIES_MAX_DEFAULT) -> None:
        if lag_series_max < 0:
            raise ValueError(f"lag_series_max must be >= 0, got {lag_series_max}")
        self._broker = broker
        self._node = node
        self.lag_series_max = lag_series_max
        self._dropped_logged = 0

    def metric_families(self) -> Iterable[Metric]:
        """Store and remoting families, built now."""
        families = store_families(self._broker.store)
        server = self._node.broker_server
        families.append(gauge("postbox_broker_connections", "Open remoting connections to the "
                              "broker.", [], [((), len(server.server.sessions()))]))
        counts = sorted(dict(server.server.request_counts).items())
        families.append(counter("postbox_broker_requests", "Remoting requests received, by "
                                "request code (its name where known).", ["code"],
                                [((_code_name(code),), count) for code, count in counts]))
        if server.stats is not None:
            table = server.stats.table()
            families.append(counter(
                "postbox_broker_messages", "Messages the remoting broker stored (put) and handed "
                "to consumers (get) since it started.", ["direction"],
                [(("put",), int(table["msgPutTotalTodayNow"])),
                 (("get",), int(table["msgGetTotalTodayNow"]))]))
        families.append(gauge(
            "postbox_broker_service_up", "1 while a broker service (broker-persist, delay, "
            "timer, transaction-check) runs, 0 once stopped or failed.", ["service"],
            [((state.name,), int(state.state == "running"))
             for state in self._broker.service_states()]))
        lags, dropped = self._lags()
        families.append(gauge(
            "postbox_broker_consumer_lag_messages", "Messages of a queue a consumer group has "
            "not consumed: the queue's max offset minus the group's committed offset (from the "
            "min offset where it never committed).", ["group", "topic", "queue"], lags))
        families.append(gauge(
            "postbox_broker_consumer_lag_series_dropped", "Consumer lag series left out of "
            f"this scrape over the limit ({LAG_SERIES_MAX_ENV}).", [], [((), dropped)]))
        return families

    def _lags(self) -> tuple[list[tuple[tuple[str, str, str], int]], int]:
        """The lag samples of every known group, at most ``lag_series_max``, and how many
        were left out."""
        samples: list[tuple[tuple[str, str, str], int]] = []
        dropped = 0
        for group in self._broker.consumer_groups():
            try:
                progress = self._broker.consumer_progress(group)
            except Exception as error:  # one group's trouble must not fail the scrape
                log.warning("[metrics] lag of group %s unavailable: %s", group, error)
                continue
            room = self.lag_series_max - len(samples)
            samples.extend(((group, queue.topic, str(queue.queue_id)), queue.lag)
                           for queue in progress[:max(room, 0)])
            dropped += max(len(progress) - max(room, 0), 0)
        if dropped and dropped != self._dropped_logged:
            log.warning("[metrics] %d consumer lag series over the limit of %d left out "
                        "(raise %s)", dropped, self.lag_series_max, LAG_SERIES_MAX_ENV)
        self._dropped_logged = dropped
        return samples, dropped


def _code_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)


def lag_series_max(environ: Mapping[str, str] = os.environ) -> int:
    """The lag series limit from ``POSTBOX_METRICS_LAG_SERIES_MAX`` (default 5 000);
    ``CliError`` naming the variable for anything but a whole number >= 0."""
    text = environ.get(LAG_SERIES_MAX_ENV, "").strip()
    if not text:
        return LAG_SERIES_MAX_DEFAULT
    if not text.isdigit():
        raise CliError(f"{LAG_SERIES_MAX_ENV}={text!r}: a whole number >= 0 of consumer lag "
                       "series is expected")
    return int(text)


def start_metrics(listen: str, broker: Broker, node: Any) -> MetricsServer:
    """Serve the broker's metrics on ``listen`` (``HOST:PORT``); ``CliError`` if it cannot."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise CliError(f"--metrics {listen!r} is not HOST:PORT")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FamiliesCollector(BrokerMetrics(broker, node,
                                                      lag_series_max=lag_series_max())))
    try:
        server = MetricsServer(registry, int(port), host.strip("[]")).start()
    except MetricsServerError as error:
        raise CliError(f"--metrics: {error}") from error
    typer.echo(f"metrics listening on {host}:{server.port}")
    return server


__all__ = ["LAG_SERIES_MAX_DEFAULT", "LAG_SERIES_MAX_ENV", "BrokerMetrics", "MetricsOption",
           "lag_series_max", "start_metrics"]
