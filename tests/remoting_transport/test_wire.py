"""The service's encoding: frames, stored records (byte-identical round trip, untrusted input
checked), receipts and configs, and storage errors rebuilt with their class."""

from __future__ import annotations

import grpc
import pytest

from network.grpc_v2 import codec
from network.grpc_v2.error_status import ERROR_METADATA_KEY, error_from_rpc, status_code
from network.grpc_v2.frame import pack, unpack
from storage_engine import CorruptionError, InvalidMessageError, Message, MessageView
from storage_engine.errors import LimitExceededError
from storage_engine.formats import RecordFields, encode_host, encode_record


def _view(topic: str = "orders", *, born_ip: str = "10.0.0.1", body: bytes = b"hello"
          ) -> MessageView:
    record = encode_record(RecordFields(
        topic=topic, body=body, properties=b"TAGS\x01paid\x02UNIQ_KEY\x01U1\x02",
        queue_id=3, queue_offset=7, log_position=4096, born_timestamp_ms=1, born_host=encode_host(
            born_ip, 5), store_timestamp_ms=2, store_host=encode_host("127.0.0.1", 10911),
        reconsume_count=2))
    return MessageView.decode(record, 0)


def test_frames_round_trip_and_reject_malformed_input():
    fields, payload = unpack(pack({"topic": "t", "n": 3, "ok": True}, b"\x00body"))
    assert (fields.text("topic"), fields.integer("n"), fields.flag("ok")) == ("t", 3, True)
    assert payload == b"\x00body"
    for bad in (b"", b"\x00\x00", b"\x00\x00\x00\x09{}", b"\x00\x00\x00\x02[]",
                b"\x00\x00\x00\x02{x"):
        with pytest.raises(InvalidMessageError):
            unpack(bad)
    fields, _ = unpack(pack({"n": True, "s": 1, "q": [["t", "0"]]}))
    for read in (lambda: fields.integer("n"), lambda: fields.text("s"),
                 lambda: fields.queue_list("q"), lambda: fields.text("missing")):
        with pytest.raises(InvalidMessageError):
            read()


@pytest.mark.parametrize(("topic", "born_ip"), [("orders", "10.0.0.1"),
                                                ("%RETRY%" + "g" * 200, "fe80::1")])
def test_records_travel_byte_identical(topic, born_ip):
    views = [_view(topic, born_ip=born_ip), _view(topic, born_ip=born_ip, body=b"")]
    payload = codec.encode_records(views)
    decoded = codec.decode_records(payload, 2)
    assert [v.as_dict() for v in decoded] == [v.as_dict() for v in views]
    assert codec.encode_records(decoded) == payload
    assert codec.decode_records(codec.encode_record(views[0]), 1, check_crc=True)[0].as_dict() \
        == views[0].as_dict()


def test_damaged_records_are_refused():
    record = bytearray(codec.encode_record(_view()))
    with pytest.raises(CorruptionError):
        codec.decode_records(bytes(record), 2)  # fewer records than announced
    with pytest.raises(CorruptionError):
        codec.decode_records(bytes(record) + b"\x00", 1)  # trailing bytes
    record[-8] ^= 0xFF  # inside the properties: the sizes still add up
    record[90] ^= 0xFF  # inside the body: the body CRC no longer matches
    with pytest.raises(CorruptionError):
        codec.decode_records(bytes(record), 1, check_crc=True)


def test_send_fields_round_trip():
    message = Message("orders", b"x", tags="paid", keys=["k1", "k2"], properties={"a": "b"},
                      unique_key="U", born_host="10.0.0.1:5")
    fields, body = unpack(pack(codec.message_header(message, 2, None), message.body))
    copy, queue_id, sharding_key = codec.message_from(fields, body)
    assert (copy.topic, copy.body, copy.tags, copy.keys, copy.properties, copy.unique_key,
            copy.born_host, queue_id, sharding_key) == (
        "orders", b"x", "paid", ["k1", "k2"], {"a": "b"}, "U", "10.0.0.1:5", 2, None)
    fields, body = unpack(pack({**codec.message_header(message, None, None),
                                "properties": {"a": 1}}, b""))
    with pytest.raises(InvalidMessageError):
        codec.message_from(fields, body)


class _FailedCall(grpc.RpcError):
    def __init__(self, code, metadata=()):
        self._code, self._metadata = code, metadata

    def code(self):
        return self._code

    def details(self):
        return "details"

    def trailing_metadata(self):
        return self._metadata


def test_errors_are_rebuilt_with_their_class_and_attributes():
    import json

    original = LimitExceededError("too big", setting="max_message_size_bytes", topic="t")
    assert status_code(original) is grpc.StatusCode.INVALID_ARGUMENT
    detail = {"class": "LimitExceededError", "message": str(original),
              "attributes": {"setting": original.setting, "topic": "t"}}
    rebuilt = error_from_rpc(_FailedCall(grpc.StatusCode.INVALID_ARGUMENT, (
        (ERROR_METADATA_KEY, json.dumps(detail).encode()),)), "h:1", "Send")
    assert type(rebuilt) is LimitExceededError
    assert (str(rebuilt), rebuilt.setting, rebuilt.topic) == ("too big",
                                                              "max_message_size_bytes", "t")
    unavailable = error_from_rpc(_FailedCall(grpc.StatusCode.UNAVAILABLE), "h:1", "Pull")
    assert type(unavailable).__name__ == "BrokerUnavailableError"
    assert unavailable.address == "h:1"
    denied = error_from_rpc(_FailedCall(grpc.StatusCode.UNAUTHENTICATED), "h:1", "Pull")
    assert type(denied).__name__ == "NoPermissionError"
