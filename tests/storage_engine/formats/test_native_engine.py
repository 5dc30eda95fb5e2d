"""The native engine against the pure-Python reference: identical bytes, identical decoded
records, identical errors (type and message) for input outside the format.

Every test compares ``postbox_native`` with the reference modules directly, whichever engine
``POSTBOX_NATIVE`` chose for the process. Without the extension these tests skip (a failure
under ``CI=true``: CI builds it with ``make``); the tests of the switch itself always run.
"""

from __future__ import annotations

import mmap
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from postbox.storage_engine.formats import engine, hashing, properties, received_record, record
from postbox.storage_engine.formats.record import RecordFields, encode_record, uses_v2
from tests.support.outcomes import outcome

native = pytest.importorskip(
    "postbox_native", reason="the native engine is not built (run `make` with cargo present)")

INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
UNFIT = st.integers(-(1 << 70), 1 << 70)  # mostly outside any field: the reference's struct.error
HOST = st.sampled_from([8, 20, 8, 20, 5]).flatmap(lambda n: st.binary(min_size=n, max_size=n))
TEXT = st.text(max_size=40)  # any code point but surrogates: names, values, topics
PROPERTIES = st.dictionaries(TEXT, st.one_of(TEXT, st.none(), st.integers()), max_size=8)
CLEAN_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x01\x02"), max_size=40)
STORABLE = st.dictionaries(CLEAN_TEXT, CLEAN_TEXT, max_size=8)  # what a record can carry
MAX_BODY_BYTES = 4 * 1024 * 1024  # commit_log.max_message_size_bytes by default
UTF8_PIECES = st.sampled_from([  # framing, ASCII, stray and truncated sequences, a surrogate, emoji
    b"\x01", b"\x02", b"a", b"\xff", b"\xe2\x82", "é".encode(), b"\xed\xa0\x80",
    b"\xf0\x9f\x98\x80"])
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def same(reference_function, native_function, *args):
    expected = outcome(reference_function, *args)
    assert outcome(native_function, *args) == expected
    return expected


# ---------------------------------------------------------------------------- CRC, properties

@FAST
@given(st.binary(max_size=4096))
def test_masked_crc32_matches_on_every_buffer_type(data: bytes) -> None:
    for buffer in (data, bytearray(data), memoryview(data)):
        assert native.masked_crc32(buffer) == hashing.masked_crc32(buffer)


@FAST
@given(PROPERTIES)
@example({"KEYS": "a b", "TAGS": "t", "名前": "値 ✓"})
@example({"bad\x01name": "v"})
@example({"name": "bad\x02value"})
@example({"n": None, "empty": ""})
def test_encode_properties_matches(values: dict) -> None:
    same(properties.encode_properties, native.encode_properties, values)


@FAST
@given(st.one_of(st.binary(max_size=300), st.lists(UTF8_PIECES, max_size=40).map(b"".join)))
def test_decode_properties_matches_on_any_bytes(raw: bytes) -> None:
    for buffer in (raw, bytearray(raw), memoryview(raw)):
        assert native.decode_properties(buffer) == properties.decode_properties(buffer)
    assert list(native.decode_properties(raw)) == list(properties.decode_properties(raw))


@FAST
@given(st.text(max_size=200))
def test_decode_properties_matches_on_text(text: str) -> None:
    assert native.decode_properties(text) == properties.decode_properties(text)


# ---------------------------------------------------------------------------- encoding

@st.composite
def record_arguments(draw, numbers=INT32, longs=INT64) -> tuple:
    """The 16 positional arguments of ``encode_record_parts``."""
    topic = draw(st.text(min_size=1, max_size=150))
    topic_bytes = topic.encode("utf-8")
    is_v2 = draw(st.one_of(st.just(uses_v2(topic, topic_bytes)), st.booleans()))
    body = draw(st.binary(max_size=2048))
    props = draw(st.one_of(st.builds(properties.encode_properties, STORABLE),
                           st.sampled_from([b"x" * 32767, b"x" * 32768])))
    return (topic_bytes, is_v2, body, props, draw(numbers), draw(numbers), draw(longs),
            draw(longs), draw(numbers), draw(longs), draw(HOST), draw(longs), draw(HOST),
            draw(numbers), draw(longs), hashing.masked_crc32(body))


@FAST
@given(record_arguments())
def test_encode_record_parts_matches(arguments: tuple) -> None:
    same(record.encode_record_parts, native.encode_record_parts, *arguments)


@FAST
@given(record_arguments(numbers=st.one_of(INT32, UNFIT), longs=st.one_of(INT64, UNFIT)))
def test_encode_record_parts_rejects_what_the_reference_rejects(arguments: tuple) -> None:
    same(record.encode_record_parts, native.encode_record_parts, *arguments)


