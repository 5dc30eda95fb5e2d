"""Independent decoder for Apache RocketMQ store files, used by tests to cross-check the engine.

This module restates the on-disk formats from the written specification only
(``shared/reference/rocketmq-store.md`` sections 0-4 and ``shared/vectors/VECTORS.md``).
It must never import from, or be derived from, ``storage_engine``: it is a second,
deliberately naive implementation, and tests check that the files the engine writes
decode cleanly here. It uses only the standard library.

Formats covered (all integers big-endian):

* CommitLog segments (section 1): v1 (magic 0xDAA320A7, 1-byte signed topic length) and
  v2 (magic 0xDAA320AB, 2-byte topic length) records, IPv4/IPv6 born and store hosts
  (SYSFLAG bits 0x10 / 0x20), masked CRC32 bodies, the 8-byte blank end-of-file record
  ``[int remaining][int 0xCBD43194]`` and the END_FILE_MIN_BLANK_LENGTH (8) rule.
* ConsumeQueue files (section 3): 20-byte units ``[long pos][int size][long tagsCode]``.
* IndexFile (section 4): 40-byte header, 4-byte slots, 20-byte entries chained newest first.

Checker functions return lists of human-readable problem strings (empty means clean)
instead of raising, so a test can show every problem at once.
"""

from __future__ import annotations

import os
import socket
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

VECTORS_DIR = Path(__file__).resolve().parents[3] / "shared" / "vectors"
"""Golden store files written by Java RocketMQ and rocketmq-rust (read in place, never copied)."""

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
BLANK_MAGIC = 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8
MAX_PROPERTIES_LENGTH = 32767
BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20

CQ_UNIT_SIZE = 20
CQ_FILLER_UNIT = (0, 0x7FFFFFFF, 0)
EXT_ADDRESS_MAX = -(2**31) - 1  # a tagsCode <= this is a ConsumeQueueExt address

INDEX_HEADER_SIZE = 40
INDEX_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


# --------------------------------------------------------------------------- hashing


def java_hash(s: str) -> int:
    """Return Java ``String.hashCode()`` of ``s``: ``h = 31*h + unit`` over UTF-16 code units.

    Characters outside the BMP count as two surrogate units. The result is a signed int32.
    """
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        unit = (data[i] << 8) | data[i + 1]
        h = (31 * h + unit) & 0xFFFFFFFF
    if h >= 2**31:
        h -= 2**32
    return h


def index_key_hash(key: str) -> int:
    """Return the IndexFile key hash: ``abs(java_hash(key))``, with Integer.MIN_VALUE -> 0."""
    h = java_hash(key)
    if h == INT32_MIN:
        return 0  # Java's Math.abs overflows and the store clamps the negative result to 0
    return abs(h)


def masked_crc32(data: bytes) -> int:
    """Return the CRC32 RocketMQ stores: ``zlib.crc32(data) & 0x7FFFFFFF``."""
    return zlib.crc32(data) & 0x7FFFFFFF


# --------------------------------------------------------------------------- commit log


@dataclass
class Record:
    """One decoded CommitLog message record (all integers as Java reads them, signed)."""

    total_size: int
    magic: int  # unsigned, e.g. 0xDAA320A7
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: str  # "ip:port", IPv6 as "[ip]:port"
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_tx_offset: int
    body: bytes
    topic: str
    properties: dict[str, str] = field(default_factory=dict)
    position: int = 0  # absolute commit log position where the record was found


class _Malformed(ValueError):
    """A record whose fields cannot be decoded."""


