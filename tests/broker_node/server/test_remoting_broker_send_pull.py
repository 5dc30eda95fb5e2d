"""Sends and pulls through the remoting server on a real store: V1, V2 and batch sends with
their response fields, pulls answering stored records byte for byte, tag filtering, offset
commits with a pull, the pull code mapping, long polling, and bad input."""

from __future__ import annotations

import struct
import time

from bench.remoting_raw import pull_fields, send_fields
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.storage_engine.formats import decode_offset_msg_id
from tests.support.stored_records import decode_records

SEND, SEND_V2, BATCH, PULL = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2,
                              RequestCode.SEND_BATCH_MESSAGE, RequestCode.PULL_MESSAGE)
UNIQ = "7F0000010F3A1B2C3D4E00A1B2C30001"


def batch_entry(body: bytes, properties: dict[str, str], flag: int = 0) -> bytes:
    text = "".join(f"{k}\x01{v}\x02" for k, v in properties.items()).encode()
    total = 20 + len(body) + 2 + len(text)
    return struct.pack(">iiiii", total, 0, 0, flag, len(body)) + body + struct.pack(
        ">h", len(text)) + text


def test_send_v2_answers_rocketmq_response_fields(connect, broker):
    client = connect()
    answer = client.call(SEND_V2, send_fields("T", 2, properties={
        "UNIQ_KEY": UNIQ, "TAGS": "TagA", "KEYS": "order-1", "WAIT": "true"}), b"hello")
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    fields = answer.ext_fields
    assert fields["queueId"] == "2" and fields["queueOffset"] == "0"
    assert fields["transactionId"] == UNIQ
    assert fields["MSG_REGION"] == "DefaultRegion" and fields["TRACE_ON"] == "true"
    _, position = decode_offset_msg_id(fields["msgId"])
    view = broker.store.read_message(position)
    assert view.body == b"hello" and view.tags == "TagA" and view.keys == ["order-1"]
    assert view.unique_key == UNIQ and view.queue_id == 2 and view.topic == "T"
    assert view.born_timestamp_ms == 1_700_000_000_000
    assert str(view.born_host).startswith("127.0.0.1:")


def test_send_v1_names_are_accepted(connect, broker):
    answer = connect().call(SEND, send_fields("T1", 1, v2=False,
                                              properties={"TAGS": "x"}), b"v1")
    assert answer.code == 0 and answer.ext_fields["queueId"] == "1"
    assert broker.store.wait_dispatched() and broker.store.max_offset("T1", 1) == 1


def test_batch_send_stores_each_entry_with_its_unique_key(connect, broker):
    keys = [f"{UNIQ[:-4]}{n:04X}" for n in range(3)]
    body = b"".join(batch_entry(f"m{n}".encode(), {"UNIQ_KEY": key, "TAGS": "b"}, flag=n)
                    for n, key in enumerate(keys))
    answer = connect().call(BATCH, send_fields("TB", 0, batch=True), body)
    assert answer.code == 0, answer.remark
    ids = answer.ext_fields["msgId"].split(",")
    assert len(ids) == 3 and answer.ext_fields["queueOffset"] == "0"
    views = [broker.store.read_message(decode_offset_msg_id(i)[1]) for i in ids]
    assert [v.body for v in views] == [b"m0", b"m1", b"m2"]
    assert [v.unique_key for v in views] == keys and [v.flag for v in views] == [0, 1, 2]
    assert [v.queue_offset for v in views] == [0, 1, 2]


def test_bad_batch_body_is_refused_and_stores_nothing(connect, broker):
    good = batch_entry(b"ok", {"UNIQ_KEY": UNIQ})
    answer = connect().call(BATCH, send_fields("TB", 0, batch=True), good + b"\0\0\0\x50junk")
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL and "batch body" in answer.remark
    assert broker.store.wait_dispatched() and broker.store.max_offset("TB", 0) == 0


