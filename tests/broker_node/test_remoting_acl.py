"""ACL 1.0 on a real remoting server with a raw client: the signature (a vector computed by
Apache RocketMQ's own ``AclClientRPCHook``), tampering, unknown and missing keys, the old
clients' ``_UNIQUE_KEY_QUERY`` exclusion, and each right on each topic and group a request
names. The data-plane codes are served here by ``REACHED`` (a handler that only answers 0):
what is under test is the access check that runs before any handler."""

from __future__ import annotations

import json

import pytest

from bench.remoting_raw import RawRemotingClient
from postbox.broker_node.access import RemotingAccess
from postbox.broker_node.admin import AdvertisedTopics, BrokerAdmin
from postbox.broker_node.namesrv import BrokerIdentity, NameServer, RouteTable
from postbox.broker_node.server import RemotingServer
from postbox.network.protocol.acl_signature import sign, sign_request, signature_content, verify
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.network.protocol.wire import RemotingCommand
from postbox.storage_engine import Broker
from tests.support.small_store import small_store_config

RC = RequestCode
ACL = {"accounts": [
    {"access_key": "pub", "secret_key": "pub-secret", "topics": {"orders": "PUB"}},
    {"access_key": "pubstar", "secret_key": "ps-secret", "topics": {"*": "PUB"}},
    {"access_key": "sub", "secret_key": "sub-secret", "topics": {"orders": "SUB"},
     "groups": {"billing": "SUB"}},
    {"access_key": "subtopic", "secret_key": "st-secret", "topics": {"orders": "SUB"}},
    {"access_key": "creator", "secret_key": "c-secret", "topics": {"*": "PUB|SUB"},
     "create_topics": True},
    {"access_key": "ops", "secret_key": "ops-secret", "admin": True},
    {"access_key": "auditor", "secret_key": "a-secret", "topics": {"audit": "PUB|SUB"}},
]}
SECRETS = {a["access_key"]: a["secret_key"] for a in ACL["accounts"]}
DATA_CODES = (RC.SEND_MESSAGE, RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE, RC.PULL_MESSAGE,
              RC.QUERY_CONSUMER_OFFSET, RC.UPDATE_CONSUMER_OFFSET, RC.HEART_BEAT,
              RC.LOCK_BATCH_MQ, RC.CONSUMER_SEND_MSG_BACK, RC.VIEW_MESSAGE_BY_ID,
              RC.QUERY_MESSAGE, RC.GET_MAX_OFFSET, RC.GET_CONSUMER_LIST_BY_GROUP)


def test_signature_matches_apache_rocketmqs_client_hook():
    # Printed by AclClientRPCHook(SessionCredentials("orders-app", "s3cret")) of the lab's
    # rocketmq-client 5.3.3 for a PULL_MESSAGE header and the UTF-8 body "héllo 世界", and for
    # a HEART_BEAT without header fields or body.
    fields = {"AccessKey": "orders-app", "commitOffset": "0", "consumerGroup": "billing",
              "maxMsgNums": "32", "queueId": "1", "queueOffset": "42", "subVersion": "0",
              "subscription": "TagA || TagB", "suspendTimeoutMillis": "15000", "sysFlag": "2",
              "topic": "orders"}
    assert sign(fields, "héllo 世界".encode(), "s3cret") == "+5qc6YohqTLHNaXB3TThcifbny4="
    assert sign({"AccessKey": "orders-app"}, b"", "s3cret") == "aL5rtfd3Mbg9jVH4043tGYOaAYo="


def test_fields_are_ordered_by_utf16_code_units_like_java():
    # U+1F600 (surrogates 0xD83D 0xDE00) sorts before U+FF21 in Java's String order, after it
    # by code point: the values are concatenated in Java's order.
    fields = {"\uff21": "a", "\U0001f600": "b"}
    assert signature_content(fields) == b"ba"
    command = RemotingCommand(code=1, ext_fields=dict(fields), body=b"x")
    sign_request(command, "k", "s")
    assert verify(command, "s")
    command.ext_fields["\uff21"] = "c"
    assert not verify(command, "s")


@pytest.fixture
def servers(tmp_path):
    (tmp_path / "acl.json").write_text(json.dumps(ACL))
    with Broker.open(small_store_config(tmp_path / "store")) as broker:
        broker.create_topic("orders", 2)
        access = RemotingAccess.load(tmp_path / "acl.json",
                                     lambda topic: broker.topic_config(topic) is not None)
        reached: list[int] = []

        def REACHED(request, session):  # stands in for the data plane: only answers 0
            reached.append(request.code)
            return request.response(0)

        broker_server = RemotingServer(name="broker", access=access)
        BrokerAdmin(broker, "postbox-a").register_handlers(broker_server.handlers)
        for code in DATA_CODES:
            broker_server.handlers.register(code, REACHED)
        routes = RouteTable(broker.store.clock)
        routes.set_local(BrokerIdentity("c", "postbox-a", 0, "127.0.0.1:1"),
                         AdvertisedTopics(broker, "postbox-a"))
        namesrv = RemotingServer(name="namesrv", access=access)
        NameServer(routes).register_handlers(namesrv.handlers)
        broker_server.start()
        namesrv.start()
        try:
            yield broker_server, namesrv, broker, reached
        finally:
            broker_server.stop()
            namesrv.stop()


