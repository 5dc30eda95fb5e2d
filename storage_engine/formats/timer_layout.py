"""The timer wheel's files (RocketMQ 5.x ``TimerMessageStore``, reference §11.2). Pure.

``timerwheel`` (at the store root): ``2 × WHEEL_SLOTS_TOTAL`` slots of 32 bytes, independent of
the precision. A slot is ``[long timeMs / precision][long firstPos][long lastPos][int num]
[int magic]``; its index is ``(timeMs / precision) mod (2 × WHEEL_SLOTS_TOTAL)``, and it holds
the slot only when its first long equals ``timeMs / precision`` (else the slot is empty and
reads as −1/−1/−1). ``firstPos`` / ``lastPos``: timer-log positions of the slot's first and
last record; the records of one slot are chained backwards from ``lastPos`` by ``prevPos``.

``timerlog/``: segments of ``mappedFileSizeTimerLog`` bytes (100 MiB), named by their start
position (20 digits), of 52-byte records ``[int size=52][long prevPos][int magic]
[long writeTimeMs][int delayMs][long commitLogOffset][int commitLogSize][int realTopicHash]
[long reserved=0]``; the deliver time is ``writeTimeMs + delayMs``. A record that would leave
less than ``TIMER_LOG_MIN_BLANK`` bytes at a segment's end is written at the next segment's
start, after a blank ``[int remaining][long 0][int TIMER_LOG_BLANK_MAGIC]``. Magic bits:
``MAGIC_DEFAULT`` 1, ``MAGIC_ROLL`` 2 (parked: re-put to the timer topic at that time),
``MAGIC_DELETE`` 4 (a delete marker, or a record it cancelled).

``config/timercheck``: a 4 KiB page whose first 56 bytes are seven longs: lastReadTimeMs (every
slot before it was delivered), lastTimerLogFlushPos, lastTimerQueueOffset (the timer queue
offset up to which records are in the timer log), masterTimerQueueOffset, and the data
version (stateVersion, timestamp, counter).
"""

from __future__ import annotations

import struct
from mmap import mmap
from typing import NamedTuple

WHEEL_FILE_NAME = "timerwheel"
TIMER_LOG_DIR_NAME = "timerlog"
TIMER_CHECK_FILE_NAME = "timercheck"  # under config/
WHEEL_SLOTS_TOTAL = 7 * 86_400  # TIMER_WHEEL_TTL_DAY × DAY_SECS
WHEEL_BLANK_SLOTS = 60  # TIMER_BLANK_SLOTS
SLOT = struct.Struct(">qqqii")
SLOT_SIZE = SLOT.size
WHEEL_FILE_SIZE = 2 * WHEEL_SLOTS_TOTAL * SLOT_SIZE
TIMER_UNIT = struct.Struct(">iqiqiqiiq")
TIMER_UNIT_SIZE = TIMER_UNIT.size
TIMER_BLANK = struct.Struct(">iqi")
TIMER_LOG_MIN_BLANK = TIMER_BLANK.size
TIMER_LOG_BLANK_MAGIC = (0xBBCCDDEE ^ (1880681586 + 8)) - (1 << 32)  # Java int arithmetic
MAGIC_DEFAULT, MAGIC_ROLL, MAGIC_DELETE = 1, 2, 4
TIMER_CHECK = struct.Struct(">qqqqqqq")
TIMER_CHECK_FILE_SIZE = 4096
DEFAULT_TIMER_LOG_SEGMENT_BYTES = 100 * 1024 * 1024
assert SLOT_SIZE == 32 and TIMER_UNIT_SIZE == 52 and WHEEL_FILE_SIZE == 38_707_200


class Slot(NamedTuple):
    """One wheel slot; ``time_ms`` −1 when the slot holds nothing for the time asked."""

    time_ms: int
    first_pos: int
    last_pos: int
    num: int = 0
    magic: int = 0


EMPTY_SLOT = Slot(-1, -1, -1)


class TimerUnit(NamedTuple):
    """One 52-byte timer-log record."""

    prev_pos: int
    magic: int
    write_time_ms: int
    delay_ms: int
    log_offset: int
    log_size: int
    topic_hash: int
    reserved: int = 0

    @property
    def deliver_ms(self) -> int:
        """When the record is due (its slot's time, to the millisecond)."""
        return self.write_time_ms + self.delay_ms


