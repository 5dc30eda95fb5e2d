"""``BrokerNode`` composes what ``postbox broker start`` serves: the remoting node (broker and
name server) and the gRPC server over one broker. A ``rocketmq://`` client reaches the broker
through the node's name server, the gRPC port is bound, ``check`` refuses what cannot be served
before a store is opened, and ``stop`` closes both listeners."""

from __future__ import annotations

import socket

import pytest

from postbox.broker_node.grpc_v2 import ServerError
from postbox.broker_node.node import BrokerNode, BrokerNodeOptions
from postbox.broker_node.remoting_node import NodeError, NodeOptions
from postbox.network.client.remote_broker import RemotingBroker
from postbox.storage_engine import Broker, Message
from tests.support.small_store import small_store_config

LOOPBACK = NodeOptions(remoting_listen="127.0.0.1:0", namesrv_listen="127.0.0.1:0")


def _options(**changes) -> BrokerNodeOptions:
    return BrokerNodeOptions(**{"remoting": LOOPBACK, "grpc_listen": "127.0.0.1:0",
                                "workers": 4, **changes})


def test_a_client_reaches_the_broker_through_the_node(tmp_path):
    with Broker.open(small_store_config(tmp_path / "store")) as broker:
        broker.create_topic("orders", 2)
        node = BrokerNode(broker, _options())
        node.start()
        try:
            host, _, port = node.grpc.address.rpartition(":")
            socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
            assert node.remoting.namesrv_address is not None
            with RemotingBroker(node.remoting.namesrv_address) as client:
                assert client.remote and client.delay_level_count == 18
                sent = client.send(Message("orders", b"hello"), queue_id=1)
            broker.store.wait_dispatched()
            [stored] = broker.pull("g", "orders", 1, sent.queue_offset, 1).messages
            assert stored.body == b"hello"
            assert not broker.remote
        finally:
            node.stop(grace_s=0)


def test_check_refuses_what_cannot_be_served_before_a_store_opens():
    with pytest.raises(ServerError):
        BrokerNode.check(_options(grpc_listen="no-port"))
    with pytest.raises(NodeError):
        BrokerNode.check(_options(remoting=NodeOptions(remoting_listen="0.0.0.0:0")))
    assert BrokerNode.check(_options()) is None  # no ACL file: no access control