def test_send_refusals_map_to_rocketmq_codes(connect, broker):
    client = connect()
    empty = client.call(SEND_V2, send_fields("T", 0), b"")
    assert empty.code == ResponseCode.MESSAGE_ILLEGAL and "empty" in empty.remark
    bad_topic = client.call(SEND_V2, send_fields("bad topic!", 0), b"x")
    assert bad_topic.code == ResponseCode.MESSAGE_ILLEGAL
    internal = client.call(SEND_V2, send_fields("SCHEDULE_TOPIC_XXXX", 0), b"x")
    assert internal.code == ResponseCode.NO_PERMISSION
    half = client.call(BATCH, send_fields("T", 0, batch=True, properties={"TRAN_MSG": "true"}),
                       batch_entry(b"x", {"UNIQ_KEY": UNIQ}))
    assert half.code == ResponseCode.MESSAGE_ILLEGAL and "transactional" in half.remark
    queue = client.call(SEND_V2, send_fields("T", 99), b"x")
    assert queue.code == ResponseCode.INVALID_PARAMETER
    missing = client.call(SEND_V2, {"a": "PG"}, b"x")
    assert missing.code == ResponseCode.SYSTEM_ERROR and "<b>" in missing.remark
    broker.create_topic("RO", 1, perm=4)
    read_only = client.call(SEND_V2, send_fields("RO", 0), b"x")
    assert read_only.code == ResponseCode.NO_PERMISSION
    assert broker.store.wait_dispatched() and broker.store.max_offset("T", 0) == 0


def test_pull_returns_stored_records_byte_for_byte(connect, broker, tmp_path):
    client = connect()
    for n in range(5):
        props = {"UNIQ_KEY": f"{UNIQ[:-4]}{n:04X}", "TAGS": "even" if n % 2 == 0 else "odd"}
        assert client.call(SEND_V2, send_fields("TP", 0, properties=props),
                           f"body-{n}".encode()).code == 0
    assert broker.store.wait_dispatched()
    answer = client.call(PULL, pull_fields("G", "TP", 0, 0))
    assert answer.code == 0 and answer.remark == "FOUND"
    assert answer.ext_fields["nextBeginOffset"] == "5"
    assert answer.ext_fields["minOffset"] == "0" and answer.ext_fields["maxOffset"] == "5"
    records = decode_records(answer.body)
    assert [r.body for r in records] == [f"body-{n}".encode() for n in range(5)]
    log = (tmp_path / "store" / "commitlog" / "00000000000000000000").read_bytes()
    at = 0
    for record in records:
        assert answer.body[at:at + record.total_size] == \
            log[record.physical_offset:record.physical_offset + record.total_size]
        at += record.total_size
    even = client.call(PULL, pull_fields("G", "TP", 0, 0, subscription="even"))
    assert [r.properties["TAGS"] for r in decode_records(even.body)] == ["even"] * 3


def test_pull_code_mapping_and_offsets_always_set(connect, broker):
    client = connect()
    assert client.call(SEND_V2, send_fields("TM", 0), b"x").code == 0
    assert broker.store.wait_dispatched()
    at_end = client.call(PULL, pull_fields("G", "TM", 0, 1))
    assert at_end.code == ResponseCode.PULL_NOT_FOUND
    assert at_end.ext_fields["nextBeginOffset"] == "1"
    beyond = client.call(PULL, pull_fields("G", "TM", 0, 50))
    assert beyond.code == ResponseCode.PULL_OFFSET_MOVED
    # as RocketMQ: a queue still starting at 0 resets an overflowing offset to 0
    assert beyond.ext_fields["nextBeginOffset"] == "0" and beyond.ext_fields["maxOffset"] == "1"
    broker.create_topic("EMPTY", 2)
    empty = client.call(PULL, pull_fields("G", "EMPTY", 1, 0))
    assert empty.code == ResponseCode.PULL_NOT_FOUND
    moved = client.call(PULL, pull_fields("G", "EMPTY", 1, 3))
    assert moved.code == ResponseCode.PULL_OFFSET_MOVED
    unknown = client.call(PULL, pull_fields("G", "NOPE", 0, 0))
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
    sql = pull_fields("G", "TM", 0, 0)
    sql["expressionType"] = "SQL92"
    refused = client.call(PULL, sql)
    assert refused.code == ResponseCode.SYSTEM_ERROR and "SQL92" in refused.remark
    unsubscribed = client.call(PULL, pull_fields("G", "TM", 0, 0, sys_flag=0))
    assert unsubscribed.code == ResponseCode.SUBSCRIPTION_NOT_EXIST


