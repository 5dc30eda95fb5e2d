"""Pull bodies and answers of the remoting client, against records a real store wrote.

The records come from an embedded broker, encoded back to the bytes the
commit log holds, exactly what a broker puts in a PULL_MESSAGE answer; the client's views of
them must equal the embedded broker's own, and each answer code/remark must map to the
``GetResult`` the embedded broker returns for the same state.
"""

from __future__ import annotations

import zlib

import pytest

from postbox.network.client.broker_errors import (
    RemotingBrokerBusyError,
    RemotingNoPermissionError,
)
from postbox.network.client.pull_answers import get_result, pull_request
from postbox.network.client.records import RecordDecodeError, decode_records
from postbox.network.protocol.codes import RequestCode
from postbox.network.protocol.wire import RemotingCommand
from postbox.storage_engine import Broker, GetStatus, Message, MessageView
from postbox.storage_engine.errors import BrokerUnavailableError, NoPermissionError
from postbox.storage_engine.formats import encode_record_parts, unpack_record
from postbox.storage_engine.formats.received_record import (
    RecordLayoutError,
    unpack_received_record,
)
from tests.storage_engine.conftest import small_config


def stored_record(view: MessageView, **changes) -> bytes:
    """The commit-log bytes of ``view`` (a pull body holds these back to back)."""
    values = {"topic": view.topic.encode(), "body": view.body, "sys_flag": view.sys_flag,
              "queue_id": view.queue_id, "properties": view.properties_bytes}
    values.update(changes)
    return encode_record_parts(
        values["topic"], view.is_v2, values["body"], values["properties"], values["queue_id"],
        view.flag, view.queue_offset, view.log_position, values["sys_flag"],
        view.born_timestamp_ms, view.raw_born_host, view.store_timestamp_ms,
        view.raw_store_host, view.reconsume_count, view.prepared_transaction_position,
        view.body_crc)


@pytest.fixture
def views(tmp_path) -> list[MessageView]:
    with Broker.open(small_config(tmp_path / "store", tiny=False)) as broker:
        for index in range(5):
            broker.send(Message("orders", f"body-{index}".encode(),
                                tags="paid" if index % 2 else "new", keys=[f"k{index}"],
                                properties={"n": str(index)}), queue_id=0)
        broker.store.wait_dispatched()
        return broker.pull("billing", "orders", 0, 0, 32).messages


def test_records_decode_to_the_embedded_views(views):
    body = b"".join(stored_record(view) for view in views)
    decoded = decode_records(body, 0)
    assert [view.as_dict() for view in decoded] == [view.as_dict() for view in views]


def test_the_queue_id_becomes_the_global_one(views):
    body = b"".join(stored_record(view) for view in views)
    decoded = decode_records(body, 7)
    assert {view.queue_id for view in decoded} == {7}
    assert [view.msg_id for view in decoded] == [view.msg_id for view in views]


def test_a_namespace_is_stripped_from_topic_and_retry_topic(views):
    view = views[0]
    properties = view.properties_bytes + b"RETRY_TOPIC\x01ns%orders\x02"
    body = stored_record(view, topic=b"%RETRY%ns%billing", properties=properties)
    (decoded,) = decode_records(body, 0, unwrap=lambda name: name.replace("ns%", ""))
    assert decoded.topic == "%RETRY%billing"
    assert decoded.properties["RETRY_TOPIC"] == "orders"


def test_a_zlib_body_is_inflated(views):
    view = views[0]
    packed = zlib.compress(b"x" * 5000, 5)
    body = stored_record(view, body=packed, sys_flag=view.sys_flag | 0x1)
    (decoded,) = decode_records(body, 0)
    assert decoded.body == b"x" * 5000
    assert decoded.sys_flag & 0x1 == 0


def signed_topic_length_record(view: MessageView) -> bytes:
    """``view``'s record with a 130-byte topic in a v1 record: its length byte 0x82 adds up only
    when read unsigned; Java reads it signed (-126), so the record is malformed."""
    record = stored_record(view)
    body_end = 88 + len(view.body)
    topic = b"t" * 130
    rest = record[body_end + 1 + record[body_end]:]  # properties length and properties
    size = body_end + 1 + len(topic) + len(rest)
    return size.to_bytes(4, "big") + record[4:body_end] + bytes([len(topic)]) + topic + rest


@pytest.mark.parametrize("damage", ["truncated", "size_too_big", "size_too_small", "magic",
                                    "body_length", "bad_zlib", "signed_topic_length"])
def test_a_damaged_body_is_refused(views, damage):
    record = bytearray(stored_record(views[0]))
    if damage == "truncated":
        body = bytes(record[:-3])
    elif damage == "size_too_big":
        record[0:4] = (len(record) + 10).to_bytes(4, "big")
        body = bytes(record)
    elif damage == "size_too_small":
        record[0:4] = (20).to_bytes(4, "big")
        body = bytes(record) + bytes(record)
    elif damage == "magic":
        record[4:8] = b"\x00\x00\x00\x01"
        body = bytes(record)
    elif damage == "body_length":
        record[84:88] = (len(views[0].body) + 1).to_bytes(4, "big")
        body = bytes(record)
    elif damage == "signed_topic_length":
        body = signed_topic_length_record(views[0])
    else:
        body = stored_record(views[0], sys_flag=views[0].sys_flag | 0x1)
    with pytest.raises(RecordDecodeError):
        decode_records(b"".join([stored_record(views[1]), body]), 0)


