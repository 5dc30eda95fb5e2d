"""Prove the independent RocketMQ decoder against the golden vectors (shared/vectors)."""

from __future__ import annotations

import dataclasses
import shutil
import socket
import struct
from pathlib import Path

import pytest

from .property_vectors import PROPERTY_PARSE_CASES
from .rmq_decoder import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    VECTORS_DIR,
    IndexFile,
    Record,
    by_position,
    check_consume_queue,
    check_index_chains,
    index_key_hash,
    index_lookup,
    java_hash,
    masked_crc32,
    offset_msg_id,
    parse_properties,
    read_consume_queue,
    read_index_file,
    scan_commit_log,
)

JAVA_440_CL = "java-4.4.0-shaoxubao/unit_test_store/commitlog"
JAVA_420_STORE = "java-4.2.0-ericpan/unit_test_store"
RUST_STORE = "rust-0.9.0-rocketmq-rust/local-file"
RUST_INDEX = f"{RUST_STORE}/index/20260815011551705"
BODY = b"Once, there was a chance for me!"


@pytest.fixture
def vectors() -> Path:
    if not VECTORS_DIR.is_dir():
        pytest.skip(f"golden vectors not present at {VECTORS_DIR}")
    return VECTORS_DIR


# --------------------------------------------------------------------------- hashes (§1, §2)

# VECTORS.md §1 "Worked examples": (input, hash(s), index keyHash)
HASH_VECTORS = [
    ("", 0, 0),
    ("abc", 96354, 96354),
    ("TAG1", 2567159, 2567159),
    ("tag", 114586, 114586),
    ("rocketmq", -518197384, 518197384),
    ("order-123", -392797389, 392797389),
    ("user_12345", 1871841983, 1871841983),
    ("中文key", 2076960549, 2076960549),
    ("lite_topic", 2023630430, 2023630430),
    ("hello", 99162322, 99162322),
    ("test", 3556498, 3556498),
    ("polygenelubricants", -2147483648, 0),
    ("😀", 1772899, 1772899),
    ("V1UpgradeTopic#v1-upgrade-key", 1354830161, 1354830161),
    ("TopicTest#KEY1", -1656969516, 1656969516),
    ("abc#1551613204833", 1780079577, 1780079577),
    ("FooBar#Hello", -101609924, 101609924),
    ("TagA", 2598919, 2598919),
]


@pytest.mark.parametrize(("text", "hash_code", "key_hash"), HASH_VECTORS)
def test_java_hash_golden_values(text: str, hash_code: int, key_hash: int) -> None:
    assert java_hash(text) == hash_code
    assert index_key_hash(text) == key_hash


def test_java_hash_collision_and_slot() -> None:
    assert java_hash("Aa") == java_hash("BB") == 2112
    assert index_key_hash("V1UpgradeTopic#v1-upgrade-key") % 32 == 17
    assert index_key_hash("FooBar#Hello") % 5_000_000 == 1609924


@pytest.mark.parametrize(
    ("body", "crc"),
    [
        (b"a", 1756872259),
        (b"123456789", 1274296614),
        (BODY, 151131488),
        (b"v0.9.0-message-0", 0x666CBE46),
        (b"hello!q!", 1020379427),
        (b"", 0),
    ],
)
def test_masked_crc32(body: bytes, crc: int) -> None:
    assert masked_crc32(body) == crc


# VECTORS.md §7, MessageDecoderTest.testString2messageProperties
@pytest.mark.parametrize(
    ("text", "expected"),
    PROPERTY_PARSE_CASES,
)
def test_parse_properties(text: str, expected: dict[str, str]) -> None:
    assert parse_properties(text) == expected


# --------------------------------------------------------------------------- commit log (§3)


def test_java_440_commit_log(vectors: Path) -> None:
    records, problems = scan_commit_log(str(vectors / JAVA_440_CL), 8192)
    assert problems == []
    assert len(records) == 47
    assert [r.queue_offset for r in records] == list(range(47))
    assert [r.position for r in records] == [172 * i for i in range(47)]
    assert records[-1].position + records[-1].total_size == 8084  # blank record follows


