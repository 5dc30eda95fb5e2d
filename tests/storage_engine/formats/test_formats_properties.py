"""Property tests (hypothesis) for ``storage_engine.formats``, plus the golden tables of VECTORS.md.

Round trips are checked against the engine's own decoders and, for records, hashes and
properties, against the independent decoder in ``tests/support/rmq_decoder.py``. Hypothesis
prints the failing example and its seed (``@reproduce_failure``) when a property breaks.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import itertools
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.storage_engine.formats import (
    MAGIC_V1,
    MAGIC_V2,
    PROPERTY_CRC_PLACEHOLDER,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    HostAddress,
    MessageView,
    RecordFields,
    RecordKind,
    TagFilter,
    UniqueKeyGenerator,
    check_record,
    decode_for_dispatch,
    decode_host,
    decode_offset_msg_id,
    decode_properties,
    decode_run,
    decode_unique_key,
    encode_host,
    encode_offset_msg_id,
    encode_properties,
    encode_record,
    index_key_hash,
    java_string_hashcode,
    masked_crc32,
    record_size,
    scan_records,
    seal_property_crc,
    tag_hash,
    unpack_record,
)
from postbox.storage_engine.formats.message_id import month_start_ms
from tests.support import rmq_decoder
from tests.support.property_vectors import PROPERTY_PARSE_CASES

TOPIC_ALPHABET = string.ascii_letters + string.digits + "_%|-"
INT32 = st.integers(-(2**31), 2**31 - 1)
UINT31 = st.integers(0, 2**31 - 1)
INT64_POSITIVE = st.integers(0, 2**63 - 1)
MONTH_MS_MAX = 31 * 24 * 3600 * 1000

topics = st.text(alphabet=TOPIC_ALPHABET, min_size=1, max_size=200)
ips = st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)).map(str)
hosts = st.tuples(ips, st.integers(0, 65535))
property_text = st.text(st.characters(exclude_characters="\x01\x02", exclude_categories=("Cs",)),
                        min_size=1, max_size=24)
property_maps = st.dictionaries(property_text, property_text, max_size=8)
sys_flags = st.sampled_from([0, 0x1, 0x2, 0x4, 0x8, 0xC, 0x3])  # compression/tags/tx bits


def same_host(decoded: HostAddress, ip: str, port: int) -> bool:
    return ipaddress.ip_address(decoded.ip) == ipaddress.ip_address(ip) and decoded.port == port


# ---- commit-log records --------------------------------------------------------------------

@st.composite
def record_fields(draw, *, log_position=INT64_POSITIVE) -> RecordFields:
    born_ip, born_port = draw(hosts)
    store_ip, store_port = draw(hosts)
    return RecordFields(
        topic=draw(topics), body=draw(st.binary(max_size=1500)),
        properties=encode_properties(draw(property_maps)), queue_id=draw(UINT31),
        queue_offset=draw(INT64_POSITIVE), log_position=draw(log_position),
        born_timestamp_ms=draw(INT64_POSITIVE), born_host=encode_host(born_ip, born_port),
        store_timestamp_ms=draw(INT64_POSITIVE), store_host=encode_host(store_ip, store_port),
        flag=draw(INT32), sys_flag=draw(sys_flags), reconsume_count=draw(UINT31),
        prepared_transaction_position=draw(INT64_POSITIVE))


@settings(deadline=None)
@given(fields=record_fields(), trailing=st.integers(0, 64))
def test_record_round_trip(fields: RecordFields, trailing: int):
    raw = encode_record(fields)
    buffer = raw + bytes(trailing)
    is_v2 = len(fields.topic) > 127
    born_v6, store_v6 = len(fields.born_host) == 20, len(fields.store_host) == 20

    check = check_record(buffer, 0, len(buffer))
    assert (check.kind, check.size) == (RecordKind.MESSAGE, len(raw))
    (size, magic, body_crc, queue_id, flag, queue_offset, log_position, sys_flag, born_ms,
     born_host, store_ms, store_host, reconsume, prepared, body, topic_bytes,
     properties) = unpack_record(buffer, 0)
    assert size == len(raw) == record_size(
        len(fields.body), len(topic_bytes), len(fields.properties), sys_flag=sys_flag,
        is_v2=is_v2)
    assert magic == (MAGIC_V2 if is_v2 else MAGIC_V1)
    assert body_crc == masked_crc32(fields.body)
    assert sys_flag & ~0x30 == fields.sys_flag
    assert bool(sys_flag & SYSFLAG_BORNHOST_V6) == born_v6
    assert bool(sys_flag & SYSFLAG_STOREHOST_V6) == store_v6
    assert (queue_id, flag, queue_offset, log_position) == (
        fields.queue_id, fields.flag, fields.queue_offset, fields.log_position)
    assert (born_ms, store_ms, reconsume, prepared) == (
        fields.born_timestamp_ms, fields.store_timestamp_ms, fields.reconsume_count,
        fields.prepared_transaction_position)
    assert (born_host, store_host) == (fields.born_host, fields.store_host)
    assert (body, topic_bytes.decode(), properties) == (
        fields.body, fields.topic, fields.properties)

    view = MessageView.decode(buffer, 0)
    assert view.topic == fields.topic and view.is_v2 == is_v2
    assert view.properties == decode_properties(fields.properties)
    assert view.body_crc_ok()
    assert view.msg_id == encode_offset_msg_id(fields.store_host, fields.log_position)


def sealed_record(fields: RecordFields) -> bytes:
    """``fields`` encoded with a record (property) CRC, as the store writes them."""
    return seal_property_crc(encode_record(dataclasses.replace(
        fields, properties=fields.properties + PROPERTY_CRC_PLACEHOLDER)))


@settings(deadline=None)
@given(fields=record_fields(), flip_at=st.integers(0, 10_000), sealed=st.booleans())
def test_a_flipped_body_byte_is_a_crc_mismatch(fields: RecordFields, flip_at: int,
                                               sealed: bool):
    """Named by the body CRC with or without a record CRC (which a body flip breaks too)."""
    raw = bytearray(sealed_record(fields) if sealed else encode_record(fields))
    if not fields.body:
        return
    body_start = 88 + (12 if len(fields.born_host) == 20 else 0) + (
        12 if len(fields.store_host) == 20 else 0)
    raw[body_start + flip_at % len(fields.body)] ^= 0x40
    check = check_record(raw, 0, len(raw))
    assert (check.kind, check.reason) == (RecordKind.CORRUPT, "body CRC mismatch")
    assert check_record(raw, 0, len(raw), check_crc=False).kind == RecordKind.MESSAGE


@settings(deadline=None, max_examples=60)
@given(fields=record_fields(log_position=st.just(0)))
def test_records_decode_with_the_independent_decoder(tmp_path_factory, fields: RecordFields):
    raw = encode_record(fields)
    directory = tmp_path_factory.mktemp("segment")
    segment_size = len(raw) + 8 + 24
    (directory / f"{0:020d}").write_bytes(raw + bytes(segment_size - len(raw)))

    records, problems = rmq_decoder.scan_commit_log(str(directory), segment_size)
    assert problems == []
    (record,) = records
    assert record.total_size == len(raw)
    assert record.magic == (rmq_decoder.MAGIC_V2 if len(fields.topic) > 127 else
                            rmq_decoder.MAGIC_V1)
    assert (record.topic, record.body, record.queue_id, record.queue_offset) == (
        fields.topic, fields.body, fields.queue_id, fields.queue_offset)
    assert record.properties == rmq_decoder.parse_properties(fields.properties.decode())
    assert (record.born_timestamp, record.store_timestamp) == (
        fields.born_timestamp_ms, fields.store_timestamp_ms)
    for text, raw_host in ((record.born_host, fields.born_host),
                           (record.store_host, fields.store_host)):
        ip, _, port = text.rpartition(":")
        assert same_host(decode_host(raw_host), ip.strip("[]"), int(port))
    assert rmq_decoder.offset_msg_id(record) == encode_offset_msg_id(fields.store_host, 0)


@settings(deadline=None)
@given(fields=record_fields(), flip_at=st.integers(0, 10_000))
def test_a_sealed_record_with_a_flipped_header_byte_fails_its_record_crc(fields: RecordFields,
                                                                         flip_at: int):
    """The record CRC covers what the body CRC does not: a flipped queue id, offset or time."""
    raw = bytearray(sealed_record(fields))
    raw[12 + flip_at % 24] ^= 0x01  # queue id, flag, queue offset, log position (bytes 12-35)
    check = check_record(raw, 0, len(raw))
    assert (check.kind, check.reason) == (RecordKind.CORRUPT, "record (property) CRC mismatch")
    assert check_record(raw, 0, len(raw), check_crc=False).kind == RecordKind.MESSAGE


def test_a_topic_that_is_not_utf8_is_corrupt_for_dispatch():
    """Dispatch reads without CRCs: a topic byte that breaks UTF-8 is corruption, not an
    exception out of the dispatch thread."""
    raw = bytearray(encode_record(RecordFields(
        topic="orders", body=b"x", properties=b"", queue_id=0, queue_offset=0,
        log_position=0, born_timestamp_ms=0, born_host=encode_host("127.0.0.1", 1),
        store_timestamp_ms=0, store_host=encode_host("127.0.0.1", 1))))
    topic_at = 88 + 1 + 1  # header, 1-byte body, topic length byte
    raw[topic_at] = 0xFF
    raw = bytes(raw)
    assert decode_for_dispatch(raw, 0, len(raw))[:2] == (RecordKind.CORRUPT, len(raw))
    assert decode_run(raw, 0, len(raw), 10) == []


def _walk_with_check_record(buffer: bytes) -> tuple[int, int, str]:
    """(stop, last valid, stop kind) walking one record at a time: the reference path."""
    offset, last = 0, -1
    while (check := check_record(buffer, offset, len(buffer))).kind == RecordKind.MESSAGE:
        offset, last = offset + check.size, offset
    return offset, last, check.kind


def _walk_with_scan_records(buffer: bytes) -> tuple[int, int, str]:
    """The same walk as recovery does it: the fast loop, then check_record where it stops."""
    offset, last = 0, -1
    while True:
        offset, run_last = scan_records(buffer, offset, len(buffer))
        last = max(last, run_last)
        check = check_record(buffer, offset, len(buffer))
        if check.kind != RecordKind.MESSAGE:
            return offset, last, check.kind
        offset, last = offset + check.size, offset


def _decode_all(buffer: bytes, fast: bool) -> list:
    records, offset = [], 0
    while True:
        run = decode_run(buffer, offset, len(buffer), 1_000) if fast else []
        if not run:
            kind, _size, record = decode_for_dispatch(buffer, offset, len(buffer))
            if kind != RecordKind.MESSAGE:
                return records
            run = [record]
        records.extend(run)
        offset += sum(record.size for record in run)


def _field_offsets(raw: bytes) -> dict[str, int]:
    """Offsets of the length and framing fields of one v1 record with IPv4 hosts."""
    body_end = 88 + int.from_bytes(raw[84:88], "big")
    props_at = body_end + 1 + raw[body_end]
    return {"size": 3, "magic": 7, "sys_flag": 39, "body_length": 87, "topic_length": body_end,
            "props_length": props_at + 1, "last": len(raw) - 1}


@settings(deadline=None, max_examples=200)
@given(runs=st.lists(record_fields(), min_size=1, max_size=6),
       damage=st.one_of(st.none(), st.tuples(
           st.integers(0, 5), st.sampled_from(["size", "magic", "sys_flag", "body_length",
                                               "topic_length", "props_length", "last", "any"]),
           st.integers(0, 20_000), st.integers(1, 255))),
       tail=st.integers(0, 64))
def test_the_fast_record_loops_agree_with_the_record_checks(runs, damage, tail):
    """scan_records/decode_run (the common v1 IPv4 layout, in one loop) stop and decode exactly
    where check_record/decode_for_dispatch do, over mixed layouts and a damaged byte (a length
    or framing field of one record, or anywhere)."""
    raws = [encode_record(fields) for fields in runs]
    buffer = bytearray(b"".join(raws) + bytes(tail))
    if damage is not None:
        index, field, anywhere, xor = damage
        index %= len(raws)
        start = sum(len(raw) for raw in raws[:index])
        is_common = raws[index][4:8] == MAGIC_V1.to_bytes(4, "big", signed=True) and not (
            raws[index][39] & 0x30)
        if field == "any" or not is_common:
            buffer[anywhere % len(buffer)] ^= xor
        else:
            buffer[start + _field_offsets(raws[index])[field]] ^= xor
    buffer = bytes(buffer)
    assert _walk_with_scan_records(buffer) == _walk_with_check_record(buffer)
    assert _decode_all(buffer, fast=True) == _decode_all(buffer, fast=False)
    if damage is None:
        assert len(_decode_all(buffer, fast=True)) == len(runs)


def test_v1_and_v2_boundary_is_127_characters():
    def magic(topic: str) -> int:
        return unpack_record(encode_record(RecordFields(
            topic=topic, body=b"", properties=b"", queue_id=0, queue_offset=0,
            log_position=0, born_timestamp_ms=0, born_host=encode_host("127.0.0.1", 1),
            store_timestamp_ms=0, store_host=encode_host("127.0.0.1", 1))), 0)[1]

    assert magic("t" * 127) == MAGIC_V1
    assert magic("t" * 128) == MAGIC_V2


# ---- hashes --------------------------------------------------------------------------------

@settings(deadline=None)
@given(text=st.text(max_size=1500))
def test_java_string_hashcode_matches_the_independent_hash(text: str):
    assert java_string_hashcode(text) == rmq_decoder.java_hash(text)
    assert index_key_hash(text) == rmq_decoder.index_key_hash(text)


def test_tag_filter_is_one_expression_for_the_store_and_the_client():
    """One parse for the broker's hash check of a unit and the exact check after it."""
    assert TagFilter.parse(None) is None and TagFilter.parse("  ") is None
    assert TagFilter.parse(" * ") is None
    tag_filter = TagFilter.parse(" TagA ||TAG1|| ||")
    assert tag_filter is not None and tag_filter.tags == {"TagA", "TAG1"}
    assert tag_filter.hashes == {2598919, 2567159} == {tag_hash("TagA"), tag_hash("TAG1")}
    assert tag_filter.accepts_code(2598919) and not tag_filter.accepts_code(tag_hash(None))
    assert tag_filter.accepts("TAG1") and not tag_filter.accepts(None)
    assert not tag_filter.accepts("TagA || TAG1")  # TAGS is matched whole, as its code is


