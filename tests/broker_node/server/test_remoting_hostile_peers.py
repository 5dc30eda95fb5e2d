"""Attacks at the request level on a real ``postbox broker start`` process over real sockets:

- ACL forgery: a key with only SUB on a group cannot plant, in the group's retry (and so
  dead-letter) topic, a message naming a topic it may not write as its real topic;
- route hijack: an unauthenticated REGISTER_BROKER (under the local broker's name or any
  other) is refused by the embedded name server unless ``--namesrv-registrants`` lists the
  peer, and the local broker's name is never taken;
- replay: a captured admin request cannot be replayed under another request code.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest

from bench.remoting_raw import RawRemotingClient, send_fields
from postbox.broker_node.namesrv import QueueData
from postbox.broker_node.namesrv.route_bodies import register_body
from postbox.network.protocol.acl_signature import sign, sign_request
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.network.protocol.wire import RemotingCommand
from postbox.storage_engine import Broker, StoreConfig
from tests.support.broker_process import BrokerProcess, write_broker_conf
from tests.support.polling import wait_until

RC = RequestCode
ACL = {"accounts": [
    {"access_key": "sub", "secret_key": "sub-secret", "topics": {"orders": "SUB"},
     "groups": {"billing": "SUB"}},
    {"access_key": "consumer", "secret_key": "c-secret", "topics": {"orders": "PUB|SUB"},
     "groups": {"billing": "SUB"}},
    {"access_key": "ops", "secret_key": "ops-secret", "admin": True},
]}
SECRETS = {account["access_key"]: account["secret_key"] for account in ACL["accounts"]}
LOCAL_NAME = "postbox-broker"  # the default --broker-name


@pytest.fixture
def start_broker(tmp_path: Path):
    """Factory of ``postbox broker start`` processes with topics ``orders`` and ``scratch``;
    stopped (exit 0) at teardown."""
    started: list[BrokerProcess] = []

    def start(*extra: str, acl: bool = False) -> BrokerProcess:
        store = tmp_path / f"store-{len(started)}"
        conf = write_broker_conf(tmp_path)
        with Broker.open(StoreConfig.from_broker_conf(conf, root_dir=store)) as broker:
            broker.create_topic("orders", 2)
            broker.create_topic("scratch", 1)
        acl_path = None
        if acl:
            acl_path = tmp_path / "acl.json"
            acl_path.write_text(json.dumps(ACL))
        process = BrokerProcess(store, broker_conf=conf, acl=acl_path, extra=extra).start()
        started.append(process)
        return process

    yield start
    for process in started:
        assert process.stop() == 0, process.stderr_text()


def signed_call(client: RawRemotingClient, key: str, code: int, fields: dict,
                body: bytes = b"") -> RemotingCommand:
    return client.call_command(sign_request(client.request(code, fields, body), key,
                                            SECRETS[key]))


def retry_send(**properties: str) -> dict:
    """A send to ``%RETRY%billing`` past its reconsume maximum: the broker dead-letters it."""
    return send_fields("%RETRY%billing", 0, properties=properties, reconsumeTimes=99,
                       maxReconsumeTimes=16)


def dead_letters(client: RawRemotingClient) -> int:
    answer = signed_call(client, "ops", RC.GET_MAX_OFFSET, {"topic": "%DLQ%billing",
                                                            "queueId": 0})
    assert answer.code == 0, answer.remark
    return int(answer.ext_fields["offset"])


def test_sub_only_key_cannot_plant_a_real_topic_in_its_retry_topic(start_broker):
    broker = start_broker(acl=True)
    with RawRemotingClient(broker.remoting_address) as client:
        forged = signed_call(client, "sub", RC.SEND_MESSAGE_V2,
                             retry_send(RETRY_TOPIC="orders"), b"forged order")
        assert forged.code == ResponseCode.NO_PERMISSION, forged.remark
        assert "no PUB right on topic 'orders'" in forged.remark
        assert "real topic" in forged.remark
        real = signed_call(client, "sub", RC.SEND_MESSAGE_V2, retry_send(REAL_TOPIC="orders"),
                           b"forged order")
        assert real.code == ResponseCode.NO_PERMISSION, real.remark
        plain = signed_call(client, "sub", RC.SEND_MESSAGE_V2,
                            send_fields("%RETRY%billing", 0), b"a retry of its own")
        assert plain.code == ResponseCode.SUCCESS, plain.remark
        allowed = signed_call(client, "consumer", RC.SEND_MESSAGE_V2,
                              retry_send(RETRY_TOPIC="orders"), b"a consumer's own retry")
        assert allowed.code == ResponseCode.SUCCESS, allowed.remark
        # the allowed one is dead-lettered; the forged ones, sent before it, are not there
        wait_until(lambda: dead_letters(client) >= 1, what="the dead letter indexed")
        assert dead_letters(client) == 1


def register(client: RawRemotingClient, name: str, address: str = "127.0.0.1:1"
             ) -> RemotingCommand:
    body = register_body({"orders": QueueData(name, 8, 8, 6)}, {"counter": 1, "timestamp": 1})
    return client.call(RC.REGISTER_BROKER, {
        "brokerName": name, "brokerAddr": address, "clusterName": "DefaultCluster",
        "haServerAddr": "", "brokerId": 0, "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}, body)


def route_addresses(client: RawRemotingClient, topic: str = "orders") -> list[dict]:
    answer = client.call(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    assert answer.code == 0, answer.remark
    return [data["brokerAddrs"] for data in json.loads(answer.body)["brokerDatas"]]


def test_unauthenticated_registrations_cannot_take_over_routes(start_broker):
    broker = start_broker()
    with RawRemotingClient(broker.namesrv_address) as client:
        hijack = register(client, LOCAL_NAME)
        assert hijack.code == ResponseCode.NO_PERMISSION, hijack.remark
        assert "--namesrv-registrants" in hijack.remark
        stranger = register(client, "evil")
        assert stranger.code == ResponseCode.NO_PERMISSION, stranger.remark
        unregister = client.call(RC.UNREGISTER_BROKER, {
            "brokerName": LOCAL_NAME, "brokerAddr": broker.remoting_address,
            "clusterName": "DefaultCluster", "brokerId": 0})
        assert unregister.code == ResponseCode.NO_PERMISSION, unregister.remark
        keep_alive = client.call(322, {"brokerName": LOCAL_NAME, "brokerId": 0})
        assert keep_alive.code == ResponseCode.NO_PERMISSION, keep_alive.remark
        assert route_addresses(client) == [{"0": broker.remoting_address}]


def test_listed_registrants_register_but_never_under_the_local_name(start_broker):
    broker = start_broker("--namesrv-registrants", "127.0.0.1")
    with RawRemotingClient(broker.namesrv_address) as client:
        hijack = register(client, LOCAL_NAME)
        assert hijack.code == ResponseCode.SYSTEM_ERROR, hijack.remark
        assert "name of this name server's own broker" in hijack.remark
        assert register(client, "other", "127.0.0.1:2").code == ResponseCode.SUCCESS
        assert route_addresses(client) == [{"0": "127.0.0.1:2"},
                                           {"0": broker.remoting_address}]


def replayed(client: RawRemotingClient, captured: RemotingCommand, code: int
             ) -> RemotingCommand:
    """``captured`` sent again, byte for byte the same fields and body, under ``code``."""
    replay = client.request(code, None, captured.body)
    replay.ext_fields = dict(captured.ext_fields)
    return client.call_command(replay)


def official_signed(client: RawRemotingClient, code: int, fields: dict) -> RemotingCommand:
    """Signed as RocketMQ's own client hook signs: the fields and body, nothing else."""
    command = client.request(code, fields)
    command.ext_fields["AccessKey"] = "ops"
    command.ext_fields["Signature"] = sign(command.ext_fields, command.body, SECRETS["ops"])
    return command