def test_received_records_use_the_store_decoder_and_its_signed_topic_length(views):
    """The client decodes with ``formats.received_record``: the same fields as the store's
    ``unpack_record`` for a good record, and the store's (Java's) signed v1 topic length."""
    record = stored_record(views[0])
    assert unpack_received_record(record, 0, len(record)) == unpack_record(record, 0)
    malformed = signed_topic_length_record(views[0])
    with pytest.raises(RecordLayoutError, match="negative topic length"):
        unpack_received_record(malformed, 0, len(malformed))


def answer(code: int, remark: str | None = None, body: bytes = b"", **fields) -> RemotingCommand:
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE)
    return request.response(code, {"nextBeginOffset": 5, "minOffset": 0, "maxOffset": 5,
                                   "suggestWhichBrokerId": 0, **fields}, body, remark)


def result_of(command: RemotingCommand, offset: int = 5, tags: str | None = None):
    return get_result(command, offset=offset, queue_id=0, tags=tags, address="b:1",
                      topic="orders")


@pytest.mark.parametrize(("code", "remark", "offset", "fields", "status"), [
    (19, "OFFSET_OVERFLOW_ONE", 5, {}, GetStatus.OFFSET_OVERFLOW_ONE),
    (19, None, 5, {}, GetStatus.OFFSET_OVERFLOW_ONE),
    (19, "NO_MESSAGE_IN_QUEUE", 0, {"maxOffset": 0, "nextBeginOffset": 0},
     GetStatus.NO_MESSAGE_IN_QUEUE),
    (20, "NO_MATCHED_MESSAGE", 2, {}, GetStatus.NO_MATCHED_MESSAGE),
    (20, "MESSAGE_WAS_REMOVING", 2, {}, GetStatus.MESSAGE_WAS_REMOVING),
    (21, "OFFSET_TOO_SMALL", 1, {"minOffset": 3, "nextBeginOffset": 3},
     GetStatus.OFFSET_TOO_SMALL),
    (21, "OFFSET_OVERFLOW_BADLY", 9, {}, GetStatus.OFFSET_OVERFLOW_BADLY),
    (21, "OFFSET_RESET", 1, {"minOffset": 3}, GetStatus.OFFSET_TOO_SMALL),
    (21, "NO_MATCHED_LOGIC_QUEUE", 4, {"maxOffset": 0, "nextBeginOffset": 0},
     GetStatus.NO_MATCHED_LOGIC_QUEUE),
    (17, "topic not exist", 4, {}, GetStatus.NO_MATCHED_LOGIC_QUEUE),
])
def test_answer_codes_map_to_the_embedded_statuses(code, remark, offset, fields, status):
    result = result_of(answer(code, remark, **fields), offset)
    assert result.status is status
    assert result.messages == []
    if code != 17:
        assert (result.next_offset, result.min_offset, result.max_offset) == (
            fields.get("nextBeginOffset", 5), fields.get("minOffset", 0),
            fields.get("maxOffset", 5))


def test_found_records_pass_the_exact_tag_check(views):
    body = b"".join(stored_record(view) for view in views)
    found = result_of(answer(0, "FOUND", body), 0, tags="paid")
    assert found.status is GetStatus.FOUND
    assert [view.tags for view in found.messages] == ["paid", "paid"]
    none = result_of(answer(0, "FOUND", body), 0, tags="refund")
    assert (none.status, none.next_offset) == (GetStatus.NO_MATCHED_MESSAGE, 5)


def test_refusals_are_the_store_errors():
    with pytest.raises(RemotingNoPermissionError) as refused:
        result_of(answer(16, "subscription group forbidden"))
    assert isinstance(refused.value, NoPermissionError) and refused.value.code == 16
    with pytest.raises(RemotingBrokerBusyError) as busy:
        result_of(answer(2, "[REJECTREQUEST]system busy"))
    assert isinstance(busy.value, BrokerUnavailableError) and busy.value.address == "b:1"


def test_the_pull_request_carries_the_subscription():
    request = pull_request("g", "t", "broker-a", 3, 10, 32, "a || b", 15_000, 99)
    fields = request.ext_fields
    assert fields["sysFlag"] == str(0x4 | 0x2)
    assert (fields["subscription"], fields["expressionType"]) == ("a || b", "TAG")
    assert (fields["queueId"], fields["queueOffset"], fields["bname"]) == ("3", "10", "broker-a")
    assert fields["suspendTimeoutMillis"] == "15000"
    plain = pull_request("g", "t", "broker-a", 3, 10, 32, None, 0, 99).ext_fields
    assert (plain["sysFlag"], plain["subscription"]) == (str(0x4), "*")
