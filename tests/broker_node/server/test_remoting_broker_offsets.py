"""Offsets, positions, queries, send-back and refusals through the remoting broker on a real
store: QUERY/UPDATE_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP,
GET_EARLIEST_MSG_STORETIME, VIEW_MESSAGE_BY_ID, QUERY_MESSAGE by key and by unique key,
CONSUMER_SEND_MSG_BACK to the retry and dead-letter topics, END_TRANSACTION refused, and a full
disk answered 2 SYSTEM_BUSY (a real tmpfs filled by sends)."""

from __future__ import annotations

import time

from bench.remoting_raw import RawRemotingClient, send_fields
from postbox.broker_node.server import AccessDeniedError
from postbox.broker_node.server.broker import BrokerRemotingServer
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.storage_engine import Broker
from postbox.storage_engine.formats import decode_offset_msg_id
from tests.storage_engine.conftest import small_config
from tests.support.stored_records import decode_records

UNIQ = "7F0000010F3A1B2C3D4E00A1B2C3"


def send(client, topic: str, body: bytes, n: int = 0, **properties: str) -> int:
    answer = client.call(RequestCode.SEND_MESSAGE_V2, send_fields(
        topic, 0, properties={"UNIQ_KEY": f"{UNIQ}{n:04X}", **properties}), body)
    assert answer.code == 0, answer.remark
    return decode_offset_msg_id(answer.ext_fields["msgId"])[1]


def test_consumer_offsets_query_and_update(connect, broker):
    client = connect()
    fields = {"consumerGroup": "G", "topic": "T", "queueId": 0}
    broker.create_topic("T", 1)
    assert client.call(RequestCode.QUERY_CONSUMER_OFFSET, fields).code == \
        ResponseCode.QUERY_NOT_FOUND
    send(client, "T", b"young")
    assert broker.store.wait_dispatched()
    young = client.call(RequestCode.QUERY_CONSUMER_OFFSET, fields)
    assert young.code == 0 and young.ext_fields["offset"] == "0"  # first message in memory
    strict = client.call(RequestCode.QUERY_CONSUMER_OFFSET, {**fields,
                                                            "setZeroIfNotFound": False})
    assert strict.code == ResponseCode.QUERY_NOT_FOUND
    client.oneway(RequestCode.UPDATE_CONSUMER_OFFSET, {**fields, "commitOffset": 1})
    deadline = time.monotonic() + 5
    while broker.query_offset("G", "T", 0) != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    answer = client.call(RequestCode.QUERY_CONSUMER_OFFSET, fields)
    assert answer.code == 0 and answer.ext_fields["offset"] == "1"
    bad = client.call(RequestCode.UPDATE_CONSUMER_OFFSET, {**fields, "commitOffset": -5})
    assert bad.code == ResponseCode.INVALID_PARAMETER and "commitOffset" in bad.remark


def test_queue_positions(connect, broker):
    client = connect()
    before_ms = int(time.time() * 1000) - 1
    for n in range(3):
        send(client, "T", b"x", n)
    assert broker.store.wait_dispatched()
    queue = {"topic": "T", "queueId": 0}
    assert client.call(RequestCode.GET_MAX_OFFSET, queue).ext_fields["offset"] == "3"
    assert client.call(RequestCode.GET_MIN_OFFSET, queue).ext_fields["offset"] == "0"
    found = client.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**queue,
                                                                 "timestamp": before_ms})
    assert found.code == 0 and found.ext_fields["offset"] == "0"
    earliest = client.call(RequestCode.GET_EARLIEST_MSG_STORETIME, queue)
    assert earliest.code == 0 and int(earliest.ext_fields["timestamp"]) >= before_ms
    unknown = client.call(RequestCode.GET_MAX_OFFSET, {"topic": "NONE", "queueId": 0})
    assert unknown.code == 0 and unknown.ext_fields["offset"] == "0"


