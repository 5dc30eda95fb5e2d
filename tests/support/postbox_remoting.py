"""A Postbox broker served over remoting in this process: name server + broker (data plane and
admin) over one embedded ``Broker``, as ``postbox broker start`` assembles them, on free
loopback ports. For client tests that need a real Postbox peer without a second process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from network.remoting.admin import BrokerAdmin, advertised_topics
from network.remoting.namesrv import BrokerIdentity, NameServer, RouteTable
from network.remoting.server import RemotingServer
from network.remoting.server.broker import BrokerRemotingServer
from storage_engine import Broker

CLUSTER = "PostboxCluster"
BROKER_NAME = "postbox-a"


@dataclass(frozen=True)
class PostboxRemoting:
    """Addresses of a running in-process Postbox remoting stack."""

    namesrv: str
    broker_address: str
    broker: Broker

    @property
    def store_url(self) -> str:
        """The ``rocketmq://`` URL of its name server."""
        return f"rocketmq://{self.namesrv}"


@contextlib.contextmanager
def serve_remoting(broker: Broker) -> Iterator[PostboxRemoting]:
    """Serve ``broker`` over remoting until the block ends (the broker stays the caller's)."""
    broker_server = BrokerRemotingServer(broker)
    BrokerAdmin(broker, BROKER_NAME).register_handlers(broker_server.server.handlers)
    broker_server.start()
    try:
        host, port = broker_server.address or ("127.0.0.1", 0)
        address = f"{host}:{port}"
        routes = RouteTable(broker.store.clock)
        routes.set_local(BrokerIdentity(CLUSTER, BROKER_NAME, 0, address),
                         lambda: advertised_topics(broker, BROKER_NAME))
        namesrv = RemotingServer(name="namesrv")
        NameServer(routes).register_handlers(namesrv.handlers)
        namesrv.start()
        try:
            namesrv_host, namesrv_port = namesrv.address or ("127.0.0.1", 0)
            yield PostboxRemoting(f"{namesrv_host}:{namesrv_port}", address, broker)
        finally:
            namesrv.stop()
    finally:
        broker_server.stop()