def test_pull_commits_the_offset_it_carries(connect, broker):
    client = connect()
    assert client.call(SEND_V2, send_fields("TC", 0), b"x").code == 0
    answer = client.call(PULL, pull_fields("G", "TC", 0, 0, sys_flag=0x5, commit_offset=1))
    assert answer.code in (0, 19)
    assert broker.query_offset("G", "TC", 0) == 1


def test_long_poll_is_answered_when_a_message_arrives(connect, broker, remoting):
    client, producer = connect(), connect()
    broker.create_topic("TL", 1)
    started = time.monotonic()
    waiting = client.start_call(client.request(
        PULL, pull_fields("G", "TL", 0, 0, sys_flag=0x6, suspend_ms=15_000)))
    deadline = time.monotonic() + 5
    while remoting.pulls.hold.parked_count == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert remoting.pulls.hold.parked_count == 1 and waiting.empty()
    assert producer.call(SEND_V2, send_fields("TL", 0), b"arrived").code == 0
    answer = waiting.get(timeout=5)
    assert answer.code == 0 and [r.body for r in decode_records(answer.body)] == [b"arrived"]
    assert time.monotonic() - started < 5
    assert remoting.pulls.hold.parked_count == 0


def test_long_poll_answers_not_found_after_the_suspend_time(connect, broker):
    client = connect()
    broker.create_topic("TW", 1)
    started = time.monotonic()
    answer = client.call(PULL, pull_fields("G", "TW", 0, 0, sys_flag=0x6, suspend_ms=300))
    elapsed = time.monotonic() - started
    assert answer.code == ResponseCode.PULL_NOT_FOUND
    assert 0.25 <= elapsed < 3


def test_parked_pulls_are_bounded(broker):
    from bench.remoting_raw import RawRemotingClient
    from postbox.broker_node.server.broker import BrokerRemotingServer

    broker.create_topic("TB2", 1)
    with BrokerRemotingServer(broker, max_parked_pulls=1) as server, \
            RawRemotingClient(server.address) as client:
        first = client.start_call(client.request(
            PULL, pull_fields("G", "TB2", 0, 0, sys_flag=0x6, suspend_ms=10_000)))
        deadline = time.monotonic() + 5
        while server.pulls.hold.parked_count == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        second = client.call(PULL, pull_fields("G", "TB2", 0, 0, sys_flag=0x6,
                                               suspend_ms=10_000))
        assert second.code == ResponseCode.PULL_NOT_FOUND and time.monotonic() - started < 2
        assert first.empty()


def test_pull_body_is_cut_at_max_msg_bytes(connect, broker):
    client = connect()
    for n in range(5):
        assert client.call(SEND_V2, send_fields("TX", 0), bytes([n]) * 1000).code == 0
    assert broker.store.wait_dispatched()
    fields = pull_fields("G", "TX", 0, 0)
    answer = client.call(PULL, {**fields, "maxMsgBytes": 2500})
    records = decode_records(answer.body)
    assert answer.code == 0 and len(records) == 2
    assert answer.ext_fields["nextBeginOffset"] == "2"
    tiny = client.call(PULL, {**fields, "maxMsgBytes": 1})  # at least one message
    assert len(decode_records(tiny.body)) == 1 and tiny.ext_fields["nextBeginOffset"] == "1"