def test_java_string_hashcode_long_and_edge_inputs():
    for text in ("x" * 1024, "x" * 1025, "é" * 5000, "😀" * 700, "polygenelubricants"):
        assert java_string_hashcode(text) == rmq_decoder.java_hash(text)
    assert java_string_hashcode("polygenelubricants") == -(2**31)
    assert index_key_hash("polygenelubricants") == 0


# ---- properties ----------------------------------------------------------------------------

@settings(deadline=None)
@given(properties=property_maps)
def test_properties_round_trip(properties: dict[str, str]):
    encoded = encode_properties(properties)
    assert decode_properties(encoded) == properties
    assert decode_properties(encoded.decode("utf-8")) == properties
    assert rmq_decoder.parse_properties(encoded.decode("utf-8")) == properties
    assert encoded.endswith(b"\x02") or not properties


@given(name=property_text, value=property_text, char=st.sampled_from(["\x01", "\x02"]),
       in_name=st.booleans())
def test_properties_with_framing_characters_are_refused(name, value, char, in_name):
    bad = {name + char: value} if in_name else {name: char + value}
    with pytest.raises(ValueError, match="U\\+0001 or U\\+0002"):
        encode_properties(bad)


def test_properties_with_a_none_value_are_skipped():
    assert decode_properties(encode_properties({"a": "1", "b": None, "c": "3"})) == {
        "a": "1", "c": "3"}


