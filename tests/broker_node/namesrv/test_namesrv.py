"""The name server over real sockets: routes (standard and fastjson JSON), the unknown-topic
answer and the auto-creation topic, cluster info, topic lists, registrations (CRC, expiry,
unregister), the KV table, and the refused configuration write."""

from __future__ import annotations

import json
import re
import zlib

import pytest

from bench.remoting_raw import RawRemotingClient
from postbox.broker_node.admin import AdvertisedTopics, advertised_topics
from postbox.broker_node.namesrv import BrokerIdentity, NameServer, RouteTable
from postbox.broker_node.namesrv.route_bodies import register_body
from postbox.broker_node.namesrv.route_table import QueueData
from postbox.broker_node.server import RemotingServer
from postbox.network.protocol import fastjson
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.storage_engine import Broker, StoreConfig
from postbox.storage_engine.clock import FakeClock
from tests.support.small_store import small_store_config

LOCAL = BrokerIdentity("PostboxCluster", "postbox-a", 0, "127.0.0.1:10911")


def _open_broker(tmp_path, **broker_conf):
    config = small_store_config(tmp_path / "store")
    if broker_conf:
        config = StoreConfig.from_broker_conf({"storePathRootDir": str(tmp_path / "store"),
                                               "mappedFileSizeCommitLog": "1048576",
                                               **broker_conf})
    return Broker.open(config)


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def namesrv(tmp_path, clock):
    with _open_broker(tmp_path) as broker:
        broker.create_topic("orders", 4)
        routes = RouteTable(clock)
        routes.set_local(LOCAL, AdvertisedTopics(broker, LOCAL.broker_name))
        server = RemotingServer(name="namesrv")
        NameServer(routes).register_handlers(server.handlers)
        server.start()
        try:
            yield server, broker, routes
        finally:
            server.stop()


def test_route_is_standard_json_for_new_clients(namesrv):
    server, _, _ = namesrv
    with RawRemotingClient(server.address, version=479) as client:
        answer = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})
    assert answer.code == ResponseCode.SUCCESS
    route = json.loads(answer.body)  # standard JSON: the stdlib parses it
    assert route["brokerDatas"] == [{"brokerAddrs": {"0": "127.0.0.1:10911"},
                                     "brokerName": "postbox-a", "cluster": "PostboxCluster",
                                     "enableActingMaster": False}]
    assert route["queueDatas"] == [{"brokerName": "postbox-a", "perm": 6, "readQueueNums": 4,
                                    "topicSysFlag": 0, "writeQueueNums": 4}]


def test_route_has_bare_broker_ids_for_old_clients_unless_they_ask(namesrv):
    server, _, _ = namesrv
    with RawRemotingClient(server.address, language="GO", version=317) as client:
        old = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})
        asked = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                            {"topic": "orders", "acceptStandardJsonOnly": True})
    assert re.search(rb'"brokerAddrs":\{0:"127\.0\.0\.1:10911"\}', old.body)
    with pytest.raises(json.JSONDecodeError, match="property name"):
        json.loads(old.body)
    assert fastjson.loads(old.body)["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911"}
    assert json.loads(asked.body)["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911"}


def test_unknown_topic_is_17_and_auto_creation_topic_is_routed(namesrv):
    server, broker, _ = namesrv
    with RawRemotingClient(server.address) as client:
        missing = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "nope"})
        default = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
        broker.create_topic("fresh", 2)
        fresh = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "fresh"})
        no_topic = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {})
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST
    assert "nope" in missing.remark
    assert default.code == 0
    queue = json.loads(default.body)["queueDatas"][0]
    assert queue["perm"] == 7 and queue["writeQueueNums"] == 8
    assert fresh.code == 0, "a topic created a moment ago is routed at once"
    assert no_topic.code == ResponseCode.SYSTEM_ERROR and "topic" in no_topic.remark


def test_auto_creation_topic_is_not_routed_when_auto_creation_is_off(tmp_path, clock):
    with _open_broker(tmp_path, autoCreateTopicEnable="false") as broker:
        assert "TBW102" not in advertised_topics(broker, "b")
        broker.create_topic("orders", 1)
        assert set(advertised_topics(broker, "b")) == {"orders"}


def test_cluster_info_and_topic_lists(namesrv):
    server, broker, _ = namesrv
    with RawRemotingClient(server.address) as client:
        cluster = client.call(RequestCode.GET_BROKER_CLUSTER_INFO)
        topics = client.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        by_cluster = client.call(224, {"cluster": "PostboxCluster"})
        other = client.call(224, {"cluster": "elsewhere"})
    info = json.loads(cluster.body)
    assert info["clusterAddrTable"] == {"PostboxCluster": ["postbox-a"]}
    assert info["brokerAddrTable"]["postbox-a"]["brokerAddrs"] == {"0": "127.0.0.1:10911"}
    assert json.loads(topics.body)["topicList"] == ["TBW102", "orders"]
    assert json.loads(by_cluster.body)["topicList"] == ["TBW102", "orders"]
    assert json.loads(other.body)["topicList"] == []
    broker.create_topic("later", 1)
    with RawRemotingClient(server.address) as client:
        again = client.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert json.loads(again.body)["topicList"] == ["TBW102", "later", "orders"]