@pytest.mark.parametrize("body_length", [0, 1, MAX_BODY_BYTES])
def test_empty_and_max_size_bodies_encode_and_decode_alike(body_length: int) -> None:
    body = bytes(range(256)) * (body_length // 256) + b"\x07" * (body_length % 256)
    fields = RecordFields(topic="TopicTest", body=body, properties=b"TAGS\x01t\x02",
                          queue_id=3, queue_offset=9, log_position=1 << 33,
                          born_timestamp_ms=1, born_host=bytes(8), store_timestamp_ms=2,
                          store_host=bytes(20))
    arguments = (b"TopicTest", False, body, fields.properties, 3, 0, 9, 1 << 33, 0, 1,
                 bytes(8), 2, bytes(20), 0, 0, hashing.masked_crc32(body))
    encoded = native.encode_record_parts(*arguments)
    assert encoded == record.encode_record_parts(*arguments) == encode_record(fields)
    assert native.unpack_record(encoded, 0) == record.unpack_record(encoded, 0)
    assert native.unpack_record(encoded, 0)[14] == body


@FAST
@given(st.binary(max_size=400))
@example(b"")
@example(b"x" * 11)
@example(b"x" * 20)
def test_seal_property_crc_matches(data: bytes) -> None:
    record_bytes = data + record.PROPERTY_CRC_PLACEHOLDER
    assert native.seal_property_crc(record_bytes) == record.seal_property_crc(record_bytes)
    assert native.seal_property_crc(data) == record.seal_property_crc(data)


# ---------------------------------------------------------------------------- decoding

@st.composite
def stored_records(draw) -> list[bytes]:
    """Well-formed records as the store writes them (any hosts, v1 or v2)."""
    count = draw(st.integers(1, 4))
    records = []
    for _ in range(count):
        arguments = list(draw(record_arguments()))
        topic = arguments[0].decode("utf-8")
        arguments[1] = uses_v2(topic, arguments[0])
        arguments[3] = arguments[3][:3000]
        if len(arguments[10]) == 5:
            arguments[10] = bytes(8)
        if len(arguments[12]) == 5:
            arguments[12] = bytes(20)
        records.append(record.encode_record_parts(*arguments))
    return records


@FAST
@given(stored_records(), st.binary(max_size=16))
def test_unpack_record_matches_on_every_buffer_type(records: list[bytes], prefix: bytes) -> None:
    buf = prefix + b"".join(records)
    with mmap.mmap(-1, len(buf)) as mapped:
        mapped[:] = buf
        position = len(prefix)
        for one in records:
            expected = record.unpack_record(buf, position)
            for buffer in (buf, bytearray(buf), memoryview(buf), mapped):
                assert native.unpack_record(buffer, position) == expected
            position += len(one)


@st.composite
def damaged(draw) -> tuple[bytes, int]:
    """Records with bytes overwritten or cut off, and a position to read at."""
    buf = bytearray(b"".join(draw(stored_records())))
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(buf) - 1))
        buf[at] = draw(st.integers(0, 255))
    for at, value in draw(st.lists(st.tuples(st.sampled_from([0, 4, 36, 84, 87]),
                                             st.integers(-(1 << 31), (1 << 31) - 1)),
                                   max_size=2)):
        struct.pack_into(">i", buf, at, value)
    cut = draw(st.integers(0, len(buf)))
    return bytes(buf[:cut]), draw(st.integers(-2, max(cut, 0)))


@settings(max_examples=300, deadline=None)
@given(damaged())
def test_damaged_records_unpack_or_fail_alike(case: tuple[bytes, int]) -> None:
    buf, position = case
    same(record.unpack_record, native.unpack_record, buf, position)


@FAST
@given(stored_records())
def test_a_pull_body_decodes_alike(records: list[bytes]) -> None:
    body = b"".join(records)
    expected = received_record.unpack_received_records(body, 0, len(body))
    assert native.unpack_received_records(body, 0, len(body)) == expected
    assert [native.unpack_received_record(body, 0, len(body))] == expected[:1]
    assert expected == [record.unpack_record(body, sum(map(len, records[:i])))
                        for i in range(len(records))]


@settings(max_examples=300, deadline=None)
@given(damaged())
def test_a_damaged_pull_body_fails_with_the_same_error(case: tuple[bytes, int]) -> None:
    body, _position = case
    outcome_ = same(received_record.unpack_received_records, native.unpack_received_records,
                    body, 0, len(body))
    if outcome_[0] == "error":
        assert outcome_[1] is received_record.RecordLayoutError
    for position in range(0, len(body), 37):
        same(received_record.unpack_received_record, native.unpack_received_record, body,
             position, len(body))


# ---------------------------------------------------------------------------- the switch

def test_one_loads_the_extension_and_the_command_line_names_it() -> None:
    assert engine.load_native("1") is native
    env = {**os.environ, "POSTBOX_NATIVE": "1"}
    version = subprocess.run([str(Path(sys.executable).with_name("postbox")), "--version"],
                             env=env, capture_output=True, text=True, timeout=120, check=True)
    assert version.stdout.strip().endswith(f"(engine: native (postbox-native "
                                           f"{native.__version__}))")


def test_the_process_runs_the_engine_the_switch_chose() -> None:
    assert engine.ENGINE in (engine.NATIVE, engine.PYTHON)
    if engine.ENGINE == engine.NATIVE:
        assert engine.unpack_record is native.unpack_record
        assert f"native (postbox-native {native.__version__})" == engine.ENGINE_DESCRIPTION
