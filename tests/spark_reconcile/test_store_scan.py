"""The store scan (``store_decode.scan_segment``) with the native walk, with the reference walk
and as it was before the walk existed (``check_record`` and ``_interesting`` on every record):
the same rows in the same order, on segments a real ``MessageStore`` wrote (dead letters,
retries, delivered delayed messages, records the delay topic holds, IPv6 born hosts), on those
segments damaged, and on random mutations of one. Without the native extension these tests
skip (a failure under ``CI=true``)."""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postbox.spark_reconcile import store_decode
from postbox.spark_reconcile.store_decode import PROBLEM, StoreRow, scan_segment
from postbox.storage_engine import Message, MessageStore
from postbox.storage_engine.formats import record_walk
from postbox.storage_engine.formats.record import (
    RecordKind,
    check_record,
    encode_record_parts,
)
from postbox.storage_engine.formats.topic_names import DELAY_TOPIC
from tests.storage_engine.conftest import small_config

native = pytest.importorskip(
    "postbox_native", reason="the native engine is not built (run `make` with cargo present)")

SEGMENT_SIZE_BYTES = 16 * 1024
MESSAGES = 400


def build_store(root: Path, property_crc: bool) -> list[Path]:
    """Write a store of a few segments; return its segment files, in order."""
    config = small_config(root, segment_size_bytes=SEGMENT_SIZE_BYTES)
    config = replace(config, commit_log=replace(config.commit_log,
                                                append_property_crc=property_crc))
    with MessageStore.open(config) as store:
        for number in range(MESSAGES):
            key = f"ID{number:08d}"
            store.put_message(Message("orders", b"o" * 60, unique_key=key))
            if number % 7 == 0:
                store.put_message(Message("%DLQ%billing", b"d" * 40, unique_key=key, properties={
                    "RETRY_TOPIC": "orders", "DLQ_REASON": "declined",
                    "ORIGIN_MESSAGE_ID": f"7F000001{number:024X}", "RECONSUME_TIME": "16"},
                    born_host="[::1]:5000" if number % 2 else None))
            if number % 5 == 0:
                store.put_message(Message("%RETRY%billing", b"r", unique_key=key,
                                          properties={"RECONSUME_TIME": str(number % 4)}))
            if number % 9 == 0:
                real = {"REAL_TOPIC": "orders", "REAL_QID": "0"}
                store.put_message(Message(DELAY_TOPIC, b"s", unique_key=key,
                                          properties={**real, "DELAY": "3"}))
                store.put_message(Message("orders", b"s", unique_key=key, properties=real))
    return sorted((root / "commitlog").iterdir())


@pytest.fixture(scope="module", params=[True, False], ids=["property-crc", "body-crc-only"])
def segments(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
             ) -> list[Path]:
    return build_store(tmp_path_factory.mktemp("scan"), request.param)


def today(path: Path, check_crc: bool) -> list[StoreRow]:
    """The scan as it was: ``check_record`` and ``_interesting`` on every record."""
    buf = path.read_bytes()
    rows, position = [], 0
    while True:
        check = check_record(buf, position, len(buf), check_crc=check_crc)
        if check.kind == RecordKind.MESSAGE:
            row = store_decode._interesting(buf, position)
            rows += [] if row is None else [row]
            position += check.size
        elif check.kind == RecordKind.CORRUPT:
            return [*rows, StoreRow(PROBLEM, file=str(path), log_position=position, reason=(
                f"corrupt record: {check.reason}; the rest of this segment was not read"))]
        else:
            return rows


def scan_with(walk, path: Path, check_crc: bool) -> list[StoreRow]:
    saved = store_decode.walk_records
    store_decode.walk_records = walk
    try:
        return list(scan_segment(str(path), 0, check_crc))
    finally:
        store_decode.walk_records = saved


def outcome(scan, *args) -> list[StoreRow] | tuple:
    """The rows, or the error a scan ran into (a mutated header can send the reader past the
    end of the file)."""
    try:
        return scan(*args)
    except Exception as error:
        return type(error), str(error)


def assert_same_rows(path: Path, check_crc: bool = True) -> list[StoreRow] | tuple:
    rows = outcome(scan_with, native.walk_records, path, check_crc)
    assert rows == outcome(scan_with, record_walk.walk_records, path, check_crc)
    assert rows == outcome(today, path, check_crc)
    return rows


