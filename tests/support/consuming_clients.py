"""Consumer sides of remoting clients (``network.client.consuming.Consuming``), each
over its own connections to one name server, for tests that compare several clients (members,
locks) or need no producer facade around them. ``close`` closes them all."""

from __future__ import annotations

from typing import Any

from postbox.network.client.connection import Connections
from postbox.network.client.consuming import Consuming
from postbox.network.client.context import DEFAULT_TIMEOUT_MS, ClientContext
from postbox.network.client.routes import RouteTable
from postbox.storage_engine.clock import SystemClock


class ConsumingClients:
    """Makes ``Consuming`` objects on fresh connections to ``namesrv``."""

    def __init__(self, namesrv: str, *, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        self._namesrv = namesrv
        self._timeout_ms = timeout_ms
        self._opened: list[tuple[Consuming, Connections]] = []

    def new(self, **options: Any) -> Consuming:
        """A new client's consumer side (``options``: ``Consuming``'s keyword arguments)."""
        connections = Connections()
        clock = SystemClock()
        routes = RouteTable([self._namesrv], connections, clock=clock,
                            timeout_ms=self._timeout_ms)
        consuming = Consuming(ClientContext(connections, routes, clock, self._timeout_ms),
                              **options)
        self._opened.append((consuming, connections))
        return consuming

    def close(self) -> None:
        """Close every client made (heartbeats stopped, connections closed)."""
        for consuming, connections in reversed(self._opened):
            consuming.close()
            connections.close()
