"""``ConsumeQueue``: the per-(topic, queue id) index of 20-byte units into the commit log.

Unit *n* (queue offset *n*) lives at byte ``n * 20`` of the logical queue, split into files of
``units_per_file`` units named by their start byte. The queue is derived data: the dispatch
service appends units in log order, and recovery truncates or rebuilds them from the log.

Files are sparse (``Allocation.SPARSE``): a new queue takes one page on disk, not its 6 MB
file, and blocks are reserved just ahead of the units written ("files follow data").
Given an ``OpenFiles``, its files are opened only while used (``open_files.py``).

Invariants: units are written in offset order; a unit is valid when its position >= 0 and its
size > 0; an all-zero unit ends the data; filler units ``(0, 0x7FFFFFFF, 0)`` pad a queue whose
first real offset is k > 0 (pre-blank fill) and count as offsets below ``min_offset``.

Thread-safety: one writer (the dispatch thread, or recovery before services start); readers call
``read_units``/``min_offset``/``max_offset`` concurrently and see whole units below the published
write position.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from ..formats import (
    CONSUME_QUEUE_UNIT,
    CONSUME_QUEUE_UNIT_SIZE_BYTES,
    FILLER_UNIT,
    FILLER_UNIT_SIZE,
    is_ext_address,
)
from .open_files import OpenFiles
from .segment import Allocation
from .segment_set import SegmentSet

log = logging.getLogger(__name__)

UNIT = CONSUME_QUEUE_UNIT_SIZE_BYTES
_pack_unit = CONSUME_QUEUE_UNIT.pack
_unpack_unit = CONSUME_QUEUE_UNIT.unpack_from
_SCAN_CHUNK_UNITS = 4096  # units read per chunk when load scans a file (80 KiB)


class ConsumeQueue:
    """Units of one (topic, queue id)."""

    def __init__(self, directory: Path, topic: str, queue_id: int, units_per_file: int,
                 files: OpenFiles | None = None) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.file_size_bytes = units_per_file * UNIT
        self.segments = SegmentSet(directory, self.file_size_bytes, Allocation.SPARSE, files)
        self.min_logic_position = 0  # byte position of the first real unit
        self.max_log_end = 0  # log position + size of the last unit: dedup on re-dispatch
        self.damaged = False  # load found and removed invalid units (recovery rebuilds them)

    # ---- load and recovery -------------------------------------------------------------------

    def load(self) -> None:
        """Map files and find the end of data and the first real unit.

        Data ends at the first unit that is not valid: an all-zero unit (the normal end), an
        invalid one, or one that does not point past its predecessor (units are written in log
        order, so garbage shows up as a step backwards). Units after the end are zeroed; if
        any were non-zero, ``damaged`` is set so recovery rebuilds them from the log.
        """
        self.segments.load()
        if not self.segments.segments:
            return
        end = self.find_data_end()
        # segments still count as full here, so the truncation zeroes whatever follows the end
        if self.segments.truncate(end):
            self.damaged = True
            log.warning("[recovery] %s/%d: consume queue damaged after offset=%d; it will be "
                        "rebuilt from the commit log", self.topic, self.queue_id, end // UNIT)
        if not self.segments.segments:
            return
        self._find_min_logic_position()
        self._set_max_log_end()

    def find_data_end(self) -> int:
        """Byte position where the valid units of the loaded files end (reads only; also the
        read-only open's rule)."""
        segments = self.segments.segments
        previous_end = 0
        for segment in segments[max(0, len(segments) - 3):]:
            valid_bytes, previous_end = self._scan_valid_units(segment, previous_end)
            if valid_bytes < self.file_size_bytes:
                return segment.base_position + valid_bytes  # later files are past the end
        return segments[-1].base_position + self.file_size_bytes

    def _set_max_log_end(self) -> None:
        self.max_log_end = 0
        if self.max_offset > self.min_offset:
            position, size, _tag = self.unit_at(self.max_offset - 1)
            self.max_log_end = position + size

    def _scan_valid_units(self, segment, previous_end: int) -> tuple[int, int]:
        """(bytes of valid units in ``segment``, log end of the last one).

        Reads through the file in chunks up to its data end (holes are zeros: the end of data),
        so a sparse file's holes are never mapped in."""
        data_end = segment.data_end_bound()
        chunk_bytes = _SCAN_CHUNK_UNITS * UNIT
        for chunk_position in range(0, data_end, chunk_bytes):
            data = segment.read_file(chunk_position, min(chunk_bytes, data_end - chunk_position))
            data += bytes(-len(data) % UNIT)  # a unit cut by the data end: the rest is a hole
            for offset in range(0, len(data), UNIT):
                position, size, _tag = _unpack_unit(data, offset)
                if size == FILLER_UNIT_SIZE and position == 0:
                    continue
                if position < previous_end or size <= 0:
                    return chunk_position + offset, previous_end
                previous_end = position + size
        if data_end < self.file_size_bytes:
            return -(-data_end // UNIT) * UNIT, previous_end  # the next unit is in a hole
        return self.file_size_bytes, previous_end

    def _find_min_logic_position(self) -> None:
        first = self.segments.segments[0]
        chunk_bytes = _SCAN_CHUNK_UNITS * UNIT
        for chunk_position in range(0, first.written_position, chunk_bytes):
            data = first.read(chunk_position,
                              min(chunk_bytes, first.written_position - chunk_position))
            for offset in range(0, len(data), UNIT):
                if data[offset:offset + UNIT] != FILLER_UNIT:
                    self.min_logic_position = first.base_position + chunk_position + offset
                    return
        self.min_logic_position = first.end_position

    def truncate_from_log_position(self, log_end: int) -> None:
        """Drop units that point at or past ``log_end`` (the recovered end of the log)."""
        offset = self.max_offset
        while offset > self.min_offset:
            position, size, _tag = self.unit_at(offset - 1)
            if position + size <= log_end and size != FILLER_UNIT_SIZE:
                break
            offset -= 1
        if offset < self.max_offset:
            log.warning("[recovery] truncating %s/%d from offset=%d to %d (log end %d)",
                        self.topic, self.queue_id, self.max_offset, offset, log_end)
            self.segments.truncate(offset * UNIT)
            self._set_max_log_end()

    # ---- bounds ------------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        """First readable queue offset."""
        return self.min_logic_position // UNIT

    @property
    def max_offset(self) -> int:
        """One past the last written queue offset."""
        return self.segments.max_position // UNIT

    # ---- write -------------------------------------------------------------------------------

    def append(self, log_position: int, size: int, tag_hash: int, queue_offset: int) -> bool:
        """Write the unit for ``queue_offset``; ignores units already present. Returns written."""
        expected = queue_offset * UNIT
        written = self.segments.max_position
        if expected < written:  # built already (re-dispatch after recovery): check the unit
            self._repair_unit(expected, log_position, size, tag_hash)
            return False
        if log_position + size <= self.max_log_end:
            return False  # re-dispatch of a record this queue already has
        if not self.segments.segments:
            self._pre_blank_fill(expected)
            written = self.segments.max_position
        if expected > written:
            log.error("[dispatch] %s/%d: gap before offset=%d (queue ends at %d); filling",
                      self.topic, self.queue_id, queue_offset, written // UNIT)
            while written < expected:
                self._write_unit(FILLER_UNIT)
                written += UNIT
        # a sparse file: ``write`` reserves blocks before it writes
        self._writable_segment().write(_pack_unit(log_position, size, tag_hash))
        self.max_log_end = log_position + size
        return True

    def append_run(self, units: Sequence[tuple[int, int, int, int]]) -> int:
        """``append`` for each of ``units`` ``(log position, size, tag hash, queue offset)``, in
        log order; returns one past the highest offset written (0: none was).

        Two common runs take one read or one write instead of one per unit: a run of
        consecutive offsets that is present already, byte for byte (re-dispatch after
        recovery), and one that continues the queue in its last file. Anything else (a gap, a
        unit to repair, a file boundary) goes unit by unit through ``append``.
        """
        first = units[0][3]
        if all(unit[3] == first + number for number, unit in enumerate(units)):
            if self._run_present(units):
                return 0
            if self._append_in_place(units):
                return first + len(units)
        written = 0
        for log_position, size, tag_hash, queue_offset in units:
            if self.append(log_position, size, tag_hash, queue_offset):
                written = queue_offset + 1
        return written

    def _run_present(self, units: Sequence[tuple[int, int, int, int]]) -> bool:
        """Whether these consecutive units are all in one file already, exactly."""
        start = units[0][3] * UNIT
        segment = self.segments.find(start)
        if segment is None or start + len(units) * UNIT > segment.end_position:
            return False
        offset = start - segment.base_position
        return segment.read(offset, len(units) * UNIT) == _pack_units(units)

    def _append_in_place(self, units: Sequence[tuple[int, int, int, int]]) -> bool:
        """Write consecutive units that continue the queue and fit its last file."""
        first = units[0]
        if not self.segments.segments or first[3] * UNIT != self.segments.max_position \
                or first[0] + first[1] <= self.max_log_end:
            return False
        segment = self._writable_segment()
        if segment.written_position + len(units) * UNIT > segment.size_bytes:
            return False
        segment.write(_pack_units(units))
        self.max_log_end = units[-1][0] + units[-1][1]
        return True

    def _repair_unit(self, unit_position: int, log_position: int, size: int,
                     tag_hash: int) -> None:
        """Rewrite an existing unit that disagrees with its record (torn by a power loss)."""
        segment = self.segments.find(unit_position)
        if segment is None:
            return  # below the first file: removed by retention
        offset = unit_position - segment.base_position
        existing = segment.unpack(CONSUME_QUEUE_UNIT, offset)
        if existing[:2] == (log_position, size) and (
                existing[2] == tag_hash or is_ext_address(existing[2])):
            return  # intact (a ConsumeQueueExt address stands in for the tag code)
        log.warning("[recovery] %s/%d: unit at offset=%d disagreed with its record at "
                    "position=%d: rewritten", self.topic, self.queue_id, unit_position // UNIT,
                    log_position)
        segment.write_at(offset, _pack_unit(log_position, size, tag_hash))
        segment.flushed_position = min(segment.flushed_position, offset)

    def _write_unit(self, unit: bytes) -> None:
        self._writable_segment().write(unit)

    def _writable_segment(self):
        segment = self.segments.last
        if segment is None or segment.is_full:
            segment = self.segments.create_next()
        return segment

    def _pre_blank_fill(self, first_position: int) -> None:
        """A queue whose first offset is k > 0 starts with filler units up to k (§3.1)."""
        base = first_position - first_position % self.file_size_bytes
        segment = self.segments.create_next(base)
        while segment.end_position < first_position:
            segment.write(FILLER_UNIT)
        self.min_logic_position = first_position

    # ---- read --------------------------------------------------------------------------------

    def unit_at(self, offset: int) -> tuple[int, int, int]:
        """(log position, size, tag hash) of ``offset``; the caller checked the bounds."""
        position = offset * UNIT
        segment = self.segments.find(position)
        assert segment is not None  # the caller checked the bounds
        return segment.unpack(CONSUME_QUEUE_UNIT, position - segment.base_position)

    def read_units(self, offset: int, max_count: int) -> list[tuple[int, int, int]]:
        """Up to ``max_count`` units from ``offset``, within one file, below ``max_offset``."""
        position = offset * UNIT
        segment = self.segments.find(position)
        if segment is None:
            return []
        start = position - segment.base_position
        end = min(segment.written_position, start + max_count * UNIT)
        if end <= start:
            return []
        return list(CONSUME_QUEUE_UNIT.iter_unpack(segment.read(start, end - start)))

    def offset_by_time(self, timestamp_ms: int, store_time_at: Callable[[int], int],
                       log_min_position: int) -> int:
        """First offset whose message was stored at or after ``timestamp_ms`` (LOWER, §3.4).

        Returns ``max_offset`` when every message is older, ``min_offset`` when all are newer.
        """
        low, high = self.min_offset, self.max_offset - 1
        while low <= high and self.unit_at(low)[0] < log_min_position:
            low += 1  # units whose record was deleted count as "too early"
        if low > high:
            return self.max_offset
        if store_time_at(self.unit_at(high)[0]) < timestamp_ms:
            return self.max_offset
        while low < high:  # invariant: answer in [low, high]
            middle = (low + high) // 2
            if store_time_at(self.unit_at(middle)[0]) >= timestamp_ms:
                high = middle
            else:
                low = middle + 1
        return low

    def remove_before(self, log_min_position: int) -> list:
        """Delete files whose every unit points below ``log_min_position`` (never the last
        file), then move ``min_offset`` to the first unit still in the log (§3.5).

        Returns the detached segments; the caller closes them after a grace period.
        """
        segments = self.segments.segments
        count = 0
        for segment in segments[:-1]:
            position, size, _tag = segment.unpack(CONSUME_QUEUE_UNIT, self.file_size_bytes - UNIT)
            if size == FILLER_UNIT_SIZE or position + size > log_min_position:
                break
            count += 1
        removed = self.segments.remove_front(count)
        self.correct_min_offset(log_min_position)
        return removed

    def correct_min_offset(self, log_min_position: int) -> None:
        """Set ``min_offset`` to the first unit whose record is still in the log."""
        low = max(self.min_offset, self.segments.min_position // UNIT)
        high = self.max_offset
        while low < high:  # units are in log order: binary search on their position
            middle = (low + high) // 2
            position, size, _tag = self.unit_at(middle)
            if size != FILLER_UNIT_SIZE and position >= log_min_position:
                high = middle
            else:
                low = middle + 1
        if low * UNIT > self.min_logic_position:
            log.info("[retention] %s/%d: min offset %d -> %d", self.topic, self.queue_id,
                     self.min_offset, low)
            self.min_logic_position = low * UNIT

    def flush(self, least_pages: int = 0) -> None:
        """fdatasync files with unflushed units (at least ``least_pages`` dirty, or full)."""
        self.segments.flush(least_pages)

    def close(self) -> None:
        """Unmap files."""
        self.segments.close()

    def destroy(self) -> None:
        """Delete every file of this queue."""
        self.segments.destroy()


def _pack_units(units: Sequence[tuple[int, int, int, int]]) -> bytes:
    """The 20-byte units of ``(log position, size, tag hash, queue offset)`` tuples."""
    return b"".join([_pack_unit(position, size, tag_hash)
                     for position, size, tag_hash, _offset in units])