PROPERTY_TABLE = PROPERTY_PARSE_CASES  # VECTORS.md §7


@pytest.mark.parametrize(("text", "expected"), PROPERTY_TABLE,
                         ids=[repr(text) for text, _ in PROPERTY_TABLE])
def test_property_parsing_table(text: str, expected: dict[str, str]):
    assert decode_properties(text) == expected
    assert decode_properties(text.encode("utf-8")) == expected


# ---- message ids ---------------------------------------------------------------------------

@given(host=hosts, position=INT64_POSITIVE)
def test_offset_msg_id_round_trip(host: tuple[str, int], position: int):
    ip, port = host
    msg_id = encode_offset_msg_id(encode_host(ip, port), position)
    assert len(msg_id) == (56 if ":" in ip else 32)
    assert msg_id == msg_id.upper()
    decoded_host, decoded_position = decode_offset_msg_id(msg_id)
    assert same_host(decoded_host, ip, port)
    assert decoded_position == position
    assert decode_offset_msg_id(msg_id.lower())[1] == position


@given(host=hosts, position=st.integers(-(2**63), -1))
def test_offset_msg_id_with_a_negative_position_is_refused(host, position):
    msg_id = (encode_host(*host) + position.to_bytes(8, "big", signed=True)).hex().upper()
    with pytest.raises(ValueError, match="negative"):
        decode_offset_msg_id(msg_id)


