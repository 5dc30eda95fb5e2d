"""A Postbox broker served over remoting in this process: ``broker_node.remoting_node.RemotingNode``
(name server + broker data plane + admin over one embedded ``Broker``, as ``postbox broker
start`` runs it) on free loopback ports. For client tests that need a real Postbox peer without
a second process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from postbox.broker_node.remoting_node import NodeOptions, RemotingNode
from postbox.broker_node.server import AccessControl
from postbox.storage_engine import Broker

CLUSTER = "PostboxCluster"
BROKER_NAME = "postbox-a"


@dataclass(frozen=True)
class PostboxRemoting:
    """Addresses of a running in-process Postbox remoting node."""

    namesrv: str
    broker_address: str
    broker: Broker
    node: RemotingNode | None = None

    @property
    def store_url(self) -> str:
        """The ``rocketmq://`` URL of its name server."""
        return f"rocketmq://{self.namesrv}"

    def requests_served(self, code: int) -> int:
        """How many requests of ``code`` the broker's remoting server has served."""
        assert self.node is not None
        return self.node.broker_server.server.request_counts[code]


@contextlib.contextmanager
def serve_remoting(broker: Broker, access: AccessControl | None = None
                   ) -> Iterator[PostboxRemoting]:
    """Serve ``broker`` over remoting until the block ends (the broker stays the caller's);
    ``access``: the ACL both listeners check (``broker_node.access.RemotingAccess``)."""
    node = RemotingNode(broker, NodeOptions(remoting_listen="127.0.0.1:0",
                                            namesrv_listen="127.0.0.1:0", cluster=CLUSTER,
                                            broker_name=BROKER_NAME), access)
    node.start()
    try:
        assert node.namesrv_address is not None
        yield PostboxRemoting(node.namesrv_address, node.broker_address, broker, node)
    finally:
        node.stop()
