"""Postbox's name server as the name server of a mixed cluster: an Apache RocketMQ 5.3.3 broker
registers with it (its own RegisterBrokerBody, its re-registrations and data-version queries),
and the official Java producer and pull consumer, routed by it, reach both that Apache broker
and the Postbox broker beside it."""

from __future__ import annotations

import json

from bench.remoting_raw import RawRemotingClient
from postbox.broker_node.remoting_node import NodeOptions, RemotingNode
from postbox.network.protocol.codes import RequestCode
from postbox.storage_engine import Broker
from tests.support.rocketmq_lab import LabDriver
from tests.support.rocketmq_processes import start_broker
from tests.support.small_store import small_store_config

APACHE_TOPIC = "on-apache-broker"
POSTBOX_TOPIC = "on-postbox-broker"


def test_apache_broker_and_java_clients_use_the_postbox_name_server(rocketmq_install, tmp_path):
    with Broker.open(small_store_config(tmp_path / "postbox-store")) as broker:
        broker.create_topic(POSTBOX_TOPIC, 2)
        node = RemotingNode(broker, NodeOptions(
            remoting_listen="127.0.0.1:0", namesrv_listen="127.0.0.1:0", cluster="Mixed",
            broker_name="postbox-m",
            namesrv_registrants=frozenset({"127.0.0.1"})))  # the Apache broker registers
        node.start()
        apache = None
        try:
            apache = start_broker(rocketmq_install, tmp_path / "run", node.namesrv_address,
                                  tmp_path / "apache-store", name="apache-m", cluster="Mixed")
            with RawRemotingClient(node.namesrv_address) as namesrv:
                # start_broker returned once this name server listed the Apache broker
                cluster = json.loads(namesrv.call(RequestCode.GET_BROKER_CLUSTER_INFO).body)
                assert cluster["clusterAddrTable"]["Mixed"] == ["apache-m", "postbox-m"]
                assert cluster["brokerAddrTable"]["apache-m"]["brokerAddrs"] == {
                    "0": apache.address}
            driver = LabDriver(rocketmq_install, tmp_path / "driver", node.namesrv_address)
            driver.run("create-topic", broker_addr=apache.address, topic=APACHE_TOPIC, queues=2)
            routed = driver.run("await-route", topics=[APACHE_TOPIC, POSTBOX_TOPIC],
                                timeout_ms=30_000)
            assert routed == {APACHE_TOPIC: ["apache-m"], POSTBOX_TOPIC: ["postbox-m"]}, routed
            sent = driver.run("produce", sends=[
                {"message": {"topic": topic, "keys": [f"{topic}-{n}"], "body": f"{topic} {n}"}}
                for topic in (APACHE_TOPIC, POSTBOX_TOPIC) for n in range(2)])
            assert [result["status"] for result in sent] == ["SEND_OK"] * 4, sent
            pulled = driver.run("pull", topics=[APACHE_TOPIC, POSTBOX_TOPIC])["messages"]
            assert sorted(message["keys"] for message in pulled) == sorted(
                f"{topic}-{n}" for topic in (APACHE_TOPIC, POSTBOX_TOPIC) for n in range(2))
        finally:
            if apache is not None:
                apache.stop()
            node.stop()
