"""Registration with an external name server (here Postbox's own, over real sockets): the
broker's topics routed at its advertised address, refreshed as topics appear, gone after
stop; an unreachable name server changes nothing else; bad ``--namesrv`` lists are refused."""

from __future__ import annotations

import json
import socket

import pytest

from bench.remoting_raw import RawRemotingClient
from postbox.broker_node.admin import advertised_topics, data_version
from postbox.broker_node.namesrv import BrokerIdentity, NameServer, RouteTable
from postbox.broker_node.registration import NamesrvRegistrar, parse_namesrv_list
from postbox.broker_node.server import RemotingServer
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.storage_engine import Broker
from postbox.storage_engine.clock import SystemClock
from tests.support.small_store import small_store_config

IDENTITY = BrokerIdentity("PostboxCluster", "postbox-x", 0, "127.0.0.1:10999")


@pytest.fixture
def external_namesrv():
    routes = RouteTable(SystemClock())
    server = RemotingServer(name="external-namesrv")
    NameServer(routes).register_handlers(server.handlers)
    server.start()
    yield server
    server.stop()


def _registrar(broker, addresses):
    return NamesrvRegistrar(addresses, IDENTITY,
                            lambda: advertised_topics(broker, IDENTITY.broker_name),
                            lambda: data_version(broker), SystemClock())


def _route(client, topic):
    return client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})


def test_registered_broker_is_routed_until_it_stops(tmp_path, external_namesrv):
    with Broker.open(small_store_config(tmp_path / "store")) as broker, \
            RawRemotingClient(external_namesrv.address) as client:
        broker.create_topic("orders", 3)
        registrar = _registrar(broker, [external_namesrv.address])
        assert registrar.run_once(registrar.clock.now_ms()) == 0  # the first round
        try:
            route = json.loads(_route(client, "orders").body)
            assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10999"}
            assert route["brokerDatas"][0]["cluster"] == "PostboxCluster"
            assert route["queueDatas"][0]["writeQueueNums"] == 3
            assert _route(client, "later").code == ResponseCode.TOPIC_NOT_EXIST
            broker.create_topic("later", 1)
            assert registrar.register_all() == 1  # the 30 s round, run now
            assert _route(client, "later").code == 0
        finally:
            registrar.stop()
        assert _route(client, "orders").code == ResponseCode.TOPIC_NOT_EXIST
        cluster = json.loads(client.call(RequestCode.GET_BROKER_CLUSTER_INFO).body)
        assert cluster["brokerAddrTable"] == {}


def test_unreachable_name_server_is_logged_and_the_others_still_served(
        tmp_path, external_namesrv, caplog):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead = closed.getsockname()
    closed.close()  # nothing listens there any more
    with Broker.open(small_store_config(tmp_path / "store")) as broker, \
            RawRemotingClient(external_namesrv.address) as client:
        broker.create_topic("orders", 1)
        registrar = _registrar(broker, [dead, external_namesrv.address])
        assert registrar.register_all() == 1
        assert registrar.registered == {f"{dead[0]}:{dead[1]}": False,
                                        "{}:{}".format(*external_namesrv.address): True}
        assert _route(client, "orders").code == 0
        assert "[registration] register failed" in caplog.text
        registrar.unregister_all()
        assert _route(client, "orders").code == ResponseCode.TOPIC_NOT_EXIST


def test_namesrv_list_parsing():
    assert parse_namesrv_list("127.0.0.1:9876;ns2:9877") == [("127.0.0.1", 9876),
                                                             ("ns2", 9877)]
    for bad in ("", ";", "host", "host:0", "host:99999", ":9876", "h:x"):
        with pytest.raises(ValueError, match=r"name server address|no name server"):
            parse_namesrv_list(bad)
