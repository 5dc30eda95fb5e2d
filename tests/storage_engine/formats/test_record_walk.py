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

import pytest
from hypothesis import HealthCheck, example, given, settings

from postbox.storage_engine.formats import engine, record_walk
from postbox.storage_engine.formats.record import (
    RecordKind,
    check_record,
    topic_and_properties,
)
from tests.support.outcomes import outcome
from tests.support.record_segments import (
    COMMON,
    CRC_DAMAGE,
    DAMAGE,
    MIDDLE,
    damage,
    mutated,
    records,
    segment,
)

native = pytest.importorskip(
    "postbox_native", reason="the native engine is not built (run `make` with cargo present)")

PREFIXES = (b"%DLQ%", b"%RETRY%")
MARK = b"REAL_TOPIC\x01"
SKIP = b"SCHEDULE_TOPIC_XXXX"
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


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



@pytest.mark.parametrize("how", DAMAGE)
@pytest.mark.parametrize("check_crc", [True, False])
def test_damage_ends_both_walks_at_the_same_record(how: str, check_crc: bool) -> None:
    buf, limit = damage(how)
    collected, stop, kind, _reason = assert_agree(buf, limit, check_crc)
    if check_crc or how not in CRC_DAMAGE:
        assert stop == sum(map(len, records(MIDDLE)[:2]))
        assert kind != RecordKind.MESSAGE and collected == [len(records(MIDDLE)[0])]


# ---------------------------------------------------------------------------- property


@FAST
@given(mutated())
@example((segment(["v2", "born v6"]), 300, True))
def test_mutated_segments_walk_alike(case: tuple[bytes, int, bool]) -> None:
    buf, limit, check_crc = case
    assert_agree(buf, limit, check_crc)
