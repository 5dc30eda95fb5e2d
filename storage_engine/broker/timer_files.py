"""``TimerFiles``: the timer wheel's files of a store — ``timerwheel``, ``timerlog/`` and
``config/timercheck`` — read and written as Apache RocketMQ 5.x's ``TimerMessageStore`` does
(layouts in ``formats.timer_layout``).

Nothing is created until the first record is appended (a store that never held a timer has
none of these files, as before). ``load`` opens what exists: it finds where the timer log ends
(the first position that holds no record, following the blanks at segment ends), revises the
slots of the records appended since the last flush (Apache's ``recoverAndRevise``: a slot whose
``lastPos`` lags behind the log is advanced) and returns the checkpoint. A wheel of another size
than Apache's, a checkpoint page shorter than its four progress longs, or bytes at the timer
log's end that are neither zeros nor a record raise ``CorruptionError`` naming the file: nothing
is deleted or overwritten, the operator decides. The one exception is what a kill -9 in the
middle of an append leaves: one record's bytes, torn, after the last flush's position in the
last file, with zeros after them. The slot was never pointed at it and its message is still
in the timer queue (read again from the log's last whole record on), so it is logged, in hex,
and the next append writes over it.

Writes go through memory maps (a kill -9 loses none of them); ``flush`` makes the log, the wheel
and then the checkpoint durable (Apache's ``TimerFlushService``, every ``FLUSH_INTERVAL_MS``);
the checkpoint's lastTimerLogFlushPos is where the last flush began, so ``load`` reads the
records after it only. A new file (the checkpoint too) is written beside and renamed in; an
empty wheel or last log file (left by an older Postbox crashing between a file's creation and
its sizing: it never held a byte) is sized at ``load``, and an empty wheel's slots rebuilt from
the whole log; an empty checkpoint is one of nothing (every slot read back).

Thread-safety: none; the timer service calls it under its run lock.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

from ..errors import CorruptionError
from ..formats.directory import CONFIG_DIR_NAME, SEGMENT_NAME_DIGITS
from ..formats.timer_layout import (
    EMPTY_SLOT,
    MAGIC_DELETE,
    SLOT,
    SLOT_SIZE,
    TIMER_CHECK_FILE_NAME,
    TIMER_CHECK_FILE_SIZE,
    TIMER_LOG_DIR_NAME,
    TIMER_LOG_MIN_BLANK,
    TIMER_UNIT,
    TIMER_UNIT_SIZE,
    WHEEL_FILE_NAME,
    WHEEL_FILE_SIZE,
    WHEEL_SLOTS_TOTAL,
    Slot,
    TimerCheck,
    TimerUnit,
    decode_slot,
    decode_timer_check,
    decode_unit,
    encode_blank,
    encode_slot,
    encode_timer_check,
    encode_unit,
    is_blank,
    slot_index,
)

log = logging.getLogger(__name__)

FLUSH_INTERVAL_MS = 1000  # timerFlushIntervalMs
CHAIN_MAX = 10_000_000
"""Records followed through one slot's chain at most (a loop in a damaged log ends there)."""
_PAGE_BYTES = 4096  # 128 slots
_ZERO_PAGE = bytes(_PAGE_BYTES)