def record_starts(buf: bytes) -> list[int]:
    starts, position = [], 0
    while (check := check_record(buf, position, len(buf))).kind == RecordKind.MESSAGE:
        starts.append(position)
        position += check.size
    return starts


@pytest.mark.parametrize("check_crc", [True, False])
def test_segments_of_a_real_store_scan_alike(segments: list[Path], check_crc: bool) -> None:
    assert len(segments) >= 3
    kinds = set()
    for path in segments:
        buf = path.read_bytes()
        arguments = (buf, 0, len(buf), check_crc, store_decode._TOPIC_PREFIXES,
                     store_decode._REAL_TOPIC_MARK, store_decode._DELAY_TOPIC)
        expected_found, expected_stop = record_walk.walk_records(*arguments)
        found, stop = native.walk_records(*arguments)
        assert 0 < stop <= expected_stop
        assert found == [at for at in expected_found if at < stop]
        rows = assert_same_rows(path, check_crc)
        assert isinstance(rows, list)
        kinds |= {row.kind for row in rows}
    assert kinds == {store_decode.DLQ, store_decode.RETRY, store_decode.DELIVERED}


def v2_dead_letter() -> bytes:
    properties = b"UNIQ_KEY\x01V2\x02RETRY_TOPIC\x01orders\x02"
    return encode_record_parts(b"%DLQ%v2", True, b"v2", properties, 0, 0, 3, 0, 0, 1,
                               bytes(8), 2, bytes(8), 0, 0, native.masked_crc32(b"v2"))


def damage(buf: bytes, how: str) -> bytes:
    """``buf`` (records, then zeros: the active segment) damaged at its tenth record, or at
    its last."""
    starts = record_starts(buf)
    start, end = starts[10], starts[11]
    data = bytearray(buf)
    if how == "body byte":
        data[start + 89] ^= 0x40
    elif how == "property CRC digit":
        data[end - 2] = ord("0") + (data[end - 2] - ord("0") + 1) % 10
    elif how == "torn tail":
        last = starts[-1]
        data[last + 70:] = bytes(len(data) - last - 70)
    elif how == "truncated record":
        del data[starts[-1] + 50:]
    elif how == "bad magic":
        struct.pack_into(">i", data, start + 4, 0x0BADC0DE)
    elif how == "v2 in the middle":
        data[start:start] = v2_dead_letter()
        del data[len(buf):]
    return bytes(data)


@pytest.mark.parametrize("how", ["body byte", "property CRC digit", "torn tail",
                                 "truncated record", "bad magic", "v2 in the middle"])
@pytest.mark.parametrize("check_crc", [True, False])
def test_damaged_segments_scan_alike(segments: list[Path], tmp_path: Path, how: str,
                                     check_crc: bool) -> None:
    written = segments[0].read_bytes()
    last = record_starts(written)[-1]
    active = written[:last + check_record(written, last, len(written)).size] + bytes(4096)
    path = tmp_path / "00000000000000000000"
    path.write_bytes(damage(active, how))
    rows = assert_same_rows(path, check_crc)
    assert isinstance(rows, list)
    if how == "v2 in the middle":
        assert rows[-1].kind != PROBLEM and "%DLQ%v2" in {row.topic for row in rows}
    elif how in ("bad magic", "truncated record"):
        assert rows[-1].kind == PROBLEM


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mutations") / "00000000000000000000"


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_segments_scan_alike(segments: list[Path], scratch: Path, data) -> None:
    buf = bytearray(segments[0].read_bytes()[:4096])
    starts = record_starts(bytes(buf))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(buf) - 1))
        buf[at] = data.draw(st.integers(0, 255))
    for start, field, value in data.draw(st.lists(st.tuples(
            st.sampled_from(starts), st.sampled_from([0, 4, 8, 36, 84]),
            st.integers(-(1 << 31), (1 << 31) - 1)), max_size=2)):
        struct.pack_into(">i", buf, start + field, value)
    scratch.write_bytes(bytes(buf[:data.draw(st.integers(0, len(buf)))]))
    assert_same_rows(scratch, data.draw(st.booleans()))
