"""An in-process broker server over an embedded ``Broker``, for tests.

``LoopbackServer(broker)`` runs the broker server (``BrokerServer``: Postbox's own service and
RocketMQ's) on ``127.0.0.1:0`` (an ephemeral port, ``address``); ``client()`` opens a
``RemoteBroker`` to it (a new channel each time, as another process would have); ``close()``
closes the clients, then stops the server. The broker stays open: its owner closes it."""

from __future__ import annotations

from network.grpc_v2 import BrokerServer, RemoteBroker
from storage_engine import Broker


class LoopbackServer:
    """A server for one broker plus the clients opened on it."""

    def __init__(self, broker: Broker, access=None) -> None:
        self.broker = broker
        self.server = BrokerServer(broker, "127.0.0.1:0", access=access)
        self.server.start()
        self.address = self.server.address
        self._clients: list[RemoteBroker] = []

    def client(self, **options) -> RemoteBroker:
        """A new remote client of the broker (closed with the server)."""
        client = RemoteBroker(self.address, **options)
        self._clients.append(client)
        return client

    def close(self) -> None:
        """Close every client, then stop the server (its broker stays open)."""
        for client in reversed(self._clients):
            client.close()
        self.server.stop(grace_s=0)