class TimerFiles:
    """The wheel, the timer log and the checkpoint of the store at ``root``."""

    def __init__(self, root: Path, precision_ms: int, segment_bytes: int) -> None:
        self.root = root
        self.precision_ms = precision_ms
        self.segment_bytes = segment_bytes
        self.wheel_path = root / WHEEL_FILE_NAME
        self.log_dir = root / TIMER_LOG_DIR_NAME
        self.check_path = root / CONFIG_DIR_NAME / TIMER_CHECK_FILE_NAME
        self._wheel: mmap.mmap | None = None
        self._segments: dict[int, mmap.mmap] = {}  # start position -> map
        self.write_pos = 0
        self.flushed_pos = 0  # every record before it (and its slot) was flushed
        self.last_unit: TimerUnit | None = None
        self._check: TimerCheck | None = None
        self._latest: dict[int, int] = {}  # a full file's start -> its last-due record's time

    # ---- open --------------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """Whether the store has timer files (loaded with a checkpoint, or appended to)."""
        return self._wheel is not None or self._check is not None

    def load(self) -> TimerCheck | None:
        """Open what exists; the checkpoint, or None when the store has none.

        Raises:
            CorruptionError: a file that does not decode (nothing is changed).
        """
        check = self._load_check()
        flushed_pos = check.last_timer_log_flush_pos if check else 0
        if self.wheel_path.exists():
            empty = self.wheel_path.stat().st_size == 0
            if empty:  # a crash between its creation and its sizing (an older Postbox's)
                log.warning("[timer] %s is empty: sized, and its slots rebuilt from the whole "
                            "timer log", self.wheel_path)
                flushed_pos = 0
            self._open_wheel(create=empty)
        self._open_segments()
        self._recover(flushed_pos)
        self._check = check
        return check

    def _load_check(self) -> TimerCheck | None:
        """The checkpoint; an empty one (an older Postbox crashing between its creation and
        its first write) is a checkpoint of nothing: every slot is read back, the log from
        its start."""
        if not self.check_path.exists():
            return None
        page = self.check_path.read_bytes()
        if not page:
            log.warning("[timer] %s is empty: the wheel is read back whole, the timer log "
                        "revised from its start", self.check_path)
            return TimerCheck()
        try:
            return decode_timer_check(page)
        except ValueError as error:
            raise CorruptionError(f"{self.check_path}: {error}",
                                  path=str(self.check_path)) from error

    def _open_wheel(self, *, create: bool) -> None:
        size = self.wheel_path.stat().st_size if self.wheel_path.exists() else 0
        if size not in (0, WHEEL_FILE_SIZE) or (size == 0 and not create):
            raise CorruptionError(f"{self.wheel_path} is {size} bytes; a timer wheel is "
                                  f"{WHEEL_FILE_SIZE} (2 × {WHEEL_SLOTS_TOTAL} slots of "
                                  f"{SLOT_SIZE})", path=str(self.wheel_path))
        self._wheel = map_sized(self.wheel_path, WHEEL_FILE_SIZE)

    def _open_segments(self) -> None:
        if not self.log_dir.is_dir():
            return
        names = sorted(p for p in self.log_dir.iterdir()
                       if p.name.isdigit() and len(p.name) == SEGMENT_NAME_DIGITS)
        if names and names[-1].stat().st_size == 0:  # created, not yet sized, at a crash
            log.warning("[timer] %s is empty: sized when the log reaches it", names.pop())
        sizes = {p.stat().st_size for p in names}
        if len(sizes) > 1 or 0 in sizes:
            raise CorruptionError(f"{self.log_dir}: timer log files of sizes {sorted(sizes)}; "
                                  "they are all of one size", path=str(self.log_dir))
        if sizes and sizes != {self.segment_bytes}:
            log.warning("[timer] %s: files of %d bytes (the configured size is %d): kept",
                        self.log_dir, *sizes, self.segment_bytes)
            self.segment_bytes = sizes.pop()
        for path in names:
            with open(path, "r+b") as file:
                self._segments[int(path.name)] = mmap.mmap(file.fileno(), self.segment_bytes)

    def _recover(self, flushed_pos: int) -> None:
        """Find the log's end; advance the slots of the records after ``flushed_pos``."""
        if not self._segments:
            return
        starts = sorted(self._segments)
        begin, offset = self._scan_start(flushed_pos, starts)
        self.flushed_pos = begin + offset
        for start in (s for s in starts if s >= begin):
            segment = self._segments[start]
            offset = offset if start == begin else 0
            while (unit := decode_unit(segment, offset)) is not None:
                self._revise(unit, start + offset)
                self.last_unit = unit
                offset += TIMER_UNIT_SIZE
            self.write_pos = start + offset
            if is_blank(segment, offset):
                self.write_pos = start + self.segment_bytes
                continue
            if self._torn_tail(segment, start, offset, flushed_pos, start == starts[-1]):
                log.warning("[timer] %s: an append a crash cut short at position %d (bytes "
                            "%s), after the last flush; the next record is written over it "
                            "(its message is read from the timer queue again)",
                            self.log_dir, start + offset,
                            bytes(segment[offset:offset + TIMER_UNIT_SIZE]).hex())
            elif offset + TIMER_UNIT_SIZE <= self.segment_bytes and any(
                    segment[offset:offset + TIMER_UNIT_SIZE]):
                raise CorruptionError(
                    f"{self.log_dir / f'{start:0{SEGMENT_NAME_DIGITS}d}'}: torn or corrupt "
                    f"timer-log record at position {start + offset}", log_position=start + offset,
                    path=str(self.log_dir))
            if start != starts[-1]:
                raise CorruptionError(f"{self.log_dir}: the timer log ends at {start + offset} "
                                      "but later files follow", log_position=start + offset,
                                      path=str(self.log_dir))

    def _torn_tail(self, segment: mmap.mmap, start: int, offset: int, flushed_pos: int,
                   last: bool) -> bool:
        """Whether the bytes at ``offset``, where the records end, are one record (or end
        blank) whose write a kill cut short: in the last file, after the last flush's
        position, nothing but zeros after them. Anything else that is not zeros is damage."""
        end = offset + 2 * TIMER_UNIT_SIZE
        return (last and start + offset >= flushed_pos and offset < self.segment_bytes
                and any(segment[offset:offset + TIMER_UNIT_SIZE])
                and not any(segment[offset + TIMER_UNIT_SIZE:min(end, self.segment_bytes)]))

    def _scan_start(self, flushed_pos: int, starts: list[int]) -> tuple[int, int]:
        """(file, offset) where ``_recover`` reads from: the record before ``flushed_pos``
        (every record before it, and its slot, was flushed; this one is read so that the log's
        last record is known even when none follows). Where no record stands there (a
        checkpoint naming a position the log does not reach), from the start of the file
        before ``flushed_pos``'s one."""
        start = flushed_pos - flushed_pos % self.segment_bytes
        offset = (flushed_pos - start) // TIMER_UNIT_SIZE * TIMER_UNIT_SIZE - TIMER_UNIT_SIZE
        segment = self._segments.get(start)
        if segment is not None and offset >= 0 and decode_unit(segment, offset) is not None:
            return start, offset
        return max((s for s in starts if s <= max(0, flushed_pos - self.segment_bytes)),
                   default=starts[0]), 0

    def _revise(self, unit: TimerUnit, position: int) -> None:
        if self._wheel is None:
            return
        time_ms = unit.deliver_ms
        slot = self.slot(time_ms)
        if slot is EMPTY_SLOT:
            self._put_slot(time_ms, Slot(time_ms, position, position))
        elif slot.last_pos < position:
            self._put_slot(time_ms, slot._replace(last_pos=position))

    # ---- wheel -------------------------------------------------------------------------------

    def slot(self, time_ms: int) -> Slot:
        """The slot holding ``time_ms`` (``EMPTY_SLOT``: none, or no wheel yet)."""
        if self._wheel is None:
            return EMPTY_SLOT
        return decode_slot(self._wheel, slot_index(time_ms, self.precision_ms) * SLOT_SIZE,
                           time_ms, self.precision_ms)

    def _put_slot(self, time_ms: int, slot: Slot) -> None:
        assert self._wheel is not None
        at = slot_index(time_ms, self.precision_ms) * SLOT_SIZE
        self._wheel[at:at + SLOT_SIZE] = encode_slot(time_ms, slot.first_pos, slot.last_pos,
                                                     slot.num, slot.magic, self.precision_ms)

    def pending_slots(self, from_ms: int) -> Iterator[Slot]:
        """Every slot of a time at or after ``from_ms`` that holds records."""
        if self._wheel is None:
            return
        low, wheel = from_ms // self.precision_ms, self._wheel
        for page_at in range(0, len(wheel), _PAGE_BYTES):  # most pages of a wheel are zeros
            page = wheel[page_at:page_at + _PAGE_BYTES]
            if page == _ZERO_PAGE:
                continue
            for stored, first, last, num, magic in SLOT.iter_unpack(page):
                if stored >= low and last >= 0:
                    yield Slot(stored * self.precision_ms, first, last, num, magic)

    def pending_units(self, from_ms: int) -> list[tuple[int, int, TimerUnit]]:
        """(message position, record position, record) of every record chained in the slots
        from ``from_ms`` on, by message position (``chain`` for each of ``pending_slots``)."""
        found = []
        segments, size = self._segments, self.segment_bytes
        for slot in self.pending_slots(from_ms):
            position, seen = slot.last_pos, 0
            while position >= 0 and seen <= CHAIN_MAX:
                segment = segments.get(position - position % size)
                unit = None if segment is None else decode_unit(segment, position % size)
                if unit is None:
                    log.error("[timer] slot %d: no timer-log record at %d", slot.time_ms,
                              position)
                    break
                found.append((unit.log_offset, position, unit))
                position, seen = unit.prev_pos, seen + 1
        found.sort()
        return found

    def chain(self, slot: Slot) -> Iterator[tuple[int, TimerUnit]]:
        """The records of ``slot``, last first, with their positions."""
        position, seen = slot.last_pos, 0
        while position >= 0 and seen <= CHAIN_MAX:
            unit = self.unit(position)
            if unit is None:
                log.error("[timer] slot %d: no timer-log record at %d", slot.time_ms, position)
                return
            yield position, unit
            position, seen = unit.prev_pos, seen + 1

    # ---- timer log ---------------------------------------------------------------------------

    def unit(self, position: int) -> TimerUnit | None:
        """The timer-log record at ``position`` (None: no record there)."""
        start = position - position % self.segment_bytes
        segment = self._segments.get(start)
        return None if segment is None else decode_unit(segment, position - start)

    def append(self, unit: TimerUnit) -> int:
        """Append ``unit`` (its ``prev_pos`` is set here) to the slot of its deliver time and
        count it there (a delete marker counts −1); its position."""
        if self._wheel is None:
            self._open_wheel(create=True)
        time_ms = unit.deliver_ms
        slot = self.slot(time_ms)
        position = self._reserve()
        data = encode_unit(unit._replace(prev_pos=slot.last_pos))
        start = position - position % self.segment_bytes
        self._segments[start][position - start:position - start + TIMER_UNIT_SIZE] = data
        self.write_pos = position + TIMER_UNIT_SIZE
        delta = -1 if unit.magic & MAGIC_DELETE else 1
        self._put_slot(time_ms, Slot(time_ms, position if slot.first_pos < 0 else slot.first_pos,
                                     position, slot.num + delta, slot.magic))
        return position

    def _reserve(self) -> int:
        """Where the next record goes: after a blank at a file end that would keep less than
        ``TIMER_LOG_MIN_BLANK`` bytes (Apache's ``TimerLog.append``), in a new file then."""
        position = self.write_pos
        start = position - position % self.segment_bytes
        if start not in self._segments:
            self._create_segment(start)
            return position
        used = position - start
        if used + TIMER_UNIT_SIZE + TIMER_LOG_MIN_BLANK <= self.segment_bytes:
            return position
        self._segments[start][used:used + TIMER_LOG_MIN_BLANK] = encode_blank(
            self.segment_bytes - used)
        start += self.segment_bytes
        self._create_segment(start)
        self.write_pos = start
        return start

    def _create_segment(self, start: int) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        path = self.log_dir / f"{start:0{SEGMENT_NAME_DIGITS}d}"
        self._segments[start] = map_sized(path, self.segment_bytes)

    def mark_deleted(self, position: int) -> None:
        """Set ``MAGIC_DELETE`` on the record at ``position`` (a cancelled timer: Apache's
        dequeue then skips it too)."""
        unit = self.unit(position)
        if unit is None:
            return
        start = position - position % self.segment_bytes
        data = encode_unit(unit._replace(magic=unit.magic | MAGIC_DELETE))
        self._segments[start][position - start:position - start + TIMER_UNIT_SIZE] = data

    # ---- checkpoint --------------------------------------------------------------------------

    def write_check(self, read_time_ms: int, queue_offset: int, now_ms: int) -> None:
        """Record progress (in the page cache; ``flush`` makes it durable)."""
        old = self._check or TimerCheck()
        if (old.last_read_time_ms, old.last_timer_queue_offset, old.last_timer_log_flush_pos) \
                == (read_time_ms, queue_offset, self.flushed_pos) and self.check_path.exists():
            return
        self._write_check(TimerCheck(read_time_ms, self.flushed_pos, queue_offset, queue_offset,
                                     old.state_version, now_ms, old.counter + 1))

    def _write_check(self, check: TimerCheck) -> None:
        self._check = check
        page = encode_timer_check(check)
        if not self.check_path.exists():  # written beside and renamed in: never found empty
            self.check_path.parent.mkdir(parents=True, exist_ok=True)
            written = self.check_path.with_name(self.check_path.name + ".new")
            written.write_bytes(page)
            os.replace(written, self.check_path)
            return
        fd = os.open(self.check_path, os.O_RDWR)
        try:
            os.pwrite(fd, page, 0)
        finally:
            os.close(fd)
        assert os.path.getsize(self.check_path) == TIMER_CHECK_FILE_SIZE

    def flush(self) -> None:
        """Make the timer log, the wheel and then the checkpoint durable; the checkpoint's
        lastTimerLogFlushPos is then where the log was when this flush began (as Apache's
        is its log's flushed position: a start revises the slots of the records after it)."""
        position = self.write_pos
        for segment in self._segments.values():
            segment.flush()
        if self._wheel is not None:
            self._wheel.flush()
        self.flushed_pos = position
        if self._check is not None and self._check.last_timer_log_flush_pos != position:
            self._write_check(self._check._replace(last_timer_log_flush_pos=position))
        if self.check_path.exists():
            fd = os.open(self.check_path, os.O_RDWR)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def delete_delivered(self) -> list[Path]:
        """Delete the timer-log files at the log's start, never the last one, whose every
        record is due before the durable checkpoint's lastReadTimeMs: every slot before it was
        delivered, and a slot's chain never leaves its own records, so no pending record is
        reached through them. The deleted files."""
        if self._check is None:
            return []
        read_ms, deleted = self._check.last_read_time_ms, []
        for start in sorted(self._segments)[:-1]:
            if start not in self._latest:
                self._latest[start] = self._latest_deliver_ms(self._segments[start])
            if self._latest[start] >= read_ms:
                break
            self._segments.pop(start).close()
            path = self.log_dir / f"{start:0{SEGMENT_NAME_DIGITS}d}"
            path.unlink()
            deleted.append(path)
        return deleted

    @staticmethod
    def _latest_deliver_ms(segment: mmap.mmap) -> int:
        """When the last-due record of a full timer-log file is due."""
        latest = 0
        with memoryview(segment) as whole:
            for size, _, magic, write_ms, delay, _, log_size, _, _ in TIMER_UNIT.iter_unpack(
                    whole[:len(whole) // TIMER_UNIT_SIZE * TIMER_UNIT_SIZE]):
                if size != TIMER_UNIT_SIZE or magic | 0xF != 0xF or log_size <= 0:
                    break  # the blank (or zeros) after the file's last record
                latest = max(latest, write_ms + delay)
        return latest

    def close(self) -> None:
        """Flush, then unmap every file (``load`` opens them again)."""
        self.flush()
        for segment in self._segments.values():
            segment.close()
        self._segments.clear()
        if self._wheel is not None:
            self._wheel.close()
            self._wheel = None


def map_sized(path: Path, size: int) -> mmap.mmap:
    """A shared map of ``path``, which is first created at ``size`` bytes when it is absent or
    empty (empty: a crash came between its creation and its sizing; it never held a byte).
    The new file is sized beside and renamed in, so no crash leaves it empty."""
    if not path.exists() or path.stat().st_size == 0:
        sized = path.with_name(path.name + ".new")
        with open(sized, "wb") as file:
            file.truncate(size)
        os.replace(sized, path)
    with open(path, "r+b") as file:
        return mmap.mmap(file.fileno(), size)


__all__ = ["FLUSH_INTERVAL_MS", "TimerFiles", "map_sized"]
