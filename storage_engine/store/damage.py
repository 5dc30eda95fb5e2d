"""Finding damage in a commit log: where it starts, where valid data resumes, what follows it.

Two faults look alike at the first bad byte and are told apart by what comes after it:

- a **torn tail**: the last write did not finish (a crash, a power loss). Nothing valid follows
  the first bad byte; recovery cuts the log there, as RocketMQ does.
- **mid-log corruption**: a record in the middle of the log was damaged (a flipped bit, an
  overwritten span). Valid records follow it, in the same segment or in later ones; they are
  acknowledged data and are never cut. ``MessageStore.open`` refuses such a log
  (``MidLogCorruptionError``) and ``postbox store repair`` (``repair.py``) sets the damaged span
  aside.

A valid record is found after damage by searching forward for its magic (v1 and v2 share their
first three bytes) and accepting a candidate only when every check holds: its position field
names exactly the position it sits at, its lengths add up and its CRC matches (the record CRC
when it has one, the body CRC otherwise). Random or stale bytes pass all three by chance with a
probability below 2^-90 per candidate. Only regions the file system reports as holding data are
searched (``MappedSegment.data_ranges``), so the zero tail of a preallocated segment costs
nothing; that keeps the check at the normal end of the log (every open) cheap.

Pure functions over segments (objects with ``base_position``, ``buffer``, ``size_bytes``,
``path`` and ``data_ranges(offset)``); they never write. Thread-safety: read-only, callers keep
the segments from changing (recovery before services start, repair under the store lock).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple, Protocol

from ..formats import BLANK_MAGIC, RecordKind, check_record, scan_records

_MAGIC_PREFIX = b"\xda\xa3\x20"  # MAGIC_V1 0xDAA320A7 and MAGIC_V2 0xDAA320AB, big-endian
_MAGIC_FIRST_BYTE = _MAGIC_PREFIX[:1]
_MAGIC_LAST_BYTES = (0xA7, 0xAB)
_BLANK_MAGIC_BYTES = struct.pack(">i", BLANK_MAGIC)
_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")
_OFFSET_LOG_POSITION = 28

DAMAGED_DIR_NAME = "damaged"
"""Directory of the store root where repair keeps the bytes it set aside."""


class Segment(Protocol):
    """What the search needs of a segment (``MappedSegment``, or ``FileSegment`` for bytes)."""

    @property
    def base_position(self) -> int:
        """Log position of the segment's first byte."""

    @property
    def size_bytes(self) -> int:
        """The segment's length."""

    @property
    def path(self) -> Path:
        """The segment's file."""

    @property
    def buffer(self):
        """The segment's bytes (an ``mmap`` or ``bytes``: anything with ``find``)."""

    def data_ranges(self, offset: int) -> Iterator[tuple[int, int]]:
        """Regions at or after ``offset`` that may hold data."""

    def release_pages(self, start: int, end: int) -> None:
        """Drop the process's mapped pages of ``[start, end)`` (nothing for bytes in memory)."""


class FileSegment(NamedTuple):
    """A segment read into memory (``verify_store``), searched whole."""

    base_position: int
    buffer: bytes
    path: Path

    @property
    def size_bytes(self) -> int:
        """The file's length."""
        return len(self.buffer)

    def data_ranges(self, offset: int) -> Iterator[tuple[int, int]]:
        """Everything from ``offset``."""
        if offset < len(self.buffer):
            yield offset, len(self.buffer)

    def release_pages(self, start: int, end: int) -> None:
        """Nothing: the bytes are the process's own."""


class Damage(NamedTuple):
    """One damaged span of the log, followed by valid data."""

    segment: str  # path of the segment file
    position: int  # log position of the first damaged byte (a record boundary)
    end: int  # log position where valid data resumes: a record, a closing blank, or the next
    #           segment
    reason: str

    @property
    def size_bytes(self) -> int:
        """Length of the damaged span."""
        return self.end - self.position

    def describe(self) -> str:
        """One line naming the segment, the span and what is wrong."""
        return (f"segment {Path(self.segment).name} position={self.position}: {self.reason} "
                f"({self.size_bytes} bytes up to position={self.end})")


class Survey(NamedTuple):
    """What a walk over the log found."""

    damages: list[Damage]  # mid-log damage, each followed by valid records
    end: int  # end of valid data: a torn tail (if any) starts here
    records: int  # valid records walked over
    records_after_damage: int  # of those, how many lie after the first damage


def record_at(segment: Segment, offset: int, *, check_crc: bool = True) -> bool:
    """Whether a valid record (lengths, CRC, own position field) starts at ``offset``."""
    buffer = segment.buffer
    if offset + 36 > segment.size_bytes:
        return False
    if _LONG.unpack_from(buffer, offset + _OFFSET_LOG_POSITION)[0] != \
            segment.base_position + offset:
        return False
    return check_record(buffer, offset, segment.size_bytes,
                        check_crc=check_crc).kind == RecordKind.MESSAGE