def test_java_440_record_0_field_by_field(vectors: Path) -> None:
    records, _ = scan_commit_log(str(vectors / JAVA_440_CL), 8192)
    assert records[0] == Record(
        total_size=172,
        magic=MAGIC_V1,
        body_crc=151131488,
        queue_id=0,
        flag=0,
        queue_offset=0,
        physical_offset=0,
        sys_flag=0,
        born_timestamp=1551613204833,
        born_host="127.0.0.1:0",
        store_timestamp=1551613204834,
        store_host="10.1.30.38:8123",
        reconsume_times=0,
        prepared_tx_offset=0,
        body=BODY,
        topic="abc",
        properties={"0": "imagoodperson0", "KEYS": "1551613204833", "TAGS": "TAG1"},
        position=0,
    )
    assert offset_msg_id(records[0]) == "0A011E2600001FBB0000000000000000"
    assert records[1].physical_offset == 172 and records[1].queue_offset == 1


def test_java_420_commit_log_spans_segments(vectors: Path) -> None:
    notes: list[str] = []
    records, problems = scan_commit_log(
        str(vectors / JAVA_420_STORE / "commitlog"), 8192, notes=notes
    )
    assert problems == []
    assert len(records) == 179
    assert [r.queue_offset for r in records] == list(range(179))
    assert any("00000000000000032768" in n and "empty" in n for n in notes)
    firsts = {r.position: r for r in records if r.position % 8192 == 0}
    assert sorted(firsts) == [0, 8192, 16384, 24576]
    assert offset_msg_id(firsts[8192]) == "C0A8C77C00001FBB0000000000002000"
    assert offset_msg_id(firsts[24576]) == "C0A8C77C00001FBB0000000000006000"
    assert records[-1].position + records[-1].total_size == 31112  # live tail


def test_rust_commit_log(vectors: Path) -> None:
    records, problems = scan_commit_log(str(vectors / RUST_STORE / "commitlog"), 4096)
    assert problems == []
    assert [r.body for r in records] == [b"v0.9.0-message-0", b"v0.9.0-message-1"]
    assert [r.position for r in records] == [0, 141]
    assert all(r.topic == "V1UpgradeTopic" for r in records)
    assert records[0].properties == {"KEYS": "v1-upgrade-key"}
    assert records[0].born_host == records[0].store_host == "127.0.0.1:10911"


# --------------------------------------------------------------------------- consume queue (§4)


def test_java_420_consume_queue(vectors: Path) -> None:
    records, _ = scan_commit_log(str(vectors / JAVA_420_STORE / "commitlog"), 8192)
    units = read_consume_queue(str(vectors / JAVA_420_STORE / "consumequeue/abc/0"), 200)
    assert len(units) == 56
    assert units[0] == (0, 172, -(2**63))  # ext address Long.MIN_VALUE + 0
    assert units[47] == (8192, 172, -(2**63) + 960)  # skips the blank record
    assert all(tags <= -(2**31) - 1 for _, _, tags in units)
    assert check_consume_queue(units, by_position(records)) == []


def test_rust_consume_queue(vectors: Path) -> None:
    records, _ = scan_commit_log(str(vectors / RUST_STORE / "commitlog"), 4096)
    units = read_consume_queue(str(vectors / RUST_STORE / "consumequeue/V1UpgradeTopic/0"), 200)
    assert units == [(0, 141, 0), (141, 141, 0)]
    assert check_consume_queue(units, by_position(records)) == []


def test_consume_queue_checks_tags_size_and_offsets(vectors: Path) -> None:
    records, _ = scan_commit_log(str(vectors / JAVA_440_CL), 8192)
    positions = by_position(records)
    good = [(r.position, r.total_size, java_hash("TAG1")) for r in records]
    assert good[0] == (0, 172, 0x272BF7)  # VECTORS.md §4.2
    assert check_consume_queue(good, positions) == []
    bad = list(good)
    bad[1] = (172, 172, java_hash("TAG2"))
    bad[2] = (344, 171, 0x272BF7)
    bad[3] = (345, 172, 0x272BF7)
    problems = check_consume_queue(bad, positions)
    assert len(problems) == 3
    assert "tagsCode" in problems[0] and "size 171" in problems[1] and "345" in problems[2]
    shifted = check_consume_queue([(0, 0x7FFFFFFF, 0), *good[:2]], positions)
    assert len(shifted) == 2 and all("QUEUEOFFSET" in p for p in shifted)


