"""``RemotingNode`` over real sockets: its name server routes to its broker's bound (or
advertised) address, a send through that route is stored, ACL guards both listeners, a
wildcard bind needs an advertised address, and stop unregisters from external name servers."""

from __future__ import annotations

import json

import pytest

from bench.remoting_raw import RawRemotingClient
from postbox.broker_node.access import RemotingAccess
from postbox.broker_node.acl_file import parse_acl
from postbox.broker_node.namesrv import NameServer, RouteTable
from postbox.broker_node.remoting_node import NodeError, NodeOptions, RemotingNode
from postbox.broker_node.server import RemotingServer
from postbox.network.protocol.acl_signature import sign_request
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.storage_engine.clock import SystemClock

LOOPBACK = dict(remoting_listen="127.0.0.1:0", namesrv_listen="127.0.0.1:0")


@pytest.fixture
def broker_topics() -> dict[str, int]:
    return {"orders": 2}


def test_name_server_routes_to_the_broker_it_serves_beside(broker):
    node = RemotingNode(broker, NodeOptions(**LOOPBACK, cluster="C1", broker_name="b1"))
    node.start()
    try:
        with RawRemotingClient(node.namesrv_address) as namesrv:
            route = json.loads(namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                            {"topic": "orders"}).body)
        address = route["brokerDatas"][0]["brokerAddrs"]["0"]
        assert address == node.broker_address != "127.0.0.1:0"
        with RawRemotingClient(address) as client:
            sent = client.call(RequestCode.SEND_MESSAGE_V2, {
                "a": "PG", "b": "orders", "c": "TBW102", "d": 4, "e": 1, "f": 0, "g": 0,
                "h": 0, "i": "", "j": 0, "k": False, "m": False}, b"hello")
            stats = client.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "orders"})
        assert sent.code == 0 and sent.ext_fields["queueId"] == "1"
        assert stats.code == 0
    finally:
        node.stop()


def test_advertised_address_is_what_routes_name(broker):
    node = RemotingNode(broker, NodeOptions(remoting_listen="0.0.0.0:0", namesrv_listen=None,
                                            advertise="broker.example:10911"))
    node.start()
    try:
        assert node.namesrv_address is None
        assert node.broker_address == "broker.example:10911"
        assert node.routes.route("orders").broker_datas[0].addresses == {
            0: "broker.example:10911"}
    finally:
        node.stop()


def test_wildcard_bind_without_advertise_is_refused(broker):
    with pytest.raises(NodeError, match="--advertise"):
        RemotingNode(broker, NodeOptions(remoting_listen="0.0.0.0:0"))
    with pytest.raises(NodeError, match="--namesrv-listen"):
        RemotingNode(broker, NodeOptions(remoting_listen="127.0.0.1:0", namesrv_listen="x"))


def test_acl_guards_both_listeners(broker):
    access = RemotingAccess(parse_acl({"accounts": [
        {"access_key": "app", "secret_key": "s", "topics": {"orders": "PUB"}}]}))
    node = RemotingNode(broker, NodeOptions(**LOOPBACK), access=access)
    node.start()
    try:
        for address in (node.namesrv_address, node.broker_address):
            with RawRemotingClient(address) as client:
                unsigned = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})
                signed = client.call_command(sign_request(client.request(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"}), "app", "s"))
                assert unsigned.code == ResponseCode.NO_PERMISSION
                assert signed.code != ResponseCode.NO_PERMISSION
    finally:
        node.stop()


def test_stop_unregisters_from_external_name_servers(broker):
    external_routes = RouteTable(SystemClock())
    external = RemotingServer(name="external")
    NameServer(external_routes).register_handlers(external.handlers)
    external.start()
    try:
        node = RemotingNode(broker, NodeOptions(**LOOPBACK, broker_name="b2",
                                                namesrv_addresses=[external.address]))
        node.start()
        try:
            assert node.registrar is not None
            assert node.registrar.register_all() == 1
            assert external_routes.route("orders").broker_datas[0].addresses == {
                0: node.broker_address}
        finally:
            node.stop()
        assert external_routes.route("orders") is None
    finally:
        external.stop()
