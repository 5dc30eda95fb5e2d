"""Records in a broker's answer decode to the store's ``MessageView`` (namespace stripped)."""

from __future__ import annotations

import zlib

import pytest

from network.remoting.client.naming import Namespace
from network.remoting.client.records import RecordsError, decode_records
from storage_engine.formats import MessageView, encode_properties
from storage_engine.formats.record import RecordFields, encode_host, encode_record


def record(topic: str, body: bytes, properties: dict[str, str], *, sys_flag: int = 0,
           stored_body: bytes | None = None, queue_offset: int = 0) -> bytes:
    return encode_record(RecordFields(
        topic=topic, body=body if stored_body is None else stored_body,
        properties=encode_properties(properties), queue_id=1, queue_offset=queue_offset,
        log_position=1000 + queue_offset, born_timestamp_ms=5, born_host=encode_host("10.0.0.1",
        4000), store_timestamp_ms=6, store_host=encode_host("10.0.0.2", 10911),
        sys_flag=sys_flag))


def test_records_decode_like_the_store_and_lose_the_namespace() -> None:
    plain = record("orders", b"a", {"UNIQ_KEY": "K1", "TAGS": "t"})
    retried = record("%RETRY%NS%billing", b"b", {"RETRY_TOPIC": "NS%orders", "UNIQ_KEY": "K2"},
                     queue_offset=1)
    [view] = decode_records(plain)
    reference = MessageView.decode(plain, 0)
    assert view.as_dict() == reference.as_dict()
    first, second = decode_records(plain + retried, Namespace("NS"))
    assert first.topic == "orders" and first.body == b"a"
    assert second.topic == "%RETRY%billing"
    assert second.properties["RETRY_TOPIC"] == "orders" and second.unique_key == "K2"
    assert second.queue_offset == 1 and second.log_position == 1001


def test_zlib_compressed_records_are_inflated() -> None:
    body = b"x" * 10_000
    [view] = decode_records(record("t", body, {}, sys_flag=0x1, stored_body=zlib.compress(body)))
    assert view.body == body and view.sys_flag & 0x701 == 0


def test_a_torn_or_foreign_answer_is_an_error_not_a_skip() -> None:
    whole = record("orders", b"a", {})
    with pytest.raises(RecordsError, match="record 1 at byte"):
        decode_records(whole + whole[:30])
    with pytest.raises(RecordsError, match="LZ4"):
        decode_records(record("t", b"a", {}, sys_flag=0x101))
