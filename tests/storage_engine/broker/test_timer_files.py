"""The timer wheel's files as Apache RocketMQ 5.x lays them out: ``timerwheel`` slots,
``timerlog/`` records (chained per slot, a blank at a file end), ``config/timercheck``; a round
trip through ``TimerFiles`` (reopen, revise, mark deleted), Apache's byte layout, and files that
do not decode refused with a clear error and left as they were."""

from __future__ import annotations

import hashlib
import struct

import pytest

from postbox.storage_engine.broker.timer_files import TimerFiles
from postbox.storage_engine.errors import CorruptionError
from postbox.storage_engine.formats.hashing import java_string_hashcode
from postbox.storage_engine.formats.timer_layout import (
    MAGIC_DEFAULT,
    MAGIC_DELETE,
    TIMER_CHECK_FILE_SIZE,
    TIMER_LOG_BLANK_MAGIC,
    WHEEL_FILE_SIZE,
    TimerCheck,
    TimerUnit,
    decode_timer_check,
    decode_unit,
    encode_timer_check,
    encode_unit,
    slot_index,
)

SEGMENT = 4096
T0 = 1_700_000_000_000


def unit(deliver_ms: int, log_offset: int, magic: int = MAGIC_DEFAULT) -> TimerUnit:
    write_ms = deliver_ms // 1000 * 1000 - 5000
    return TimerUnit(-1, magic, write_ms, deliver_ms - write_ms, log_offset, 200,
                     java_string_hashcode("topic"))