def _call(client, key, code, fields=None, body=b"", *, secret=None, tamper=None):
    command = client.request(code, fields, body)
    if key is not None:
        sign_request(command, key, secret or SECRETS[key])
    if tamper:
        tamper(command)
    return client.call_command(command)


def test_good_signature_passes_and_tampering_fails(servers):
    broker_server, _, _, reached = servers
    fields = {"consumerGroup": "billing", "topic": "orders", "queueId": 0}
    with RawRemotingClient(broker_server.address) as client:
        assert _call(client, "sub", RC.QUERY_CONSUMER_OFFSET, fields).code == 0
        bad = [
            _call(client, "sub", RC.QUERY_CONSUMER_OFFSET, fields,
                  tamper=lambda c: c.ext_fields.update(queueId="1")),
            _call(client, "sub", RC.HEART_BEAT, {}, b'{"clientID":"a"}',
                  tamper=lambda c: setattr(c, "body", b'{"clientID":"b"}')),
            _call(client, "sub", RC.QUERY_CONSUMER_OFFSET, fields, secret="wrong"),
            _call(client, "sub", RC.QUERY_CONSUMER_OFFSET, fields,
                  tamper=lambda c: c.ext_fields.update(AccessKey="ops")),
            _call(client, "nobody", RC.QUERY_CONSUMER_OFFSET, fields, secret="x"),
            _call(client, None, RC.QUERY_CONSUMER_OFFSET, fields),
            _call(client, "sub", RC.QUERY_CONSUMER_OFFSET, fields,
                  tamper=lambda c: c.ext_fields.pop("Signature")),
        ]
    assert [answer.code for answer in bad] == [ResponseCode.NO_PERMISSION] * len(bad)
    assert "bad signature" in bad[0].remark and "bad signature" in bad[1].remark
    assert "unknown access key 'nobody'" in bad[4].remark
    assert "not signed" in bad[5].remark
    assert reached == [RC.QUERY_CONSUMER_OFFSET], "refused requests never reach a handler"


def test_unique_key_query_flag_is_left_out_only_for_old_clients(servers):
    broker_server, _, _, _ = servers
    fields = {"topic": "orders", "key": "K1", "maxNum": 32, "beginTimestamp": 0,
              "endTimestamp": 1}

    def add_flag(command):
        command.ext_fields["_UNIQUE_KEY_QUERY"] = "true"  # added after signing

    with RawRemotingClient(broker_server.address, version=399) as old, \
            RawRemotingClient(broker_server.address, version=401) as new:
        assert _call(old, "sub", RC.QUERY_MESSAGE, fields, tamper=add_flag).code == 0
        assert _call(new, "sub", RC.QUERY_MESSAGE, fields, tamper=add_flag).code == 16
        assert _call(new, "sub", RC.QUERY_MESSAGE, {**fields, "_UNIQUE_KEY_QUERY": "true"}
                     ).code == 0


def test_oneway_refusal_answers_nothing_and_runs_nothing(servers):
    broker_server, _, _, reached = servers
    fields = {"consumerGroup": "billing", "topic": "orders", "queueId": 0, "commitOffset": 5}
    with RawRemotingClient(broker_server.address) as client:
        refused = client.request(RC.UPDATE_CONSUMER_OFFSET, fields, oneway=True)
        sign_request(refused, "pub", SECRETS["pub"])
        client.send_bytes(__import__("postbox.network.protocol.wire", fromlist=["encode"])
                          .encode(refused))
        assert _call(client, "sub", RC.GET_MAX_OFFSET, {"topic": "orders", "queueId": 0}
                     ).code == 0  # answered after the oneway: nothing came back for it
        assert client.server_requests.empty()
    assert reached == [RC.GET_MAX_OFFSET]


def _heartbeat(group, *topics):
    return json.dumps({"clientID": "c1", "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "subscriptionDataSet": [{"topic": t, "subString": "*"} for t in topics]}],
        "producerDataSet": [{"groupName": "PG"}]}).encode()


