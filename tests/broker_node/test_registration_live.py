"""A Postbox broker registers with the lab's live Apache RocketMQ name server: Apache's name
server then routes the broker's topics to the Postbox broker's advertised address, lists it in
its cluster info, and forgets it when the broker unregisters."""

from __future__ import annotations

import json

from bench.remoting_raw import RawRemotingClient
from postbox.broker_node.admin import advertised_topics, data_version
from postbox.broker_node.namesrv import BrokerIdentity
from postbox.broker_node.registration import NamesrvRegistrar, parse_namesrv_list
from postbox.broker_node.remoting_node import NodeOptions, RemotingNode
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.storage_engine import Broker
from postbox.storage_engine.clock import SystemClock
from tests.support.small_store import small_store_config

TOPIC = "postbox-registered-topic"


def test_apache_name_server_routes_to_the_registered_postbox_broker(live_rocketmq, tmp_path):
    identity = BrokerIdentity("PostboxRegistered", "postbox-reg", 0, "127.0.0.1:41911")
    with Broker.open(small_store_config(tmp_path / "store")) as broker:
        broker.create_topic(TOPIC, 3)
        registrar = NamesrvRegistrar(parse_namesrv_list(live_rocketmq.namesrv), identity,
                                     lambda: advertised_topics(broker, identity.broker_name),
                                     lambda: data_version(broker), SystemClock())
        with RawRemotingClient(live_rocketmq.namesrv) as apache:
            assert apache.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}
                               ).code == ResponseCode.TOPIC_NOT_EXIST
            try:
                assert registrar.register_all() == 1, registrar.registered
                answer = apache.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
                assert answer.code == 0, answer.remark
                route = json.loads(answer.body)
                assert route["brokerDatas"] == [{
                    "brokerAddrs": {"0": "127.0.0.1:41911"}, "brokerName": "postbox-reg",
                    "cluster": "PostboxRegistered", "enableActingMaster": False}]
                assert route["queueDatas"][0]["writeQueueNums"] == 3
                assert route["queueDatas"][0]["perm"] == 6
                cluster = apache.call(RequestCode.GET_BROKER_CLUSTER_INFO)
                assert b'"PostboxRegistered":["postbox-reg"]' in cluster.body
                assert registrar.register_all() == 1  # a second round is accepted as well
            finally:
                registrar.stop()
            gone = apache.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
            assert gone.code == ResponseCode.TOPIC_NOT_EXIST


ROUTED = "postbox-routed-topic"


def test_java_clients_reach_the_registered_postbox_broker_through_apaches_name_server(
        live_rocketmq, tmp_path):
    with Broker.open(small_store_config(tmp_path / "store")) as broker:
        broker.create_topic(ROUTED, 2)
        node = RemotingNode(broker, NodeOptions(
            remoting_listen="127.0.0.1:0", namesrv_listen=None, cluster="PostboxRegistered",
            broker_name="postbox-live",
            namesrv_addresses=parse_namesrv_list(live_rocketmq.namesrv)))
        node.start()  # the first registration round happens here
        try:
            sent = live_rocketmq.driver.run("produce", sends=[
                {"message": {"topic": ROUTED, "tags": "t", "keys": [f"routed-{n}"],
                             "body": f"via Apache's name server {n}"}} for n in range(3)])
            assert [result["status"] for result in sent] == ["SEND_OK"] * 3, sent
            broker.store.wait_dispatched()
            stored = sorted(view.body for queue_id in (0, 1) for view in broker.store.get_message(
                "check", ROUTED, queue_id, 0, 10).messages)
            assert stored == [f"via Apache's name server {n}".encode() for n in range(3)]
            pulled = live_rocketmq.driver.run("pull", topics=[ROUTED])["messages"]
            assert sorted(message["keys"] for message in pulled) == [
                f"routed-{n}" for n in range(3)], pulled
        finally:
            node.stop()