def test_a_captured_admin_request_cannot_be_replayed_as_another_code(start_broker):
    broker = start_broker(acl=True)
    with RawRemotingClient(broker.remoting_address) as client:
        stats = sign_request(client.request(RC.GET_TOPIC_STATS_INFO, {"topic": "orders"}),
                             "ops", SECRETS["ops"])
        assert client.call_command(stats).code == ResponseCode.SUCCESS
        as_delete = replayed(client, stats, RC.DELETE_TOPIC_IN_BROKER)
        assert as_delete.code == ResponseCode.NO_PERMISSION, as_delete.remark
        assert "made for request code '202'" in as_delete.remark
        create = official_signed(client, RC.UPDATE_AND_CREATE_TOPIC, {
            "topic": "orders", "defaultTopic": "TBW102", "readQueueNums": 2,
            "writeQueueNums": 2, "perm": 6, "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0, "order": False})
        assert client.call_command(create).code == ResponseCode.SUCCESS
        create_as_delete = replayed(client, create, RC.DELETE_TOPIC_IN_BROKER)
        assert create_as_delete.code == ResponseCode.NO_PERMISSION, create_as_delete.remark
        assert "defaultTopic" in create_as_delete.remark
        still = signed_call(client, "ops", 351, {"topic": "orders"})  # GET_TOPIC_CONFIG
        assert still.code == ResponseCode.SUCCESS, still.remark
        delete = official_signed(client, RC.DELETE_TOPIC_IN_BROKER, {"topic": "scratch"})
        assert client.call_command(delete).code == ResponseCode.SUCCESS
