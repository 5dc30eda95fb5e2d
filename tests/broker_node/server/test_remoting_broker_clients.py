"""Clients of the remoting broker: heartbeats, the consumer list, NOTIFY_CONSUMER_IDS_CHANGED
to the other connections of a group (CLUSTERING only), consumers leaving when their
connection closes or they unregister, registered subscriptions used by pulls, queue locks."""

from __future__ import annotations

import json
import queue

from bench.remoting_raw import pull_fields, send_fields
from postbox.network.protocol.codes import RequestCode, ResponseCode
from tests.support.stored_records import decode_records

HEART_BEAT, CONSUMERS = RequestCode.HEART_BEAT, RequestCode.GET_CONSUMER_LIST_BY_GROUP
NOTIFY = RequestCode.NOTIFY_CONSUMER_IDS_CHANGED


def heartbeat(client_id: str, group: str = "G", *, topic: str = "T", tags: str = "*",
              model: str = "CLUSTERING", producer: str | None = None) -> bytes:
    consumer = {"groupName": group, "messageModel": model, "consumeType": "CONSUME_PASSIVELY",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
                "subscriptionDataSet": [
                    {"topic": topic, "subString": tags, "expressionType": "TAG",
                     "classFilterMode": False, "codeSet": [], "tagsSet": [], "subVersion": 1},
                    {"topic": f"%RETRY%{group}", "subString": "*", "expressionType": "TAG"}]}
    return json.dumps({"clientID": client_id, "consumerDataSet": [consumer],
                       "producerDataSet": [{"groupName": producer}] if producer else [],
                       "heartbeatFingerprint": 0, "withoutSub": False}).encode()


def members(client, group: str = "G") -> list[str]:
    answer = client.call(CONSUMERS, {"consumerGroup": group})
    if answer.code != 0:
        return []
    return json.loads(answer.body)["consumerIdList"]


def no_request(client, within_s: float = 0.3) -> bool:
    try:
        client.server_requests.get(timeout=within_s)
    except queue.Empty:
        return True
    return False


def test_heartbeat_registers_and_answers_v2_flags(connect, broker):
    client = connect()
    answer = client.call(HEART_BEAT, body=heartbeat("10.0.0.1@1", producer="PG"))
    assert answer.code == 0 and answer.version >= 413  # a 5.x broker
    assert answer.ext_fields["IS_SUPPORT_HEART_BEAT_V2"] == "true"
    assert answer.ext_fields["IS_SUB_CHANGE"] == "true"
    again = client.call(HEART_BEAT, body=heartbeat("10.0.0.1@1", producer="PG"))
    assert again.ext_fields["IS_SUB_CHANGE"] == "false"
    assert members(client) == ["10.0.0.1@1"]
    assert broker.topic_config("%RETRY%G") is not None  # created with the group


def test_empty_group_answers_system_error(connect):
    answer = connect().call(CONSUMERS, {"consumerGroup": "NOBODY"})
    assert answer.code == ResponseCode.SYSTEM_ERROR and "no consumer" in answer.remark


def test_membership_changes_notify_every_connection_of_the_group(connect):
    first, second = connect(), connect()
    assert first.call(HEART_BEAT, body=heartbeat("c1")).code == 0
    assert second.call(HEART_BEAT, body=heartbeat("c2")).code == 0
    notice = first.server_requests.get(timeout=5)
    assert notice.code == NOTIFY and notice.is_oneway
    assert notice.ext_fields == {"consumerGroup": "G"}
    assert second.server_requests.get(timeout=5).code == NOTIFY
    assert members(first) == ["c1", "c2"]
    while not first.server_requests.empty():  # c1's own join may have notified it too
        first.server_requests.get_nowait()
    second.close()  # its consumer leaves with its connection
    assert first.server_requests.get(timeout=5).code == NOTIFY
    assert members(first) == ["c1"]


def test_unregister_client_leaves_the_group(connect):
    first, second = connect(), connect()
    first.call(HEART_BEAT, body=heartbeat("c1"))
    second.call(HEART_BEAT, body=heartbeat("c2"))
    answer = second.call(RequestCode.UNREGISTER_CLIENT,
                         {"clientID": "c2", "consumerGroup": "G"})
    assert answer.code == 0 and members(first) == ["c1"]


def test_broadcasting_groups_are_not_notified(connect):
    first, second = connect(), connect()
    first.call(HEART_BEAT, body=heartbeat("b1", "BG", model="BROADCASTING"))
    second.call(HEART_BEAT, body=heartbeat("b2", "BG", model="BroadCasting"))
    assert members(first, "BG") == ["b1", "b2"]
    assert no_request(first)


def test_bad_heartbeats_are_refused_naming_the_problem(connect):
    client = connect()
    not_json = client.call(HEART_BEAT, body=b"{nope")
    assert not_json.code == ResponseCode.INVALID_PARAMETER and "heartbeat" in not_json.remark
    no_id = client.call(HEART_BEAT, body=b'{"consumerDataSet":[]}')
    assert no_id.code == ResponseCode.INVALID_PARAMETER and "clientID" in no_id.remark
    bad_model = client.call(HEART_BEAT, body=heartbeat("c", model="SOMETIMES"))
    assert bad_model.code == ResponseCode.INVALID_PARAMETER
    bad_group = client.call(HEART_BEAT, body=heartbeat("c", group="no spaces"))
    assert bad_group.code == ResponseCode.MESSAGE_ILLEGAL
    assert members(client, "G") == []


def test_pull_without_subscription_flag_uses_the_heartbeat_subscription(connect, broker):
    client = connect()
    for tag in ("a", "b", "a"):
        client.call(RequestCode.SEND_MESSAGE_V2,
                    send_fields("T", 0, properties={"TAGS": tag}), tag.encode())
    assert broker.store.wait_dispatched()
    client.call(HEART_BEAT, body=heartbeat("c1", tags="a"))
    answer = client.call(RequestCode.PULL_MESSAGE, pull_fields("G", "T", 0, 0, sys_flag=0))
    assert answer.code == 0
    assert [r.body for r in decode_records(answer.body)] == [b"a", b"a"]


def test_queue_locks_are_exclusive_until_released(connect):
    first, second = connect(), connect()

    def body(client_id: str, queues: list[int]) -> bytes:
        return json.dumps({"consumerGroup": "G", "clientId": client_id, "onlyThisBroker": False,
                           "mqSet": [{"topic": "T", "brokerName": "b", "queueId": q}
                                     for q in queues]}).encode()

    locked = first.call(RequestCode.LOCK_BATCH_MQ, body=body("c1", [0, 1]))
    assert locked.code == 0
    assert json.loads(locked.body) == {"lockOKMQSet": [
        {"brokerName": "b", "queueId": 0, "topic": "T"},
        {"brokerName": "b", "queueId": 1, "topic": "T"}]}
    taken = second.call(RequestCode.LOCK_BATCH_MQ, body=body("c2", [1, 2]))
    assert [mq["queueId"] for mq in json.loads(taken.body)["lockOKMQSet"]] == [2]
    assert first.call(RequestCode.UNLOCK_BATCH_MQ, body=body("c1", [1])).code == 0
    retaken = second.call(RequestCode.LOCK_BATCH_MQ, body=body("c2", [1]))
    assert [mq["queueId"] for mq in json.loads(retaken.body)["lockOKMQSet"]] == [1]