RIGHTS = [
    # (code, fields, body, allowed keys, refused keys, words the refusal names)
    (RC.SEND_MESSAGE_V2, {"a": "PG", "b": "orders"}, b"x", ["pub", "pubstar", "creator"],
     ["sub"], "PUB right on topic 'orders'"),
    (RC.SEND_MESSAGE, {"producerGroup": "PG", "topic": "fresh"}, b"x", ["creator"],
     ["pubstar"], "may not create or change topic 'fresh'"),
    (RC.SEND_MESSAGE_V2, {"a": "PG", "b": "%RETRY%billing"}, b"x", ["sub"], ["pub", "pubstar"],
     "SUB right on topic '%RETRY%billing'"),
    (RC.PULL_MESSAGE, {"consumerGroup": "billing", "topic": "orders"}, b"", ["sub"],
     ["pub"], "SUB right on topic 'orders'"),
    (RC.PULL_MESSAGE, {"consumerGroup": "billing", "topic": "orders"}, b"", ["sub"],
     ["subtopic"], "SUB right on group 'billing'"),
    (RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "billing", "topic": "orders"}, b"", ["sub"],
     ["subtopic"], "group 'billing'"),
    (RC.HEART_BEAT, {}, _heartbeat("billing", "orders", "%RETRY%billing"), ["sub"],
     ["subtopic", "pub"], "right on"),
    (RC.HEART_BEAT, {}, _heartbeat("billing", "audit"), [], ["sub"], "topic 'audit'"),
    (RC.LOCK_BATCH_MQ, {}, json.dumps({"consumerGroup": "billing", "clientId": "c1", "mqSet": [
        {"topic": "audit", "brokerName": "b", "queueId": 0}]}).encode(), ["ops"], ["sub"],
     "topic 'audit'"),
    (RC.CONSUMER_SEND_MSG_BACK, {"group": "billing", "offset": 1, "delayLevel": 0,
                                 "originTopic": "audit"}, b"", ["ops"], ["sub"],
     "topic 'audit'"),
    (RC.VIEW_MESSAGE_BY_ID, {"offset": 1}, b"", ["sub", "creator"], [], ""),  # record: handler
    (RC.VIEW_MESSAGE_BY_ID, {"offset": 1, "topic": "orders"}, b"", ["sub"], ["pub"], "SUB"),
    (RC.GET_MAX_OFFSET, {"topic": "orders", "queueId": 0}, b"", ["pub", "sub"], ["auditor"],
     "PUB or SUB right on topic 'orders'"),
    (RC.UPDATE_AND_CREATE_TOPIC, {"topic": "orders", "defaultTopic": "TBW102",
                                  "readQueueNums": 2, "writeQueueNums": 2, "perm": 6},
     b"", ["creator", "ops"], ["pub", "sub"], "may not create or change topic 'orders'"),
    (RC.DELETE_TOPIC_IN_BROKER, {"topic": "nothing-here"}, b"", ["ops"], ["creator"],
     "not an admin"),
    (RC.GET_ALL_TOPIC_CONFIG, {}, b"", ["ops"], ["creator"], "not an admin"),
    (RC.GET_CONSUME_STATS, {"consumerGroup": "billing"}, b"", ["sub"], ["pub"],
     "group 'billing'"),
    (RC.GET_BROKER_RUNTIME_INFO, {}, b"", ["pub", "sub"], [], ""),
    (351, {"topic": "orders"}, b"", ["pub", "sub"], ["auditor"], "topic 'orders'"),
    (RC.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "orders"}, b"", ["sub"], ["auditor"], "orders"),
    (9999, {}, b"", [], ["creator"], "not an admin"),
]


@pytest.mark.parametrize(("code", "fields", "body", "allowed", "refused", "words"), RIGHTS)
def test_each_right_is_enforced(servers, code, fields, body, allowed, refused, words):
    broker_server, _, broker, _ = servers
    with RawRemotingClient(broker_server.address) as client:
        for key in allowed:
            answer = _call(client, key, code, fields, body)
            assert answer.code != ResponseCode.NO_PERMISSION, (key, answer.remark)
        for key in refused:
            answer = _call(client, key, code, fields, body)
            assert answer.code == ResponseCode.NO_PERMISSION, key
            assert f"access key '{key}'" in answer.remark and words in answer.remark
    assert broker.topic_config("fresh") is None


def test_name_server_rights(servers):
    _, namesrv, _, _ = servers
    with RawRemotingClient(namesrv.address) as client:
        route = {"topic": "orders"}
        assert _call(client, "pub", RC.GET_ROUTEINFO_BY_TOPIC, route).code == 0
        assert _call(client, "sub", RC.GET_ROUTEINFO_BY_TOPIC, route).code == 0
        assert _call(client, "creator", RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}).code == 0
        denied = _call(client, "pub", RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
        assert denied.code == 16 and "TBW102" in denied.remark
        assert _call(client, "pub", RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "audit"}).code == 16
        assert _call(client, "pub", RC.GET_BROKER_CLUSTER_INFO).code == 0
        assert _call(client, None, RC.GET_BROKER_CLUSTER_INFO).code == 16
        register = {"brokerName": "evil", "brokerAddr": "6.6.6.6:1", "clusterName": "c",
                    "haServerAddr": "", "brokerId": 0}
        assert _call(client, "creator", RC.REGISTER_BROKER, register).code == 16
        assert _call(client, "creator", 100, {"namespace": "n", "key": "k", "value": "v"}
                     ).code == 16
        assert _call(client, "ops", 100, {"namespace": "n", "key": "k", "value": "v"}).code == 0