def test_view_by_offset_and_query_by_keys(connect, broker):
    client = connect()
    position = send(client, "T", b"first", 1, KEYS="order-7")
    send(client, "T", b"second", 2, KEYS="order-8")
    assert broker.store.wait_dispatched()
    view = client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": position})
    assert view.code == 0 and [r.body for r in decode_records(view.body)] == [b"first"]
    missing = client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": 10**12})
    assert missing.code == ResponseCode.SYSTEM_ERROR
    query = {"topic": "T", "maxNum": 32, "beginTimestamp": 0, "endTimestamp": 2**62}
    by_key = client.call(RequestCode.QUERY_MESSAGE, {**query, "key": "order-8",
                                                     "_UNIQUE_KEY_QUERY": "false"})
    assert by_key.code == 0 and [r.body for r in decode_records(by_key.body)] == [b"second"]
    by_unique = client.call(RequestCode.QUERY_MESSAGE, {**query, "key": f"{UNIQ}0001",
                                                        "_UNIQUE_KEY_QUERY": "true"})
    assert [r.body for r in decode_records(by_unique.body)] == [b"first"]
    none = client.call(RequestCode.QUERY_MESSAGE, {**query, "key": "nothing"})
    assert none.code == ResponseCode.QUERY_NOT_FOUND


def test_send_back_goes_to_retry_then_dead_letter(connect, broker):
    client = connect()
    position = send(client, "T", b"failing", 3, TAGS="t")
    back = {"offset": position, "group": "G", "delayLevel": 0, "originMsgId": "x",
            "originTopic": "T", "maxReconsumeTimes": 16}
    answer = client.call(RequestCode.CONSUMER_SEND_MSG_BACK, back)
    assert answer.code == 0, answer.remark
    assert broker.topic_config("%RETRY%G") is not None
    assert broker.store.wait_dispatched()
    delayed = broker.store.get_message("g", "SCHEDULE_TOPIC_XXXX", 2, 0, 8)  # level 3
    assert [v.body for v in delayed.messages] == [b"failing"]
    assert delayed.messages[0].properties["REAL_TOPIC"] == "%RETRY%G"
    dead = client.call(RequestCode.CONSUMER_SEND_MSG_BACK, {**back, "delayLevel": -1})
    assert dead.code == 0 and broker.store.wait_dispatched()
    assert [v.body for v in broker.dead_letters("G")] == [b"failing"]
    nowhere = client.call(RequestCode.CONSUMER_SEND_MSG_BACK, {**back, "offset": 10**12})
    assert nowhere.code == ResponseCode.SYSTEM_ERROR and "offset" in nowhere.remark


def test_end_transaction_of_no_half_is_refused(connect):
    client = connect()
    answer = client.call(RequestCode.END_TRANSACTION, {
        "producerGroup": "PG", "tranStateTableOffset": 0, "commitLogOffset": 0,
        "commitOrRollback": 8, "msgId": "x"})
    assert answer.code == ResponseCode.SYSTEM_ERROR and "transaction" in answer.remark
    client.oneway(RequestCode.END_TRANSACTION, {"producerGroup": "PG"})
    assert client.call(RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": 0}).code == 0


def test_full_disk_answers_system_busy_and_loses_nothing(tmpfs):
    mount = tmpfs("16m")
    config = small_config(mount / "store", segment_size_bytes=256 * 1024,
                          units_per_file=300_000, slot_count_max=50_000,
                          entry_count_max=200_000)
    with Broker.open(config) as broker, BrokerRemotingServer(broker) as server, \
            RawRemotingClient(server.address) as client:
        accepted = 0
        for _ in range(5000):
            answer = client.call(RequestCode.SEND_MESSAGE_V2, send_fields("T", 0), bytes(8000))
            if answer.code != 0:
                break
            accepted += 1
        assert answer.code == ResponseCode.SYSTEM_BUSY, answer.remark
        assert "disk_space_warning_level_ratio" in answer.remark and accepted > 100
        assert broker.store.wait_dispatched()
        assert broker.store.max_offset("T", 0) == accepted  # every accepted send is stored
        reads = client.call(RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": 0})
        assert reads.code == 0 and reads.ext_fields["offset"] == str(accepted)


def test_records_reached_by_position_are_checked_by_the_access_hook(connect, remoting):
    class SecretTopic:  # an access hook: every request passes, but not topic SECRET
        def check(self, request, session):
            return None

        def check_topic(self, request, topic):
            if topic == "SECRET":
                raise AccessDeniedError(f"no right on {topic}")

    client = connect()
    secret = send(client, "SECRET", b"hidden", 5)
    public = send(client, "OPEN", b"shown", 6)
    remoting.server.access = SecretTopic()
    view = client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"topic": "OPEN", "offset": secret})
    assert view.code == ResponseCode.NO_PERMISSION and "SECRET" in view.remark
    assert client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": public}).code == 0
    back = client.call(RequestCode.CONSUMER_SEND_MSG_BACK, {
        "offset": secret, "group": "G", "delayLevel": 1, "originTopic": "OPEN"})
    assert back.code == ResponseCode.NO_PERMISSION