def test_consume_queue_rejects_wrong_file_size(tmp_path: Path) -> None:
    (tmp_path / "00000000000000000000").write_bytes(bytes(100))
    with pytest.raises(ValueError, match="size 100"):
        read_consume_queue(str(tmp_path), 200)


# --------------------------------------------------------------------------- index file (§5)


def _rust_index(vectors: Path) -> IndexFile:
    return read_index_file(str(vectors / RUST_INDEX), 32, 128)


def test_rust_index_file(vectors: Path) -> None:
    idx = _rust_index(vectors)
    header = (
        idx.begin_timestamp,
        idx.end_timestamp,
        idx.begin_phy_offset,
        idx.end_phy_offset,
        idx.hash_slot_count,
        idx.index_count,
    )
    assert header == (0x1A00145E017, 0x1A00145E018, 0, 141, 1, 3)
    assert idx.slots[17] == 2 and sum(idx.slots) == 2
    assert idx.entries[0] == (0, 0, 0, 0)
    assert idx.entries[1] == (0x50C11151, 0, 0, 0)
    assert idx.entries[2] == (0x50C11151, 141, 0, 1)
    assert index_lookup(idx, "V1UpgradeTopic#v1-upgrade-key") == [141, 0]
    assert index_lookup(idx, "V1UpgradeTopic#other") == []
    records, _ = scan_commit_log(str(vectors / RUST_STORE / "commitlog"), 4096)
    assert check_index_chains(idx, by_position(records), 32) == []


def test_index_checks_detect_damage(vectors: Path) -> None:
    idx = _rust_index(vectors)
    records, _ = scan_commit_log(str(vectors / RUST_STORE / "commitlog"), 4096)
    positions = by_position(records)
    broken = dataclasses.replace(idx, hash_slot_count=2, end_phy_offset=0)
    problems = check_index_chains(broken, positions, 32)
    assert any("hash_slot_count" in p for p in problems)
    assert any("end_phy_offset" in p for p in problems)
    unlinked = dataclasses.replace(idx, entries=list(idx.entries))
    unlinked.entries[2] = (0x50C11151, 141, 0, 0)
    assert check_index_chains(unlinked, positions, 32) == ["entry 1: not reachable from any slot"]
    wrong_time = dataclasses.replace(idx, entries=list(idx.entries))
    wrong_time.entries[2] = (0x50C11151, 141, 5, 1)
    assert check_index_chains(wrong_time, positions, 32) == ["entry 2: time_diff 5, expected 0"]


def test_rust_index_file_wrong_geometry(vectors: Path) -> None:
    with pytest.raises(ValueError, match="expected"):
        read_index_file(str(vectors / RUST_INDEX), 64, 128)


# --------------------------------------------------------------------------- damage detection


def _copy_440(vectors: Path, tmp_path: Path) -> Path:
    """Copy the 4.4.0 segment to a temp dir (outside the project) so it can be damaged."""
    target = tmp_path / "commitlog"
    target.mkdir()
    shutil.copyfile(vectors / JAVA_440_CL / "00000000000000000000", target / "00000000000000000000")
    return target / "00000000000000000000"


def _patch(path: Path, offset: int, data: bytes) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset : offset + len(data)] = data
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize(
    ("offset", "data", "expected"),
    [
        (172 + 88, b"X", "record at 172: body CRC mismatch"),
        (172 + 28, struct.pack(">q", 999), "record at 172: PHYSICALOFFSET is 999"),
        (344, struct.pack(">i", 173), "record at 344: length mismatch"),
        (344 + 4, b"\x00\x00\x00\x00", "record at 344: bad magic"),
        (8084, struct.pack(">i", 100), "blank record at 8084: size 100"),
        (172 + 120, b"\xff", "record at 172: malformed: negative topic length"),
    ],
)
def test_scan_reports_damage(
    vectors: Path, tmp_path: Path, offset: int, data: bytes, expected: str
) -> None:
    segment = _copy_440(vectors, tmp_path)
    _patch(segment, offset, data)
    _, problems = scan_commit_log(str(segment.parent), 8192)
    assert problems and problems[0].startswith(expected)