def next_record(segment: Segment, offset: int, *, check_crc: bool = True,
                release_window: int = 0) -> int | None:
    """Offset of the first valid record starting after ``offset`` in ``segment``, or None.

    ``release_window``: search that many bytes at a time and drop each window's pages from the
    process once past it (``MappedSegment.release_pages``); 0: search each data range whole."""
    buffer = segment.buffer
    for start, end in _windows(segment.data_ranges(offset + 1), release_window):
        search_from = max(start, offset + 1) + 4
        while True:  # one-byte find is memchr: fast over the zeros at the end of a log
            found = buffer.find(_MAGIC_FIRST_BYTE, search_from, end + 4)
            if found < 0:
                break
            candidate = found - 4
            if buffer[found:found + 3] == _MAGIC_PREFIX and found + 3 < segment.size_bytes \
                    and buffer[found + 3] in _MAGIC_LAST_BYTES and \
                    record_at(segment, candidate, check_crc=check_crc):
                return candidate
            search_from = found + 1
        if release_window:
            segment.release_pages(start, end + 4)
    return None


def _windows(ranges: Iterator[tuple[int, int]], window: int) -> Iterator[tuple[int, int]]:
    """``ranges`` cut into pieces of at most ``window`` bytes (0: as they are)."""
    for start, end in ranges:
        while window and end - start > window:
            yield start, start + window
            start += window
        yield start, end


def closing_blank(segment: Segment, offset: int) -> int | None:
    """Offset of the blank record that closes ``segment`` after ``offset``, or None."""
    buffer = segment.buffer
    size = segment.size_bytes
    search_from = offset + 5
    while True:
        found = buffer.find(_BLANK_MAGIC_BYTES, search_from)
        if found < 0:
            return None
        candidate = found - 4
        if _INT.unpack_from(buffer, candidate)[0] == size - candidate:
            return candidate
        search_from = found + 1


def next_valid_position(segments: Sequence[Segment], position: int, *,
                        check_crc: bool = True, release_window: int = 0) -> int | None:
    """Log position of the first valid record after ``position`` in any segment, or None.

    None means the bytes from ``position`` on are a torn tail. ``release_window``: as
    ``next_record``'s (a read-only open keeps its resident memory bounded).
    """
    for segment in segments:
        base = segment.base_position
        if base + segment.size_bytes <= position:
            continue
        if base >= position and record_at(segment, 0, check_crc=check_crc):
            return base
        found = next_record(segment, max(0, position - base), check_crc=check_crc,
                            release_window=release_window)
        if found is not None:
            return base + found
    return None


def survey(segments: Sequence[Segment], start: int, *, check_crc: bool = True) -> Survey:
    """Walk every record from ``start``; name each damaged span that valid data follows."""
    damages: list[Damage] = []
    records = after = 0
    position = start
    index = _segment_index(segments, position)
    while index is not None and index < len(segments):
        segment = segments[index]
        base = segment.base_position
        offset, counted = _walk_valid(segment, position - base, check_crc)
        records += counted
        after += counted if damages else 0
        check = check_record(segment.buffer, offset, segment.size_bytes, check_crc=check_crc)
        if check.kind == RecordKind.BLANK:
            index, position = index + 1, base + segment.size_bytes
            continue
        resume = next_valid_position(segments[index:], base + offset, check_crc=check_crc)
        if resume is None:
            return Survey(damages, base + offset, records, after)
        end = _span_end(segment, offset, resume)
        reason = check.reason or "zeros where a record should start"
        damages.append(Damage(str(segment.path), base + offset, end, reason))
        position = resume if resume < base + segment.size_bytes else end
        if position >= base + segment.size_bytes:
            index += 1
    return Survey(damages, position, records, after)


def _segment_index(segments: Sequence[Segment], position: int) -> int | None:
    for index, segment in enumerate(segments):
        if segment.base_position <= position < segment.base_position + segment.size_bytes:
            return index
    return None


def _walk_valid(segment: Segment, offset: int, check_crc: bool) -> tuple[int, int]:
    """Step over valid records from ``offset``: (offset of the first that is not one, count)."""
    buffer, size = segment.buffer, segment.size_bytes
    count = 0
    while True:
        stop, last = scan_records(buffer, offset, size, check_crc=check_crc)
        if last >= 0:
            count += _count_between(buffer, offset, stop)
        offset = stop
        check = check_record(buffer, offset, size, check_crc=check_crc)
        if check.kind != RecordKind.MESSAGE:
            return offset, count
        count += 1
        offset += check.size


def _count_between(buffer, start: int, stop: int) -> int:
    """Records from ``start`` to ``stop`` (already validated: only their sizes are read)."""
    count = 0
    while start < stop:
        start += _INT.unpack_from(buffer, start)[0]
        count += 1
    return count


def _span_end(segment: Segment, offset: int, resume: int) -> int:
    """Where the damaged span starting at ``offset`` ends inside its segment."""
    base, size = segment.base_position, segment.size_bytes
    if resume < base + size:
        return resume  # a valid record later in the same segment
    blank = closing_blank(segment, offset)
    return base + (blank if blank is not None else size)
