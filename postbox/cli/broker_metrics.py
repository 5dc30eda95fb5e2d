"""``postbox broker start --metrics HOST:PORT``: the broker's Prometheus endpoint.

Serves the store's families (``framework.metrics.store_families``: puts per topic, flush
latency, disk use, log end, dispatch lag) and the remoting server's: open connections, the
requests it received by code (counted by its IO thread), and the messages its SEND and PULL
handlers counted (the runtime statistics ``mqadmin brokerStatus`` reads,
``network.remoting.admin.RuntimeStats``). Everything is read at scrape time; the
registry is this process's own. The bound address is printed as ``metrics listening on
HOST:PORT`` (port 0: any free port), after the other ``listening`` lines.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

import typer
from prometheus_client import CollectorRegistry

from framework.metrics import (
    FamiliesCollector,
    Metric,
    MetricsServer,
    MetricsServerError,
    counter,
    gauge,
    store_families,
)
from network.remoting.codes import RequestCode
from storage_engine import Broker

from .common import CliError

MetricsOption = Annotated[str | None, typer.Option(
    "--metrics", metavar="HOST:PORT",
    help="Serve Prometheus metrics on this address (port 0: any free port; printed).")]


class BrokerMetrics:
    """The families of a broker process (a ``MetricsSource``)."""

    def __init__(self, broker: Broker, node: Any) -> None:
        self._broker = broker
        self._node = node

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
        return families


def _code_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)


def start_metrics(listen: str, broker: Broker, node: Any) -> MetricsServer:
    """Serve the broker's metrics on ``listen`` (``HOST:PORT``); ``CliError`` if it cannot."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise CliError(f"--metrics {listen!r} is not HOST:PORT")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FamiliesCollector(BrokerMetrics(broker, node)))
    try:
        server = MetricsServer(registry, int(port), host.strip("[]")).start()
    except MetricsServerError as error:
        raise CliError(f"--metrics: {error}") from error
    typer.echo(f"metrics listening on {host}:{server.port}")
    return server


__all__ = ["BrokerMetrics", "MetricsOption", "start_metrics"]