class TimerCheck(NamedTuple):
    """The fields of ``config/timercheck``."""

    last_read_time_ms: int = 0
    last_timer_log_flush_pos: int = 0
    last_timer_queue_offset: int = 0
    master_timer_queue_offset: int = 0
    state_version: int = 0
    timestamp_ms: int = 0
    counter: int = 0


def slot_index(time_ms: int, precision_ms: int) -> int:
    """The index of ``time_ms``'s slot in the wheel."""
    return time_ms // precision_ms % (2 * WHEEL_SLOTS_TOTAL)


def encode_slot(time_ms: int, first_pos: int, last_pos: int, num: int, magic: int,
                precision_ms: int) -> bytes:
    """The 32 bytes of a slot."""
    return SLOT.pack(time_ms // precision_ms, first_pos, last_pos, num, magic)


def decode_slot(raw: bytes | memoryview | mmap, offset: int, time_ms: int,
                precision_ms: int) -> Slot:
    """The slot at ``offset`` of the wheel, if it holds ``time_ms``'s slot (else ``EMPTY_SLOT``)."""
    stored, first, last, num, magic = SLOT.unpack_from(raw, offset)
    if stored != time_ms // precision_ms:
        return EMPTY_SLOT
    return Slot(stored * precision_ms, first, last, num, magic)


def encode_unit(unit: TimerUnit) -> bytes:
    """The 52 bytes of a timer-log record."""
    return TIMER_UNIT.pack(TIMER_UNIT_SIZE, unit.prev_pos, unit.magic, unit.write_time_ms,
                           unit.delay_ms, unit.log_offset, unit.log_size, unit.topic_hash,
                           unit.reserved)


def decode_unit(raw: bytes | memoryview | mmap, offset: int) -> TimerUnit | None:
    """The record at ``offset``, or None where the written records end (zeros, a blank, a
    record of another size, with unknown magic bits or no message: where Apache's
    ``recoverAndRevise`` stops)."""
    if offset + TIMER_UNIT_SIZE > len(raw):
        return None
    size, prev, magic, write_ms, delay, log_offset, log_size, topic_hash, reserved = \
        TIMER_UNIT.unpack_from(raw, offset)
    if size != TIMER_UNIT_SIZE or magic == TIMER_LOG_BLANK_MAGIC or magic | 0xF != 0xF \
            or log_size <= 0:  # a record names a message; a torn one ends in zeros
        return None
    return TimerUnit(prev, magic, write_ms, delay, log_offset, log_size, topic_hash, reserved)


def is_blank(raw: bytes | memoryview | mmap, offset: int) -> bool:
    """Whether a segment's end-of-file blank starts at ``offset``."""
    return (offset + TIMER_LOG_MIN_BLANK <= len(raw)
            and TIMER_BLANK.unpack_from(raw, offset)[2] == TIMER_LOG_BLANK_MAGIC)


def encode_blank(remaining: int) -> bytes:
    """The blank that ends a timer-log file with ``remaining`` bytes left."""
    return TIMER_BLANK.pack(remaining, 0, TIMER_LOG_BLANK_MAGIC)


def encode_timer_check(check: TimerCheck) -> bytes:
    """The whole 4 KiB page."""
    return TIMER_CHECK.pack(*check).ljust(TIMER_CHECK_FILE_SIZE, b"\0")


def decode_timer_check(page: bytes) -> TimerCheck:
    """Raises ``ValueError`` for a page shorter than the four progress longs."""
    if len(page) < 32:
        raise ValueError(f"timercheck is {len(page)} bytes; expected {TIMER_CHECK_FILE_SIZE}")
    return TimerCheck(*struct.unpack_from(">" + "q" * min(7, len(page) // 8), page, 0))


__all__ = [
    "DEFAULT_TIMER_LOG_SEGMENT_BYTES", "EMPTY_SLOT", "MAGIC_DEFAULT", "MAGIC_DELETE",
    "MAGIC_ROLL", "SLOT_SIZE", "TIMER_CHECK_FILE_NAME", "TIMER_CHECK_FILE_SIZE",
    "TIMER_LOG_BLANK_MAGIC", "TIMER_LOG_DIR_NAME", "TIMER_LOG_MIN_BLANK", "TIMER_UNIT_SIZE",
    "WHEEL_BLANK_SLOTS", "WHEEL_FILE_NAME", "WHEEL_FILE_SIZE", "WHEEL_SLOTS_TOTAL", "Slot",
    "TimerCheck", "TimerUnit", "decode_slot", "decode_timer_check", "decode_unit",
    "encode_blank", "encode_slot", "encode_timer_check", "encode_unit", "is_blank",
    "slot_index",
]