def test_layouts_are_apaches():
    assert WHEEL_FILE_SIZE == 38_707_200
    raw = encode_unit(TimerUnit(7, 3, T0, 1500, 4096, 321, -5, 0))
    assert len(raw) == 52
    assert struct.unpack(">iqiqiqiiq", raw) == (52, 7, 3, T0, 1500, 4096, 321, -5, 0)
    assert TIMER_LOG_BLANK_MAGIC == -875286124  # 0xBBCCDDEE ^ 1880681586 + 8, as Java ints
    assert java_string_hashcode("LabJavaMain") == 1729500040  # String.hashCode()
    assert java_string_hashcode("γάμμα🎉") == 708041733
    assert slot_index(T0 + 999, 1000) == (T0 // 1000) % (2 * 604_800)
    page = encode_timer_check(TimerCheck(T0, 104, 3, 3, 0, T0, 9))
    assert len(page) == TIMER_CHECK_FILE_SIZE and decode_timer_check(page) == TimerCheck(
        T0, 104, 3, 3, 0, T0, 9)
    assert decode_timer_check(page[:32]) == TimerCheck(T0, 104, 3, 3)  # before dataVersion
    assert decode_unit(bytes(52), 0) is None  # zeros: where the log ends


def test_round_trip_chains_blank_and_reopen(tmp_path):
    files = TimerFiles(tmp_path, 1000, SEGMENT)
    assert files.load() is None and not files.active
    assert not (tmp_path / "timerwheel").exists()  # nothing until the first record
    positions = [files.append(unit(T0 + 300 + 5 * n, 1000 * n)) for n in range(100)]
    assert positions[:3] == [0, 52, 104]
    per_file = (SEGMENT - 16) // 52  # a record leaves room for the blank
    assert positions[per_file] == SEGMENT  # the next one opens the next file
    blank = (tmp_path / "timerlog" / f"{0:020d}").read_bytes()[per_file * 52:per_file * 52 + 16]
    assert struct.unpack(">iqi", blank) == (SEGMENT - per_file * 52, 0, TIMER_LOG_BLANK_MAGIC)
    slot = files.slot(T0 + 500)
    assert (slot.time_ms, slot.first_pos, slot.last_pos, slot.num) == (
        T0, 0, positions[-1], 100)
    assert [p for p, _ in files.chain(slot)] == positions[::-1]
    files.mark_deleted(positions[5])
    files.write_check(T0, 100, T0)
    files.close()
    again = TimerFiles(tmp_path, 1000, SEGMENT)
    check = again.load()
    assert check is not None and check.last_timer_queue_offset == 100
    assert again.write_pos == positions[-1] + 52
    chained = dict(again.chain(again.slot(T0)))
    assert chained[positions[5]].magic == MAGIC_DEFAULT | MAGIC_DELETE
    assert [s.time_ms for s in again.pending_slots(T0)] == [T0]
    assert [(offset, position) for offset, position, _ in again.pending_units(T0)] == [
        (1000 * n, positions[n]) for n in range(100)]  # by message position
    assert list(again.pending_slots(T0 + 1000)) == []
    assert again.append(unit(T0 + 2000, 5)) == positions[-1] + 52
    again.close()


def test_a_slot_behind_the_log_is_revised_at_load(tmp_path):
    files = TimerFiles(tmp_path, 1000, SEGMENT)
    files.load()
    files.append(unit(T0 + 1, 1))
    files.write_check(T0, 1, T0)
    files.close()
    with open(tmp_path / "timerlog" / f"{0:020d}", "r+b") as log_file:  # appended, slot lost
        log_file.seek(52)
        log_file.write(encode_unit(unit(T0 + 2, 2)._replace(prev_pos=0)))
    files = TimerFiles(tmp_path, 1000, SEGMENT)
    files.load()
    assert files.slot(T0).last_pos == 52 and len(list(files.chain(files.slot(T0)))) == 2
    files.close()


def digests(root):
    return {p.relative_to(root): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def three_written(root) -> list[int]:
    """Timer files at ``root`` holding three records, checkpointed and closed: their
    positions."""
    files = TimerFiles(root, 1000, SEGMENT)
    files.load()
    positions = [files.append(unit(T0 + n, n)) for n in range(3)]
    files.write_check(T0, 3, T0)
    assert not (root / "config" / "timercheck.new").exists()  # written beside, renamed
    files.close()
    return positions


@pytest.mark.parametrize("damage", ["torn flushed record", "wheel size", "short check",
                                    "mixed sizes"])
def test_damaged_files_are_refused_and_left_as_they_were(tmp_path, damage):
    three_written(tmp_path)
    if damage == "torn flushed record":  # the last of three, flushed: no kill leaves that
        with open(tmp_path / "timerlog" / f"{0:020d}", "r+b") as log_file:
            log_file.seek(2 * 52 + 20)
            log_file.write(bytes(32))
    elif damage == "wheel size":
        with open(tmp_path / "timerwheel", "r+b") as wheel:
            wheel.truncate(WHEEL_FILE_SIZE - 32)
    elif damage == "short check":
        (tmp_path / "config" / "timercheck").write_bytes(b"\0" * 16)
    else:
        (tmp_path / "timerlog" / f"{SEGMENT:020d}").write_bytes(b"\0" * 100)
    before = digests(tmp_path)
    with pytest.raises(CorruptionError) as refused:
        TimerFiles(tmp_path, 1000, SEGMENT).load()
    assert any(name in str(refused.value) for name in ("timerlog", "timerwheel", "timercheck"))
    assert digests(tmp_path) == before


def test_the_checkpoint_names_the_position_the_last_flush_reached(tmp_path):
    files = TimerFiles(tmp_path, 1000, SEGMENT)
    files.load()
    files.append(unit(T0 + 1, 1))
    files.flush()
    files.append(unit(T0 + 2, 2))
    files.write_check(T0, 2, T0)  # between flushes: the second record may not be durable yet
    page = (tmp_path / "config" / "timercheck").read_bytes()
    assert decode_timer_check(page).last_timer_log_flush_pos == 52
    files.close()
    page = (tmp_path / "config" / "timercheck").read_bytes()
    assert decode_timer_check(page).last_timer_log_flush_pos == 104


def test_files_a_crash_left_empty_at_their_creation_are_sized_and_the_slots_rebuilt(tmp_path):
    positions = three_written(tmp_path)
    (tmp_path / "timerwheel").write_bytes(b"")  # as a crash before its sizing leaves it
    (tmp_path / "timerlog" / f"{SEGMENT:020d}").write_bytes(b"")
    again = TimerFiles(tmp_path, 1000, SEGMENT)
    assert again.load() is not None
    assert (tmp_path / "timerwheel").stat().st_size == WHEEL_FILE_SIZE
    assert [p for p, _ in again.chain(again.slot(T0))] == positions[::-1]
    assert again.write_pos == positions[-1] + 52
    again.close()


def test_an_append_a_kill_cut_short_after_the_last_flush_is_written_over(tmp_path, caplog):
    files = TimerFiles(tmp_path, 1000, SEGMENT)
    files.load()
    whole = [files.append(unit(T0 + n, n)) for n in range(2)]
    files.write_check(T0, 2, T0)
    files.flush()
    torn = encode_unit(unit(T0 + 5, 5)._replace(prev_pos=whole[-1]))[:20]
    with open(tmp_path / "timerlog" / f"{0:020d}", "r+b") as log_file:
        log_file.seek(2 * 52)
        log_file.write(torn)  # a kill inside the copy: the slot was never pointed at it
    files.close()
    again = TimerFiles(tmp_path, 1000, SEGMENT)
    assert again.load() is not None
    assert "cut short at position 104" in caplog.text and torn.hex() in caplog.text
    assert again.write_pos == 104 and again.last_unit == unit(T0 + 1, 1)._replace(prev_pos=0)
    assert again.append(unit(T0 + 5, 5)) == 104  # written over
    assert [p for p, _ in again.chain(again.slot(T0))] == [104, 52, 0]
    again.close()


def test_an_empty_checkpoint_reads_the_whole_wheel_back(tmp_path, caplog):
    positions = three_written(tmp_path)
    (tmp_path / "config" / "timercheck").write_bytes(b"")  # an older Postbox's crash
    again = TimerFiles(tmp_path, 1000, SEGMENT)
    assert again.load() == TimerCheck()
    assert "timercheck is empty" in caplog.text
    assert [p for _, p, _ in again.pending_units(T0 - 5000)] == positions
    again.close()


def test_files_whose_every_record_was_delivered_are_deleted_from_the_start(tmp_path):
    files = TimerFiles(tmp_path, 1000, SEGMENT)
    files.load()
    per_file = (SEGMENT - 16) // 52
    moments = [T0 + 1000 * n for n in range(per_file)]  # file 0
    moments += [T0 + 500_000] + [T0 + 1000 * n for n in range(per_file - 1)]  # file 1: one late
    moments += [T0 + 1000 * n for n in range(per_file)] + [T0]  # file 2, and the last, file 3
    positions = [files.append(unit(moment, n)) for n, moment in enumerate(moments)]
    assert positions[-1] == 3 * SEGMENT
    assert files.delete_delivered() == []  # no checkpoint: nothing is known delivered
    files.write_check(T0 + 1000 * per_file, len(moments), T0)
    files.flush()
    names = lambda: sorted(p.name for p in (tmp_path / "timerlog").iterdir())  # noqa: E731
    assert files.delete_delivered() == [tmp_path / "timerlog" / f"{0:020d}"]
    assert names() == [f"{n * SEGMENT:020d}" for n in (1, 2, 3)]  # file 1 holds a pending one
    files.write_check(T0 + 600_000, len(moments), T0)
    files.flush()
    assert [p.name for p in files.delete_delivered()] == [f"{n * SEGMENT:020d}" for n in (1, 2)]
    assert names() == [f"{3 * SEGMENT:020d}"]  # never the last
    files.close()
    again = TimerFiles(tmp_path, 1000, SEGMENT)
    assert again.load() is not None and again.write_pos == 3 * SEGMENT + 52
    assert again.append(unit(T0 + 700_000, 9)) == 3 * SEGMENT + 52
    assert [p for _, p, _ in again.pending_units(T0 + 600_000)] == [3 * SEGMENT + 52]
    again.close()