# VECTORS.md §6.1
@pytest.mark.parametrize(("ip", "port", "position", "msg_id"), [
    ("127.0.0.1", 12, 1, "7F0000010000000C0000000000000001"),
    ("127.0.0.1", 8080, 12345, "7F00000100001F900000000000003039"),
    ("100.81.0.250", 10911, 311825178782, "645100FA00002A9F000000489A3AA09E"),
    ("10.154.0.38", 10911, 9001, "0A9A002600002A9F0000000000002329"),
    ("192.168.3.202", 10911, 201575, "C0A803CA00002A9F0000000000031367"),
    ("2408:4004:180:8100:3faa:1dde:2b3f:898a", 10911, 3232,
     "24084004018081003FAA1DDE2B3F898A00002A9F0000000000000CA0"),
])
def test_offset_msg_id_golden_vectors(ip, port, position, msg_id):
    assert encode_offset_msg_id(encode_host(ip, port), position) == msg_id
    host, decoded_position = decode_offset_msg_id(msg_id)
    assert same_host(host, ip, port) and decoded_position == position


# ---- UNIQ_KEY ------------------------------------------------------------------------------

@settings(deadline=None)
@given(ip=ips, pid=st.integers(0, 2**22), now_ms=st.integers(1_000_000_000_000,
                                                              4_000_000_000_000),
       count=st.integers(2, 40))
