"""``walk_records``: the native walk against the pure-Python reference.

The contract both share: every record before ``stop`` is a message and the positions returned
are exactly the matching ones among them; the reference stops only at a record that is not a
message, the native walk may stop earlier, at any record outside its fast path (v2, IPv6
hosts), which its caller then checks itself. So each test compares one call of each (the
native positions are the reference's below the native stop) and the whole walk a caller makes
(``walk_all``, the loop of ``spark_reconcile.store_decode``), which must agree exactly, errors
included. Without the extension these tests skip (a failure under ``CI=true``).
"""

from __future__ import annotations

import mmap
import struct

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from postbox.storage_engine.formats import engine, properties, record_walk
from postbox.storage_engine.formats.record import (
    PROPERTY_CRC_PLACEHOLDER,
    RecordKind,
    check_record,
    encode_blank_record,
    encode_record_parts,
    seal_property_crc,
    topic_and_properties,
)

native = pytest.importorskip(
    "postbox_native", reason="the native engine is not built (run `make` with cargo present)")

PREFIXES = (b"%DLQ%", b"%RETRY%")
MARK = b"REAL_TOPIC\x01"
SKIP = b"SCHEDULE_TOPIC_XXXX"
IPV4, IPV6 = bytes([10, 0, 0, 1, 0, 0, 0x13, 0x88]), bytes(range(16)) + b"\x00\x00\x13\x88"
DELIVERED = {"REAL_TOPIC": "orders", "REAL_QID": "1", "UNIQ_KEY": "U2"}
KINDS = {  # name -> (topic, properties, born host, store host, v2): a record of each kind
    "plain": ("orders", {"UNIQ_KEY": "U1", "TAGS": "t"}, IPV4, IPV4, False),
    "dlq": ("%DLQ%billing", {"UNIQ_KEY": "U3", "RETRY_TOPIC": "orders"}, IPV4, IPV4, False),
    "retry": ("%RETRY%billing", {"RECONSUME_TIME": "2"}, IPV4, IPV4, False),
    "delivered": ("orders", DELIVERED, IPV4, IPV4, False),
    "scheduled": ("SCHEDULE_TOPIC_XXXX", {**DELIVERED, "DELAY": "2"}, IPV4, IPV4, False),
    "no properties": ("orders", {}, IPV4, IPV4, False),
    "v2": ("%DLQ%v2", {"UNIQ_KEY": "U4"}, IPV4, IPV4, True),
    "born v6": ("%RETRY%v6", DELIVERED, IPV6, IPV4, False),
    "store v6": ("orders", DELIVERED, IPV4, IPV6, False),
}
COMMON = ("plain", "dlq", "retry", "delivered", "scheduled", "no properties")
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def encoded(kind: str, *, crc_tail: bool = True, position: int = 0, body: bytes = b"b" * 40
            ) -> bytes:
    """One record of ``kind``, with the property CRC tail as the store writes it or without."""
    topic, values, born, store, v2 = KINDS[kind]
    raw = properties.encode_properties(values)
    if crc_tail:
        raw += PROPERTY_CRC_PLACEHOLDER
    one = encode_record_parts(topic.encode(), v2, body, raw, 1, 0, 7, position, 0, 11, born, 22,
                              store, 0, 0, engine.masked_crc32(body))
    return seal_property_crc(one) if crc_tail else one


def records(kinds: list[str], crc_tails: bool | None = True) -> list[bytes]:
    """Records of ``kinds``, each at its position: with property CRC tails, without, or (None)
    every third one without."""
    found: list[bytes] = []
    for number, kind in enumerate(kinds):
        tail = number % 3 != 2 if crc_tails is None else crc_tails
        found.append(encoded(kind, crc_tail=tail, position=sum(map(len, found))))
    return found


def segment(kinds: list[str], crc_tails: bool | None = True, tail_bytes: int = 64) -> bytes:
    """Records of ``kinds`` back to back, then a blank record filling ``tail_bytes``."""
    return b"".join(records(kinds, crc_tails)) + encode_blank_record(tail_bytes) + bytes(
        tail_bytes - 8)