def _register(client, name, address, topics, *, crc=None, broker_id=0):
    body = register_body({t: QueueData(name, 2, 2, 6) for t in topics},
                         {"counter": 1, "timestamp": 1})
    fields = {"brokerName": name, "brokerAddr": address, "clusterName": "Other",
              "haServerAddr": "", "brokerId": broker_id,
              "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF if crc is None else crc}
    return client.call(RequestCode.REGISTER_BROKER, fields, body)


def test_registered_brokers_join_routes_until_they_leave_or_expire(namesrv, clock):
    server, _, _ = namesrv
    with RawRemotingClient(server.address) as client:
        assert _register(client, "remote-b", "10.0.0.2:10911", ["orders", "audit"]).code == 0
        assert _register(client, "remote-b", "10.0.0.3:10911", ["orders"], broker_id=1
                         ).code == 0
        route = json.loads(client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                       {"topic": "orders"}).body)
        assert [d["brokerName"] for d in route["queueDatas"]] == ["postbox-a", "remote-b"]
        remote = route["brokerDatas"][1]
        assert remote["brokerAddrs"] == {"0": "10.0.0.2:10911", "1": "10.0.0.3:10911"}
        assert client.call(RequestCode.UNREGISTER_BROKER,
                           {"brokerName": "remote-b", "brokerAddr": "10.0.0.3:10911",
                            "clusterName": "Other", "brokerId": 1}).code == 0
        assert client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "audit"}).code == 0
        clock.advance(120_001)  # no re-registration for longer than the 120 s timeout
        gone = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "audit"})
        assert gone.code == ResponseCode.TOPIC_NOT_EXIST
        clusters = json.loads(client.call(RequestCode.GET_BROKER_CLUSTER_INFO).body)
        assert clusters["clusterAddrTable"] == {"PostboxCluster": ["postbox-a"]}


def test_registration_with_a_bad_checksum_or_body_is_refused(namesrv):
    server, _, _ = namesrv
    with RawRemotingClient(server.address) as client:
        bad_crc = _register(client, "remote-c", "10.0.0.4:10911", ["x"], crc=12345)
        garbage = client.call(RequestCode.REGISTER_BROKER,
                              {"brokerName": "remote-c", "brokerAddr": "10.0.0.4:1",
                               "clusterName": "c", "haServerAddr": "", "brokerId": 0},
                              b'{"topicConfigSerializeWrapper":{"topicConfigTable":[1]}}')
        route = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "x"})
    assert bad_crc.code == ResponseCode.SYSTEM_ERROR and bad_crc.remark == "crc32 not match"
    assert garbage.code == ResponseCode.SYSTEM_ERROR and "topicConfigTable" in garbage.remark
    assert route.code == ResponseCode.TOPIC_NOT_EXIST


def test_kv_config_answers_what_is_there_and_22_for_what_is_not(namesrv):
    server, _, _ = namesrv
    where = {"namespace": "ORDER_TOPIC_CONFIG", "key": "orders"}
    with RawRemotingClient(server.address) as client:
        assert client.call(101, where).code == ResponseCode.QUERY_NOT_FOUND
        assert client.call(219, {"namespace": "ORDER_TOPIC_CONFIG"}).code == 22
        assert client.call(100, {**where, "value": "postbox-a:4"}).code == 0
        assert client.call(101, where).ext_fields["value"] == "postbox-a:4"
        table = json.loads(client.call(219, {"namespace": "ORDER_TOPIC_CONFIG"}).body)
        assert table == {"table": {"orders": "postbox-a:4"}}
        assert client.call(102, where).code == 0
        assert client.call(101, where).code == ResponseCode.QUERY_NOT_FOUND


def test_remote_config_write_is_refused(namesrv):
    server, _, _ = namesrv
    with RawRemotingClient(server.address) as client:
        answer = client.call(RequestCode.UPDATE_NAMESRV_CONFIG, {},
                             b"configStorePath=/tmp/x\nkvConfigPath=/tmp/y")
    assert answer.code == ResponseCode.NO_PERMISSION
    assert "CVE-2023-33246" in answer.remark


def test_query_data_version_says_whether_a_registration_changed_and_keeps_it_alive(namesrv,
                                                                                   clock):
    server, _, _ = namesrv
    who = {"brokerName": "remote-v", "brokerAddr": "10.0.0.9:10911", "clusterName": "Other",
           "brokerId": 0}
    with RawRemotingClient(server.address) as client:
        unknown = client.call(322, who, b'{"counter":1,"stateVersion":0,"timestamp":1}')
        assert unknown.code == 0 and unknown.ext_fields["changed"] == "true"
        assert _register(client, "remote-v", "10.0.0.9:10911", ["v-topic"]).code == 0
        same = client.call(322, who, b'{"counter":1,"stateVersion":0,"timestamp":1}')
        newer = client.call(322, who, b'{"counter":2,"stateVersion":0,"timestamp":5}')
        assert same.ext_fields["changed"] == "false"
        assert json.loads(same.body) == {"counter": 1, "timestamp": 1}
        assert newer.ext_fields["changed"] == "true"
        for _ in range(3):  # 300 s without a registration, alive through the queries
            clock.advance(100_000)
            assert client.call(322, who, b'{"counter":1,"timestamp":1}').code == 0
        assert client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "v-topic"}).code == 0
