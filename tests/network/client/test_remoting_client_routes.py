"""Routes from a tiny real TCP name server, the global queue numbering, namespaces."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from postbox.network.client.connection import Connections
from postbox.network.client.errors import ConnectionClosedError, RouteNotFoundError
from postbox.network.client.naming import Namespace
from postbox.network.client.routes import QueueRef, RouteTable, parse_route
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.network.protocol.wire import RemotingCommand
from postbox.storage_engine.clock import FakeClock
from tests.support.tiny_remoting_server import PeerSocket, TinyRemotingServer, free_port_address

# fastjson's default form, as a Java name server answers a client of version < 401
ROUTE_TWO_MASTERS = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.2:10911",1:"10.0.0.3:10911"},'
    b'"brokerName":"broker-b","cluster":"C"},{"brokerAddrs":{0:"10.0.0.1:10911"},'
    b'"brokerName":"broker-a","cluster":"C"}],"filterServerTable":{},'
    b'"queueDatas":[{"brokerName":"broker-b","perm":6,"readQueueNums":2,"topicSysFlag":0,'
    b'"writeQueueNums":2},{"brokerName":"broker-a","perm":6,"readQueueNums":3,'
    b'"topicSynFlag":0,"writeQueueNums":3}]}')
CLUSTER_INFO = (
    b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"10.0.0.1:10911"},'
    b'"brokerName":"broker-a","cluster":"C"},"broker-b":{"brokerAddrs":{1:"10.0.0.3:10911"},'
    b'"brokerName":"broker-b","cluster":"C"}},"clusterAddrTable":{"C":["broker-a","broker-b"]}}')


class NameServer:
    """Answers routes for the topics it knows; counts the lookups."""

    def __init__(self) -> None:
        self.topics = {"NS%orders": ROUTE_TWO_MASTERS, "orders": ROUTE_TWO_MASTERS}
        self.lookups: list[str] = []
        self.server = TinyRemotingServer(self.handle)

    def handle(self, command: RemotingCommand, peer: PeerSocket) -> list[bytes | RemotingCommand]:
        if command.code == RequestCode.GET_BROKER_CLUSTER_INFO:
            return [command.response(0, body=CLUSTER_INFO)]
        topic = command.ext_fields["topic"]
        self.lookups.append(topic)
        assert command.ext_fields["acceptStandardJsonOnly"] == "true"
        if topic not in self.topics:
            return [command.response(ResponseCode.TOPIC_NOT_EXIST, remark="No topic route info")]
        return [command.response(0, body=self.topics[topic])]


@pytest.fixture
def namesrv() -> Iterator[NameServer]:
    server = NameServer()
    yield server
    server.server.close()


@pytest.fixture
def connections() -> Iterator[Connections]:
    pool = Connections(connect_timeout_ms=1000)
    yield pool
    pool.close()


def test_global_numbering_sorts_by_broker_then_queue_and_maps_both_ways() -> None:
    route = parse_route("orders", ROUTE_TWO_MASTERS)
    assert route.queues == (QueueRef("broker-a", 0), QueueRef("broker-a", 1),
                            QueueRef("broker-a", 2), QueueRef("broker-b", 0),
                            QueueRef("broker-b", 1))
    for index, ref in enumerate(route.queues):
        assert route.queue(index) == ref
        assert route.global_id(ref.broker_name, ref.queue_id) == index
    assert route.master("broker-b") == "10.0.0.2:10911"
    assert route.readable_queue_ids() == route.writable_queue_ids() == [0, 1, 2, 3, 4]
    with pytest.raises(IndexError, match=r"queues 0\.\.4, not 5"):
        route.queue(5)
    with pytest.raises(KeyError):
        route.global_id("broker-c", 0)


def test_a_broker_without_master_keeps_its_numbers_but_is_not_writable() -> None:
    route = parse_route("orders", ROUTE_TWO_MASTERS.replace(b'{0:"10.0.0.2:10911",', b"{"))
    assert route.global_id("broker-b", 1) == 4
    assert route.writable_queue_ids() == [0, 1, 2]
    assert route.readable_queue_ids() == [0, 1, 2, 3, 4]


def test_route_fails_over_to_the_next_name_server_and_is_cached(namesrv, connections) -> None:
    clock = FakeClock()
    table = RouteTable([free_port_address(), namesrv.server.address], connections,
                       Namespace("NS"), clock=clock, ttl_ms=30_000)
    ref, master = table.locate("orders", 3)
    assert (ref, master) == (QueueRef("broker-b", 0), "10.0.0.2:10911")
    assert table.global_id("orders", "broker-a", 2) == 2
    assert namesrv.lookups == ["NS%orders"]
    clock.advance(29_999)
    table.route("orders")
    assert len(namesrv.lookups) == 1
    clock.advance(1)
    table.route("orders")
    assert len(namesrv.lookups) == 2
    table.invalidate("orders")
    table.route("orders")
    assert len(namesrv.lookups) == 3


def test_unknown_topic_and_unreachable_name_servers_are_clear_errors(namesrv, connections
                                                                      ) -> None:
    table = RouteTable([namesrv.server.address], connections)
    with pytest.raises(RouteNotFoundError, match="no name server knows topic 'missing'"):
        table.route("missing")
    dead = [free_port_address(), free_port_address()]
    with pytest.raises(ConnectionClosedError, match="no name server answered"):
        RouteTable(dead, connections).route("orders")


def test_cluster_info_masters(namesrv, connections) -> None:
    table = RouteTable([namesrv.server.address], connections)
    info = table.cluster_info()
    assert info.clusters == {"C": ["broker-a", "broker-b"]}
    assert info.masters("C") == {"broker-a": "10.0.0.1:10911"}
    assert table.master_address("broker-a") == "10.0.0.1:10911"


@pytest.mark.parametrize(("name", "wire"), [
    ("orders", "NS%orders"),
    ("%RETRY%billing", "%RETRY%NS%billing"),
    ("%DLQ%billing", "%DLQ%NS%billing"),
    ("TBW102", "TBW102"),
    ("RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_HALF_TOPIC"),
])
def test_namespace_wraps_like_rocketmq_clients_and_unwraps(name: str, wire: str) -> None:
    namespace = Namespace("NS")
    assert namespace.wrap(name) == wire
    assert namespace.wrap(wire) == wire
    assert namespace.unwrap(wire) == name
    assert Namespace("").wrap(name) == name
    assert not namespace.owns("other%orders")
    assert namespace.owns(wire) or name == wire  # system topics belong to no namespace


def test_namespace_rejects_separator_characters() -> None:
    with pytest.raises(ValueError, match="namespace 'a%b'"):
        Namespace("a%b")