def test_unique_keys_decode_back_and_count_up(ip: str, pid: int, now_ms: int, count: int):
    generator = UniqueKeyGenerator(ip=ip, pid=pid, class_loader_hash=0x18B4AAC2)
    keys = [generator.next_key(now_ms) for _ in range(count)]
    parts = [decode_unique_key(key) for key in keys]

    assert all(len(key) == (56 if ":" in ip else 32) and key == key.upper() for key in keys)
    assert len(set(keys)) == count
    for part in parts:
        assert ipaddress.ip_address(part.ip) == ipaddress.ip_address(ip)
        assert part.pid == pid & 0xFFFF
        assert part.class_loader_hash == 0x18B4AAC2
        assert part.ms_since_month_start == now_ms - month_start_ms(now_ms)
        assert 0 <= part.ms_since_month_start < MONTH_MS_MAX
    counters = [part.counter for part in parts]
    assert all(b - a == 1 for a, b in itertools.pairwise(counters))


def test_unique_key_counter_wraps_at_16_bits():
    generator = UniqueKeyGenerator(ip="10.0.0.1", pid=1)
    now_ms = 1_700_000_000_000
    counters = [decode_unique_key(generator.next_key(now_ms)).counter for _ in range(65_538)]
    assert counters[:2] == [0, 1]
    assert counters[-3:] == [65_535, 0, 1]


# VECTORS.md §6.2
@pytest.mark.parametrize(("unique_key", "ip", "pid", "loader", "elapsed_ms", "counter"), [
    ("AC1415116D1418B4AAC217FE1B4E0000", "172.20.21.17", 27924, 0x18B4AAC2, 402529102, 0),
    ("AC14157E4F1C18B4AAC27EB1A0F30000", "172.20.21.126", 20252, 0x18B4AAC2, 2125570291, 0),
    ("0A3A54F7BF7D18B4AAC28A3FA2CF0000", "10.58.84.247", 49021, 0x18B4AAC2, 2319426255, 0),
    ("AC1FF54E81C418B4AAC24F92E1E00000", "172.31.245.78", 33220, 0x18B4AAC2, 1335026144, 0),
    ("7F000001C3F7006433A22BB8C8460002", "127.0.0.1", 50167, 0x006433A2, 733530182, 2),
])
def test_unique_key_golden_vectors(unique_key, ip, pid, loader, elapsed_ms, counter):
    parts = decode_unique_key(unique_key)
    assert (parts.ip, parts.pid, parts.class_loader_hash, parts.ms_since_month_start,
            parts.counter) == (ip, pid, loader, elapsed_ms, counter)