def test_scan_reports_segment_problems(vectors: Path, tmp_path: Path) -> None:
    segment = _copy_440(vectors, tmp_path)
    (segment.parent / "00000000000000009000").write_bytes(bytes(100))
    records, problems = scan_commit_log(str(segment.parent), 8192)
    assert len(records) == 47
    assert any("expected start position 8192" in p for p in problems)
    assert any("size 100" in p for p in problems)


def test_scan_reports_missing_end_blank(vectors: Path, tmp_path: Path) -> None:
    segment = _copy_440(vectors, tmp_path)
    segment.write_bytes(segment.read_bytes()[: 8084 + 4])  # 4 bytes left after record 46
    _, problems = scan_commit_log(str(segment.parent), 8088)
    assert problems == [
        "record at 7912: leaves 4 bytes before the segment end (< END_FILE_MIN_BLANK_LENGTH 8)"
    ]


# --------------------------------------------------------------------------- v2 / IPv6 (§1.2)


def _build_record(
    position: int, topic: str, body: bytes, props: str, *, v2: bool, ipv6: bool
) -> bytes:
    """Encode one record straight from the spec table (used only for paths no vector covers)."""
    host = (
        socket.inet_pton(socket.AF_INET6, "2408:4004:180:8100:3faa:1dde:2b3f:898a")
        if ipv6
        else socket.inet_aton("10.0.0.1")
    ) + struct.pack(">i", 10911)
    topic_raw, props_raw = topic.encode(), props.encode()
    sys_flag = 0x30 if ipv6 else 0
    tail = (
        struct.pack(">i", len(body))
        + body
        + struct.pack(">h" if v2 else ">b", len(topic_raw))
        + topic_raw
        + struct.pack(">h", len(props_raw))
        + props_raw
    )
    middle = (
        struct.pack(
            ">Iiiiqqiq",
            MAGIC_V2 if v2 else MAGIC_V1,
            masked_crc32(body),
            3,
            0,
            7,
            position,
            sys_flag,
            1000,
        )
        + host
        + struct.pack(">q", 2000)
        + host
        + struct.pack(">iq", 0, 0)
    )
    return struct.pack(">i", 4 + len(middle) + len(tail)) + middle + tail


def test_v2_and_ipv6_records(tmp_path: Path) -> None:
    first = _build_record(0, "T" * 200, b"hello", "TAGS\x01x\x02", v2=True, ipv6=True)
    assert len(first) == 91 + 12 + 12 + 1 + 5 + 200 + 7
    second = _build_record(len(first), "t", b"", "", v2=False, ipv6=False)
    blank_at = len(first) + len(second)
    segment = bytearray(1024)
    segment[:blank_at] = first + second
    segment[blank_at : blank_at + 8] = struct.pack(">iI", 1024 - blank_at, BLANK_MAGIC)
    (tmp_path / "00000000000000000000").write_bytes(bytes(segment))
    records, problems = scan_commit_log(str(tmp_path), 1024)
    assert problems == []
    assert [r.magic for r in records] == [MAGIC_V2, MAGIC_V1]
    assert records[0].topic == "T" * 200 and records[0].properties == {"TAGS": "x"}
    assert records[0].store_host == "[2408:4004:180:8100:3faa:1dde:2b3f:898a]:10911"
    assert records[0].store_timestamp == 2000 and records[1].body == b""
    assert len(offset_msg_id(records[0])) == 56


def test_offset_msg_id_ipv6_vector() -> None:
    record = Record(
        0,
        MAGIC_V1,
        0,
        0,
        0,
        0,
        3232,
        0x20,
        0,
        "127.0.0.1:0",
        0,
        "[2408:4004:180:8100:3faa:1dde:2b3f:898a]:10911",
        0,
        0,
        b"",
        "t",
        {},
    )
    assert offset_msg_id(record) == "24084004018081003FAA1DDE2B3F898A00002A9F0000000000000CA0"