def walk(function, buf, position: int, limit: int, check_crc: bool = True):
    return function(buf, position, limit, check_crc, PREFIXES, MARK, SKIP)


def walk_all(function, buf, limit: int, check_crc: bool) -> tuple:
    """What a scan makes of ``buf`` with ``function`` as its walk: every position collected,
    where it ended and why (or the error it ran into)."""
    collected: list[int] = []
    position = 0
    try:
        while True:
            found, position = walk(function, buf, position, limit, check_crc)
            collected += found
            check = check_record(buf, position, limit, check_crc=check_crc)
            if check.kind != RecordKind.MESSAGE:
                return collected, position, check.kind, check.reason
            topic, raw = topic_and_properties(buf, position)
            if topic.startswith(PREFIXES) or (topic != SKIP and MARK in raw):
                collected.append(position)
            position += check.size
    except Exception as error:
        return collected, position, type(error), str(error)


def assert_agree(buf, limit: int, check_crc: bool = True) -> tuple:
    """One native call is a prefix of one reference call; whole walks are identical."""
    expected_found, expected_stop = walk(record_walk.walk_records, buf, 0, limit, check_crc)
    found, stop = walk(native.walk_records, buf, 0, limit, check_crc)
    assert stop <= expected_stop
    assert found == [at for at in expected_found if at < stop]
    whole = walk_all(record_walk.walk_records, buf, limit, check_crc)
    assert walk_all(native.walk_records, buf, limit, check_crc) == whole
    assert whole[:2] == (expected_found, expected_stop)
    return whole


# ---------------------------------------------------------------------------- clean segments

@pytest.mark.parametrize("crc_tails", [True, False, None])
@pytest.mark.parametrize("check_crc", [True, False])
def test_common_records_are_walked_in_one_native_call(crc_tails: bool | None,
                                                      check_crc: bool) -> None:
    buf = segment([*COMMON, *COMMON], crc_tails)
    found, stop = walk(native.walk_records, buf, 0, len(buf), check_crc)
    assert (found, stop) == walk(record_walk.walk_records, buf, 0, len(buf), check_crc)
    assert len(found) == 6  # dlq, retry and delivered of each half
    assert check_record(buf, stop, len(buf)).kind == RecordKind.BLANK
    assert_agree(buf, len(buf), check_crc)


def test_every_buffer_type_walks_alike() -> None:
    buf = segment([*COMMON, "v2", *COMMON])
    expected = walk(native.walk_records, buf, 0, len(buf))
    with mmap.mmap(-1, len(buf)) as mapped:
        mapped[:] = buf
        for buffer in (bytearray(buf), memoryview(buf), mapped):
            assert walk(native.walk_records, buffer, 0, len(buf)) == expected


@pytest.mark.parametrize("outside", ["v2", "born v6", "store v6"])
def test_a_record_outside_the_fast_path_stops_the_native_walk_there(outside: str) -> None:
    kinds = ["plain", "dlq", outside, "retry", "delivered"]
    first, second, *_rest = records(kinds)
    buf = segment(kinds)
    assert walk(native.walk_records, buf, 0, len(buf)) == ([len(first)], len(first + second))
    collected, _stop, kind, _reason = assert_agree(buf, len(buf))
    assert kind == RecordKind.BLANK and len(collected) == 4


def test_empty_prefix_and_mark_match_like_the_reference() -> None:
    buf = segment(list(COMMON))
    for prefixes, mark in (((b"",), MARK), ((), b""), ((), b"\x01"), ((b"%DLQ%billing",), b"z")):
        args = (buf, 0, len(buf), True, prefixes, mark, SKIP)
        assert native.walk_records(*args) == record_walk.walk_records(*args)


def outcome(function, *args):
    try:
        return "ok", function(*args)
    except Exception as error:
        return "error", type(error), str(error)


