"""Recovery's and dispatch's record loops and the Java hashes: native against the reference.

``scan_records`` (recovery's scan of the commit log), ``decode_run`` (dispatch's decoding, and
so recovery's re-dispatch) and ``java_string_hashcode``/``index_key_hash`` (tag codes and
key-index slots) must return exactly what the pure-Python reference returns, on intact,
damaged and randomly mutated segments and on unusual arguments, errors included. Without the
extension these tests skip (a failure under ``CI=true``).
"""

from __future__ import annotations

import mmap

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from postbox.storage_engine.formats import engine, hashing, record
from postbox.storage_engine.formats.record import (
    DispatchRecord,
    encode_record_parts,
)
from tests.support import record_segments as segments
from tests.support.outcomes import outcome

native = pytest.importorskip(
    "postbox_native", reason="the native engine is not built (run `make` with cargo present)")

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
COUNTS = [0, 1, 2, 3, 64, -1]
MIN_VALUE_TEXT = "polygenelubricants"  # its Java hashCode is Integer.MIN_VALUE


def assert_loops_agree(buf, limit: int) -> None:
    """Both loops, native and reference, from every record start and a few odd offsets."""
    starts = {0, 1, 7, limit, len(buf)}
    position = 0
    while True:
        stop, _last = record.scan_records(buf, position, limit, check_crc=False)
        if stop == position:
            break
        starts.update(range(position, stop))  # every offset, record starts or not
        position = stop
    for start in sorted(starts)[:400]:
        for check_crc in (True, False):
            assert outcome(native.scan_records, buf, start, limit, check_crc=check_crc) == \
                outcome(record.scan_records, buf, start, limit, check_crc=check_crc)
        for count in COUNTS:
            assert outcome(native.decode_run, buf, start, limit, count) == \
                outcome(record.decode_run, buf, start, limit, count)


# ---------------------------------------------------------------------------- the loops

@pytest.mark.parametrize("crc_tails", [True, False, None])
def test_common_records_scan_and_decode_alike(crc_tails: bool | None) -> None:
    kinds = list(segments.COMMON) * 3
    buf = segments.segment(kinds, crc_tails)
    stop, last = native.scan_records(buf, 0, len(buf))
    assert (stop, last) == record.scan_records(buf, 0, len(buf))
    assert stop == sum(map(len, segments.records(kinds, crc_tails))) and last > 0
    decoded = native.decode_run(buf, 0, len(buf), 1000)
    assert decoded == record.decode_run(buf, 0, len(buf), 1000)
    assert len(decoded) == len(kinds) and all(type(r) is DispatchRecord for r in decoded)
    assert decoded[0].tags == "t" and decoded[0].unique_key == "U1"


def test_every_buffer_type_scans_and_decodes_alike() -> None:
    buf = segments.segment(list(segments.KINDS) * 2)
    expected = (record.scan_records(buf, 0, len(buf)), record.decode_run(buf, 0, len(buf), 99))
    with mmap.mmap(-1, len(buf)) as mapped:
        mapped[:] = buf
        for buffer in (buf, bytearray(buf), memoryview(buf), mapped):
            assert (native.scan_records(buffer, 0, len(buf)),
                    native.decode_run(buffer, 0, len(buf), 99)) == expected


@pytest.mark.parametrize("kind", sorted(segments.KINDS))
def test_each_kind_of_record_scans_and_decodes_alike(kind: str) -> None:
    buf = segments.segment(["plain", kind, "plain"])
    assert_loops_agree(buf, len(buf))


def test_a_topic_that_is_not_utf8_ends_the_decoded_run_where_the_reference_ends_it() -> None:
    first = segments.records(["plain"])[0]
    body = b"x" * 10
    host = segments.IPV4
    strange = encode_record_parts(b"\xff\xfeorders", False, body, b"", 1, 0, 7, len(first), 0,
                                  11, host, 22, host, 0, 0, engine.masked_crc32(body))
    buf = first + strange + first
    assert len(native.decode_run(buf, 0, len(buf), 10)) == 1
    assert_loops_agree(buf, len(buf))


@pytest.mark.parametrize("how", segments.DAMAGE)
def test_damage_ends_both_loops_at_the_same_record(how: str) -> None:
    buf, limit = segments.damage(how)
    assert_loops_agree(buf, limit)
    if how != "blank in the middle":
        stop, _last = native.scan_records(buf, 0, limit)
        assert stop == sum(map(len, segments.records(segments.MIDDLE)[:2]))


@pytest.mark.parametrize(("offset", "limit", "count"), [
    (-1, 100, 5), (0, 10**9, 5), (0, -5, 5), (2**70, 100, 5), ("0", 100, 5), (0, 100, 2**80),
    (0, 100, "x"), (0, 100, None), (0.0, 100, 5)])
def test_unusual_arguments_give_what_the_reference_gives(offset, limit, count) -> None:
    buf = segments.segment(["plain", "dlq"])
    assert outcome(native.scan_records, buf, offset, limit) == \
        outcome(record.scan_records, buf, offset, limit)
    assert outcome(native.decode_run, buf, offset, limit, count) == \
        outcome(record.decode_run, buf, offset, limit, count)


@FAST
@given(segments.mutated())
@example((segments.segment(["v2", "born v6"]), 300, True))
def test_mutated_segments_scan_and_decode_alike(case: tuple[bytes, int, bool]) -> None:
    buf, limit, _check_crc = case
    assert_loops_agree(buf, limit)


# ---------------------------------------------------------------------------- the hashes

ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=60)  # surrogates too


@FAST
@given(ANY_TEXT)
@example(MIN_VALUE_TEXT)
@example("é" * 2000)
def test_java_hashes_match_on_any_text(text: str) -> None:
    assert outcome(native.java_string_hashcode, text) == \
        outcome(hashing.java_string_hashcode, text)
    assert outcome(native.index_key_hash, text) == outcome(hashing.index_key_hash, text)


def test_the_hashes_known_values_and_bad_arguments() -> None:
    assert native.java_string_hashcode(MIN_VALUE_TEXT) == -(1 << 31)
    assert native.index_key_hash(MIN_VALUE_TEXT) == 0
    assert native.java_string_hashcode("TagA") == hashing.java_string_hashcode("TagA")
    for bad in (b"bytes", None, 5):
        assert outcome(native.java_string_hashcode, bad) == \
            outcome(hashing.java_string_hashcode, bad)
        assert outcome(native.index_key_hash, bad) == outcome(hashing.index_key_hash, bad)


def test_the_engine_offers_the_loops_and_hashes_of_the_engine_it_runs() -> None:
    names = ("scan_records", "decode_run", "java_string_hashcode", "index_key_hash")
    for name in names:
        expected = getattr(native, name) if engine.ENGINE == engine.NATIVE else getattr(
            hashing if "hash" in name else record, name)
        assert getattr(engine, name) is expected