class _Cursor:
    """Sequential big-endian reader over ``buf`` from ``pos`` up to ``limit``."""

    def __init__(self, buf: bytes, pos: int, limit: int) -> None:
        self.buf, self.pos, self.limit = buf, pos, limit

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > self.limit:
            raise _Malformed(f"fields run past the segment end ({fmt})")
        values = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return values if len(values) > 1 else values[0]

    def raw(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.limit:
            raise _Malformed(f"a {n}-byte field runs past the segment end")
        out = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return out


def parse_properties(text: str) -> dict[str, str]:
    """Parse a properties string ``k\\x01v\\x02...`` (spec section 1.4).

    Segments are split on U+0002; each is split at its first U+0001. Pairs with an empty
    key or an empty value, and segments without U+0001, are dropped. Later duplicates win.
    """
    props: dict[str, str] = {}
    for segment in text.split("\x02"):
        key, sep, value = segment.partition("\x01")
        if sep and key and value:
            props[key] = value
    return props


def _read_host(cur: _Cursor, ipv6: bool) -> str:
    ip = cur.raw(16 if ipv6 else 4)
    port = cur.take(">i")
    if ipv6:
        return f"[{socket.inet_ntop(socket.AF_INET6, ip)}]:{port}"
    return f"{socket.inet_ntoa(ip)}:{port}"


def _read_record_fields(cur: _Cursor) -> tuple[Record, int]:
    """Read one record's fields at the cursor; return it and its raw properties length."""
    head = cur.take(">iIiiiqqiq")  # TOTALSIZE .. BORNTIMESTAMP
    magic, sys_flag = head[1], head[7]
    born = _read_host(cur, bool(sys_flag & BORNHOST_V6_FLAG))
    store_ts = cur.take(">q")
    store = _read_host(cur, bool(sys_flag & STOREHOST_V6_FLAG))
    reconsume, prepared, body_len = cur.take(">iqi")
    body = cur.raw(body_len)
    topic_len = cur.take(">h" if magic == MAGIC_V2 else ">b")  # v1: signed byte
    if topic_len < 0:
        raise _Malformed(f"negative topic length {topic_len}")
    topic = cur.raw(topic_len).decode("utf-8")
    props_len = cur.take(">H")
    props = parse_properties(cur.raw(props_len).decode("utf-8"))
    record = Record(*head, born, store_ts, store, reconsume, prepared, body, topic, props)
    return record, props_len


def _decode_record(data: bytes, start: int, seg_base: int, problems: list[str]) -> Record | None:
    """Decode and check the record at ``data[start:]``; None if it is undecodable."""
    where = f"record at {seg_base + start}"
    cur = _Cursor(data, start, len(data))
    try:
        record, props_len = _read_record_fields(cur)
    except (_Malformed, UnicodeDecodeError) as exc:
        problems.append(f"{where}: malformed: {exc}")
        return None
    record.position = seg_base + start
    if props_len > MAX_PROPERTIES_LENGTH:
        problems.append(f"{where}: properties length {props_len} > {MAX_PROPERTIES_LENGTH}")
    if cur.pos - start != record.total_size:
        problems.append(
            f"{where}: length mismatch: fields add up to {cur.pos - start}, "
            f"TOTALSIZE is {record.total_size}"
        )
    crc = masked_crc32(record.body)
    if crc != record.body_crc:
        problems.append(f"{where}: body CRC mismatch: stored {record.body_crc}, computed {crc}")
    if record.physical_offset != record.position:
        problems.append(f"{where}: PHYSICALOFFSET is {record.physical_offset}")
    _check_property_crc(data, start, record, where, problems)
    return record


def _check_property_crc(data: bytes, start: int, record: Record, where: str,
                        problems: list[str]) -> None:
    """Spec section 1.4, optional property CRC: the last 20 property bytes are
    ``__CRC32#`` U+0001 + 10 digits (least significant first) + U+0002, a masked CRC32 of the
    record before them. Verified, then removed from the decoded properties."""
    digits = record.properties.pop("__CRC32#", None)
    if digits is None:
        return
    end = start + record.total_size
    if data[end - 20:end - 11] != b"__CRC32#\x01" or data[end - 1:end] != b"\x02":
        problems.append(f"{where}: __CRC32# property is not the last 20 bytes")
        return
    stored = int(digits[::-1])
    computed = masked_crc32(data[start:end - 20])
    if stored != computed:
        problems.append(f"{where}: property CRC mismatch: stored {stored}, computed {computed}")


def _scan_segment(data: bytes, base: int, records: list[Record], problems: list[str]) -> str:
    """Decode records of one segment; return "next" (go on), "end" (zero TOTALSIZE) or "stop"."""
    pos = 0
    while True:
        remaining = len(data) - pos
        if remaining < END_FILE_MIN_BLANK_LENGTH:
            return "next"  # the record that left this gap was already reported
        total, magic = struct.unpack_from(">iI", data, pos)
        if total == 0:
            return "end"
        if magic == BLANK_MAGIC:
            if total != remaining:
                problems.append(
                    f"blank record at {base + pos}: size {total}, "
                    f"but {remaining} bytes remain in the segment"
                )
            return "next"
        if magic not in (MAGIC_V1, MAGIC_V2):
            problems.append(f"record at {base + pos}: bad magic 0x{magic:08X}")
            return "stop"
        if total < 0 or total > remaining:
            problems.append(
                f"record at {base + pos}: TOTALSIZE {total} does not fit in the "
                f"{remaining} bytes left in the segment"
            )
            return "stop"
        record = _decode_record(data, pos, base, problems)
        if record is not None:
            records.append(record)
        if remaining - total < END_FILE_MIN_BLANK_LENGTH:
            problems.append(
                f"record at {base + pos}: leaves {remaining - total} bytes before "
                f"the segment end (< END_FILE_MIN_BLANK_LENGTH {END_FILE_MIN_BLANK_LENGTH})"
            )
        pos += total


def _numbered_files(dir_path: str) -> list[str]:
    """Return the 20-digit file names in ``dir_path``, sorted."""
    return sorted(n for n in os.listdir(dir_path) if len(n) == 20 and n.isdigit())


def _list_segments(
    dir_path: str, segment_size: int, problems: list[str], notes: list[str]
) -> list[tuple[int, str]]:
    """Return ``(start, path)`` of the segments to scan, checking names and sizes."""
    names = _numbered_files(dir_path)
    segments: list[tuple[int, str]] = []
    if names and int(names[0]) % segment_size:
        problems.append(f"first segment {names[0]} is not a multiple of {segment_size}")
    for i, name in enumerate(names):
        path = os.path.join(dir_path, name)
        length = os.path.getsize(path)
        expected_start = int(names[0]) + i * segment_size
        if int(name) != expected_start:
            problems.append(f"segment {name}: expected start position {expected_start}")
        if length == 0 and i == len(names) - 1:
            notes.append(f"segment {name}: empty trailing file (RocketMQ deletes it on load)")
            continue
        if length != segment_size:
            problems.append(f"segment {name}: size {length}, expected {segment_size}")
        segments.append((int(name), path))
    return segments


def scan_commit_log(
    dir_path: str, segment_size: int, *, notes: list[str] | None = None
) -> tuple[list[Record], list[str]]:
    """Decode every record of the CommitLog in ``dir_path``; return ``(records, problems)``.

    Segments are visited in name order; a blank record moves on to the next segment and a
    zero TOTALSIZE ends the log. Segments after the end must be all zeros. Harmless
    observations (an empty trailing file, all-zero pre-allocated segments) are appended to
    ``notes`` when a list is given, and are not problems.
    """
    problems: list[str] = []
    notes = notes if notes is not None else []
    records: list[Record] = []
    end_seen = False
    for base, path in _list_segments(dir_path, segment_size, problems, notes):
        data = Path(path).read_bytes()
        name = os.path.basename(path)
        if end_seen:
            if any(data):
                problems.append(f"segment {name}: holds data after the end of the log")
            else:
                notes.append(f"segment {name}: all zeros after the end of the log")
            continue
        state = _scan_segment(data, base, records, problems)
        if state == "stop":
            break
        end_seen = state == "end"
    return records, problems


def by_position(records: list[Record]) -> dict[int, Record]:
    """Map each record's absolute position to the record (the ``records_by_position`` input)."""
    return {r.position: r for r in records}


def offset_msg_id(record: Record) -> str:
    """Return the offsetMsgId: uppercase hex of store ip + port int32 + physical offset int64."""
    host, _, port = record.store_host.rpartition(":")
    if host.startswith("["):
        ip = socket.inet_pton(socket.AF_INET6, host[1:-1])
    else:
        ip = socket.inet_aton(host)
    return (ip + struct.pack(">iq", int(port), record.physical_offset)).hex().upper()


# --------------------------------------------------------------------------- consume queue


def read_consume_queue(dir_path: str, file_size: int) -> list[tuple[int, int, int]]:
    """Return the ``(phy_offset, size, tags_code)`` units of one queue directory, in order.

    Reading stops at the first all-zero unit. The first unit is at queue offset
    ``int(first_file_name) // 20``. Raises ValueError for a file of the wrong size (an empty
    last file is tolerated) or for non-contiguous file names.
    """
    if file_size <= 0 or file_size % CQ_UNIT_SIZE:
        raise ValueError(f"file size {file_size} is not a positive multiple of {CQ_UNIT_SIZE}")
    names = _numbered_files(dir_path)
    units: list[tuple[int, int, int]] = []
    for i, name in enumerate(names):
        data = Path(dir_path, name).read_bytes()
        if int(name) != int(names[0]) + i * file_size:
            raise ValueError(f"consume queue file {name}: names are not contiguous")
        if not data and i == len(names) - 1:
            break
        if len(data) != file_size:
            raise ValueError(f"consume queue file {name}: size {len(data)}, expected {file_size}")
        for unit in struct.iter_unpack(">qiq", data):
            if unit == (0, 0, 0):
                return units
            units.append(unit)
    return units


def _expected_tags_code(record: Record) -> int | None:
    """Return the tagsCode the spec prescribes for ``record``; None when it cannot be derived."""
    if record.topic == "SCHEDULE_TOPIC_XXXX" and "DELAY" in record.properties:
        return None  # deliver timestamp; depends on the broker's delay-level table
    tags = record.properties.get("TAGS")
    return java_hash(tags) if tags else 0


def check_consume_queue(
    units: list[tuple[int, int, int]],
    records_by_position: dict[int, Record],
    *,
    first_offset: int = 0,
) -> list[str]:
    """Check consume queue units against CommitLog records; return problem strings.

    Each unit must point at a record of exactly its size whose QUEUEOFFSET equals the
    unit's queue offset (``first_offset`` + index; leading filler units ``(0, 0x7FFFFFFF, 0)``
    count as offsets too), and tagsCode must equal the sign-extended Java hash of TAGS (0
    without TAGS). ConsumeQueueExt addresses (tagsCode <= -2**31-1) skip the tags check, as
    do delayed messages in SCHEDULE_TOPIC_XXXX (their tagsCode is a deliver timestamp).
    """
    problems: list[str] = []
    leading = True
    for i, unit in enumerate(units):
        offset = first_offset + i
        phy, size, tags_code = unit
        if unit == CQ_FILLER_UNIT:
            if not leading:
                problems.append(f"unit {offset}: filler unit after real units")
            continue
        leading = False
        record = records_by_position.get(phy)
        if record is None:
            problems.append(f"unit {offset}: no record at position {phy}")
            continue
        if record.total_size != size:
            problems.append(f"unit {offset}: size {size}, record at {phy} is {record.total_size}")
        if record.queue_offset != offset:
            problems.append(f"unit {offset}: record at {phy} has QUEUEOFFSET {record.queue_offset}")
        expected = _expected_tags_code(record)
        if tags_code > EXT_ADDRESS_MAX and expected is not None and tags_code != expected:
            problems.append(f"unit {offset}: tagsCode {tags_code}, expected {expected}")
    return problems


# --------------------------------------------------------------------------- index file


@dataclass
class IndexFile:
    """A decoded IndexFile. ``entries[n]`` is entry number ``n`` (entry 0 is never used)."""

    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int  # 1 + number of entries written
    slots: list[int]
    entries: list[tuple[int, int, int, int]]  # (key_hash, phy_offset, time_diff, prev)


def read_index_file(path: str, slot_num: int, index_num: int) -> IndexFile:
    """Decode the IndexFile at ``path``; raise ValueError if its size does not match."""
    data = Path(path).read_bytes()
    expected = INDEX_HEADER_SIZE + slot_num * INDEX_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE
    if len(data) != expected:
        raise ValueError(f"index file {path}: size {len(data)}, expected {expected}")
    header = struct.unpack_from(">qqqqii", data, 0)
    slots = list(struct.unpack_from(f">{slot_num}i", data, INDEX_HEADER_SIZE))
    entries_at = INDEX_HEADER_SIZE + slot_num * INDEX_SLOT_SIZE
    entries = list(struct.iter_unpack(">iqii", data[entries_at:]))
    return IndexFile(*header, slots=slots, entries=entries)


def index_lookup(idx: IndexFile, key_string: str) -> list[int]:
    """Return the physical offsets whose entry hash matches ``key_string`` (``topic#key``).

    The slot chain is followed newest first; the walk stops on prev <= 0, prev >
    index_count or prev == self, as in ``IndexFile.selectPhyOffset``. Like RocketMQ, the
    match is by hash only, so colliding keys are returned too. No time-range filter.
    """
    key_hash = index_key_hash(key_string)
    current = idx.slots[key_hash % len(idx.slots)]
    if current <= 0 or current > idx.index_count or idx.index_count <= 1:
        return []
    found: list[int] = []
    seen: set[int] = set()
    while current < len(idx.entries) and current not in seen:
        seen.add(current)
        entry_hash, phy, _time_diff, prev = idx.entries[current]
        if entry_hash == key_hash:
            found.append(phy)
        if prev <= 0 or prev > idx.index_count or prev == current:
            break
        current = prev
    return found


def _last_entry(idx: IndexFile) -> int:
    """Return the number of the newest entry that exists (0 when the file is empty)."""
    return max(0, min(idx.index_count, len(idx.entries)) - 1)


def _walk_chains(idx: IndexFile, slot_num: int, problems: list[str]) -> dict[int, int]:
    """Walk every slot chain; return ``entry number -> slot`` for the entries reached."""
    owner: dict[int, int] = {}
    last = _last_entry(idx)
    for slot, head in enumerate(idx.slots):
        current, newer = head, None
        while current != 0:
            where = f"slot {slot} chain"
            if not 1 <= current <= last:
                problems.append(f"{where}: entry number {current} outside 1..{last}")
                break
            if newer is not None and current >= newer:
                problems.append(f"{where}: does not strictly descend ({newer} -> {current})")
                break
            if current in owner:
                problems.append(
                    f"{where}: entry {current} already reached from slot {owner[current]}"
                )
                break
            owner[current] = slot
            key_hash = idx.entries[current][0]
            if key_hash < 0 or key_hash % slot_num != slot:
                problems.append(
                    f"entry {current}: key hash {key_hash} belongs in slot "
                    f"{key_hash % slot_num}, found in slot {slot}"
                )
            newer, current = current, idx.entries[current][3]
    for number in range(1, last + 1):
        if number not in owner:
            problems.append(f"entry {number}: not reachable from any slot")
    return owner


def _check_index_header(
    idx: IndexFile, records_by_position: dict[int, Record], slot_num: int, problems: list[str]
) -> None:
    """Check the header fields against the slots, the entries and their records."""
    if len(idx.slots) != slot_num:
        problems.append(f"header: {len(idx.slots)} slots decoded, expected {slot_num}")
    if not 1 <= idx.index_count <= len(idx.entries):
        problems.append(f"header: index_count {idx.index_count} outside 1..{len(idx.entries)}")
    used = sum(1 for s in idx.slots if s != 0)
    if idx.hash_slot_count != used:
        problems.append(f"header: hash_slot_count {idx.hash_slot_count}, {used} slots used")
    last = _last_entry(idx)
    if last == 0:
        return
    first_phy, newest_phy = idx.entries[1][1], idx.entries[last][1]
    if idx.begin_phy_offset != first_phy:
        problems.append(f"header: begin_phy_offset {idx.begin_phy_offset}, entry 1 is {first_phy}")
    if idx.end_phy_offset != newest_phy:
        problems.append(
            f"header: end_phy_offset {idx.end_phy_offset}, entry {last} is {newest_phy}"
        )
    first, newest = records_by_position.get(first_phy), records_by_position.get(newest_phy)
    if first is not None and idx.begin_timestamp != first.store_timestamp:
        problems.append(
            f"header: begin_timestamp {idx.begin_timestamp}, entry 1 record "
            f"stored at {first.store_timestamp}"
        )
    if newest is not None and idx.end_timestamp != newest.store_timestamp:
        problems.append(
            f"header: end_timestamp {idx.end_timestamp}, entry {last} record "
            f"stored at {newest.store_timestamp}"
        )


def index_keys(record: Record) -> list[str]:
    """Return the index key strings of ``record``: ``topic#UNIQ_KEY`` then ``topic#`` + KEYS."""
    keys = []
    if "UNIQ_KEY" in record.properties:
        keys.append(record.properties["UNIQ_KEY"])
    keys.extend(k for k in record.properties.get("KEYS", "").split(" ") if k)
    return [f"{record.topic}#{k}" for k in keys]


def _expected_time_diff(store_timestamp: int, begin_timestamp: int) -> int:
    """Return the entry timeDiff in seconds, clamped to [0, INT32_MAX] (0 if begin <= 0)."""
    if begin_timestamp <= 0:
        return 0
    return max(0, min((store_timestamp - begin_timestamp) // 1000, INT32_MAX))


def _check_index_entries(
    idx: IndexFile, records_by_position: dict[int, Record], problems: list[str]
) -> None:
    """Check each entry's hash and timeDiff against the record it points at."""
    for number in range(1, _last_entry(idx) + 1):
        key_hash, phy, time_diff, _prev = idx.entries[number]
        record = records_by_position.get(phy)
        if record is None:
            problems.append(f"entry {number}: no record at position {phy}")
            continue
        hashes = {index_key_hash(k) for k in index_keys(record)}
        if key_hash not in hashes:
            problems.append(
                f"entry {number}: key hash {key_hash} matches none of "
                f"{index_keys(record)} of the record at {phy}"
            )
        # Spec section 4.3 quirk: the first entry's timeDiff is measured against the
        # previous file's endTimestamp (the header is pre-initialised with it), before
        # beginTimestamp is overwritten, so it cannot be derived from this file alone.
        expected = _expected_time_diff(record.store_timestamp, idx.begin_timestamp)
        if number > 1 and time_diff != expected:
            problems.append(f"entry {number}: time_diff {time_diff}, expected {expected}")


def check_index_chains(
    idx: IndexFile, records_by_position: dict[int, Record], slot_num: int
) -> list[str]:
    """Check an IndexFile's chains, header and entries against records; return problems.

    Every entry 1..index_count-1 must be reachable from exactly the chain of slot
    ``key_hash % slot_num``; chains must strictly descend; each entry must point at a record
    with a key (UNIQ_KEY or a KEYS token, as ``topic#key``) of that hash; the header's
    hash_slot_count, begin/end offsets and begin/end timestamps must match; and timeDiff
    must equal ``(store_timestamp - begin_timestamp) // 1000`` (entry 1 excepted: section 4.3
    measures it against the previous file's end timestamp).
    """
    problems: list[str] = []
    _check_index_header(idx, records_by_position, slot_num, problems)
    _walk_chains(idx, slot_num, problems)
    _check_index_entries(idx, records_by_position, problems)
    return problems