@pytest.mark.parametrize(("position", "limit", "prefixes", "mark"), [
    (0, 10_000, PREFIXES, MARK),  # past the end of the buffer: the reference reads it
    (-5, 500, PREFIXES, MARK), (True, 500, PREFIXES, MARK), (0, 500, [b"%DLQ%"], MARK),
    (0, 500, (bytearray(b"%DLQ%"),), MARK), (0, 500, PREFIXES, 82), (0, 500, b"%DLQ%", MARK),
    (300, 200, PREFIXES, MARK),
])
def test_unusual_arguments_give_what_the_reference_gives(position, limit, prefixes, mark) -> None:
    buf = segment(list(COMMON), tail_bytes=16)
    args = (buf, position, limit, True, prefixes, mark, SKIP)
    assert outcome(native.walk_records, *args) == outcome(record_walk.walk_records, *args)


def test_the_engine_offers_the_walk_of_the_engine_it_runs() -> None:
    expected = native.walk_records if engine.ENGINE == engine.NATIVE else (
        record_walk.walk_records)
    assert engine.walk_records is expected


# ---------------------------------------------------------------------------- damage

def damage(how: str) -> tuple[bytes, int]:
    """``segment(MIDDLE)`` damaged in its third record; returns it and its limit."""
    data = bytearray(segment(MIDDLE))
    start = sum(map(len, records(MIDDLE)[:2]))
    end = start + len(records(MIDDLE)[2])
    if how == "body byte":
        data[start + 90] ^= 0x01
    elif how == "property CRC digit":
        data[end - 5] = ord("0") + (data[end - 5] - ord("0") + 1) % 10
    elif how == "torn tail":
        data[end - 30:end] = bytes(30)
    elif how == "pair end":
        data[end - 1] = ord("x")
    elif how == "magic":
        struct.pack_into(">i", data, start + 4, 0x12345678)
    elif how == "size":
        struct.pack_into(">i", data, start, end - start + 1)
    elif how == "truncated":
        return bytes(data[:end - 10]), end - 10
    elif how == "blank in the middle":
        data[start:start + 8] = encode_blank_record(len(data) - start)
    return bytes(data), len(data)


MIDDLE = ["plain", "dlq", "delivered", "retry", "delivered"]
DAMAGE = ["body byte", "property CRC digit", "torn tail", "pair end", "magic", "size",
          "truncated", "blank in the middle"]
CRC_DAMAGE = ("body byte", "property CRC digit", "torn tail", "pair end")  # lengths still hold


@pytest.mark.parametrize("how", DAMAGE)
@pytest.mark.parametrize("check_crc", [True, False])
def test_damage_ends_both_walks_at_the_same_record(how: str, check_crc: bool) -> None:
    buf, limit = damage(how)
    collected, stop, kind, _reason = assert_agree(buf, limit, check_crc)
    if check_crc or how not in CRC_DAMAGE:
        assert stop == sum(map(len, records(MIDDLE)[:2]))
        assert kind != RecordKind.MESSAGE and collected == [len(records(MIDDLE)[0])]


# ---------------------------------------------------------------------------- property

@st.composite
def mutated(draw) -> tuple[bytes, int, bool]:
    """A small segment of any kinds of record with bytes and fields overwritten and a limit
    anywhere (mostly the end)."""
    kinds = draw(st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=6))
    crc_tails = draw(st.sampled_from([True, False, None]))
    buf = bytearray(segment(kinds, crc_tails, draw(st.sampled_from([8, 16, 100]))))
    for _ in range(draw(st.integers(0, 3))):
        buf[draw(st.integers(0, len(buf) - 1))] = draw(st.integers(0, 255))
    written = records(kinds, crc_tails)
    starts = [sum(map(len, written[:n])) for n in range(len(kinds))]
    for start, field, value in draw(st.lists(st.tuples(
            st.sampled_from(starts), st.sampled_from([0, 4, 8, 36, 84, 128]),
            st.integers(-(1 << 31), (1 << 31) - 1)), max_size=2)):
        if start + field + 4 <= len(buf):
            struct.pack_into(">i", buf, start + field, value)
    limit = draw(st.one_of(st.just(len(buf)), st.integers(0, len(buf))))
    return bytes(buf), limit, draw(st.booleans())


@FAST
@given(mutated())
@example((segment(["v2", "born v6"]), 300, True))
def test_mutated_segments_walk_alike(case: tuple[bytes, int, bool]) -> None:
    buf, limit, check_crc = case
    assert_agree(buf, limit, check_crc)
