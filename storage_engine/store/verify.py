"""``verify_store``: an fsck that reads a store directory and lists every inconsistency.

Checks, without writing anything: commit-log segment names and sizes, every record (magic,
lengths, body CRC, its own position field, the 8-byte end-of-segment rule); every consume-queue
unit against the record it points at (size, topic, queue id, queue offset, tag hash); that every
queue holds every record of its (topic, queue) — none missing, none extra; every key-index entry
against a record carrying a key with that hash; the checkpoint against the log (its times never
after the newest record, its confirm position never past the end, and equal to it after a clean
close unless it is 0: not recorded, as in RocketMQ 4.x stores and RocketMQ 5 slaves). Units and
entries pointing below the first segment were removed by retention and are skipped. Problems are
returned as strings that carry the position; an empty list means the files agree. A directory
that is not a store (no ``commitlog/``, no ``checkpoint``) is reported as such, never as
"0 problems". Works on a store another process has open.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from ..config import StoreConfig
from ..errors import NotAStoreError
from ..formats import (
    CHECKPOINT_FILE_SIZE_BYTES,
    CONSUME_QUEUE_UNIT,
    FILLER_UNIT_SIZE,
    INDEX_ENTRY,
    INDEX_HEADER,
    DispatchRecord,
    RecordKind,
    check_record,
    decode_checkpoint,
    decode_for_dispatch,
    entry_position,
    index_key_hash,
    is_ext_address,
    split_keys,
    tag_hash,
    takes_queue_offset,
)
from ..formats.topic_names import DELAY_TOPIC
from .damage import FileSegment, next_valid_position
from .repair import set_aside_spans
from .store_layout import infer_config, require_store


def verify_store(root_dir: str | os.PathLike[str], config: StoreConfig | None = None) -> list[str]:
    """Return every problem found in the store at ``root_dir`` (empty when consistent).

    Without ``config`` the sizes are inferred from the store (``infer_config``). A directory
    that is not a store (``store_layout.require_store``) is one problem, "not a store: …".
    """
    root = Path(root_dir)
    try:
        require_store(root)
    except NotAStoreError as error:
        return [str(error)]
    config = config or infer_config(root)
    problems: list[str] = []
    records, log_end = _scan_log(root / "commitlog", config, problems)
    by_position = {record.log_position: record for record in records}
    log_min = _log_min_position(root / "commitlog")
    spans = set_aside_spans(root)

    def set_aside(position: int) -> bool:  # units and entries of records repair set aside
        return any(start <= position < end for start, end, _file in spans)

    _check_queues(root / "consumequeue", records, by_position, log_min, set_aside, config,
                  problems)
    _check_key_index(root / "index", by_position, log_min, set_aside, config, problems)
    _check_checkpoint(root, records, log_end, problems)
    return problems


def _log_min_position(directory: Path) -> int:
    """First position still on disk: entries below it were removed by retention, not lost."""
    names = sorted(n for n in os.listdir(directory) if n.isdigit()) if directory.is_dir() else []
    return int(names[0]) if names else 0


def _check_checkpoint(root: Path, records: list[DispatchRecord], log_end: int,
                      problems: list[str]) -> None:
    """The checkpoint may lag the log but never lead it; after a clean close it matches."""
    path = root / "checkpoint"
    if not path.exists():
        if records:
            problems.append("checkpoint: missing")
        return
    page = path.read_bytes()
    if len(page) != CHECKPOINT_FILE_SIZE_BYTES:
        problems.append(f"checkpoint: {len(page)} bytes, expected {CHECKPOINT_FILE_SIZE_BYTES}")
        return
    state = decode_checkpoint(page)
    newest_ms = max((r.store_timestamp_ms for r in records), default=0)
    end = log_end
    for name in ("log_flushed_timestamp_ms", "queue_flushed_timestamp_ms",
                 "key_index_flushed_timestamp_ms"):
        value = getattr(state, name)
        if not 0 <= value <= max(newest_ms, 0):
            problems.append(f"checkpoint: {name}={value} is after the newest record "
                            f"({newest_ms})")
    if state.confirm_position > end or state.confirm_position < 0:
        problems.append(f"checkpoint: confirm position {state.confirm_position} is beyond the "
                        f"log end {end}")
    elif (not (root / "abort").exists() and records
          and state.confirm_position not in (0, end)):  # 0: not recorded (RocketMQ 4.x, 5.x slave)
        problems.append(f"checkpoint: confirm position {state.confirm_position} != log end {end} "
                        "after a clean close")


def _scan_log(directory: Path, config: StoreConfig,
              problems: list[str]) -> tuple[list[DispatchRecord], int]:
    """Every valid record, and the log end position (after the last record, or after the
    closing blank record of its segment). Damage that valid records follow (in the same or a
    later segment) is named as mid-log corruption and the scan goes on after it."""
    size = config.commit_log.segment_size_bytes
    if not directory.is_dir():
        return [], 0
    names = sorted(n for n in os.listdir(directory) if n.isdigit())
    records: list[DispatchRecord] = []
    expected_base = int(names[0]) if names else 0
    segments: list[FileSegment] = []
    for name in names:
        path = directory / name
        if int(name) != expected_base or len(name) != 20:
            problems.append(f"commitlog/{name}: expected a segment named {expected_base:020d}")
        expected_base = int(name) + size
        if path.stat().st_size != size:
            if path.stat().st_size == 0 and name == names[-1]:
                continue
            problems.append(f"commitlog/{name}: {path.stat().st_size} bytes, expected {size}")
            continue
        segments.append(FileSegment(int(name), path.read_bytes(), path))
    log_end = segments[0].base_position if segments else expected_base
    ended = False
    for index, segment in enumerate(segments):
        name = segment.path.name
        if ended:
            if segment.buffer.strip(b"\0"):
                problems.append(f"commitlog/{name}: data after the end of the log")
            continue
        ended = _scan_segment(segments, index, records, problems)
        if ended:
            in_segment = [r for r in records[-1:] if r.log_position >= segment.base_position]
            log_end = (in_segment[0].log_position + in_segment[0].size if in_segment
                       else segment.base_position)
        else:
            log_end = segment.base_position + size
    return records, log_end


def _scan_segment(segments: list[FileSegment], index: int, records: list[DispatchRecord],
                  problems: list[str]) -> bool:
    """Scan one segment; returns True when the log ends inside it."""
    segment = segments[index]
    base, data = segment.base_position, segment.buffer
    offset = 0
    while True:
        check = check_record(data, offset, len(data), check_crc=True)
        if check.kind == RecordKind.BLANK:
            return False
        resume = None
        if check.kind in (RecordKind.END, RecordKind.CORRUPT):
            resume = next_valid_position(segments[index:], base + offset)
        if resume is not None:  # valid records follow: mid-log corruption, not the end
            reason = check.reason or "zeros where a record should start"
            problems.append(f"commitlog/{segment.path.name} position={base + offset}: "
                            f"mid-log corruption: {reason}; valid records follow from "
                            f"position={resume} (`postbox store repair` sets the damage aside)")
            if resume >= base + len(data):
                return False
            offset = resume - base
            continue
        if check.kind == RecordKind.END:
            if offset < len(data) and data[offset:].strip(b"\0"):
                problems.append(f"position={base + offset}: non-zero bytes after the end of data")
            if len(data) - offset < 8 and offset != len(data):
                problems.append(f"position={base + offset}: segment ends without a blank record")
            return True
        if check.kind == RecordKind.CORRUPT:
            problems.append(f"position={base + offset}: corrupt record at the end of the log "
                            f"(torn tail: the next open cuts it): {check.reason}")
            return True
        _kind, size, record = decode_for_dispatch(data, offset, len(data))
        if record is None:
            problems.append(f"position={base + offset}: corrupt record: its topic is not UTF-8")
            return True
        if record.log_position != base + offset:
            problems.append(f"position={base + offset}: record says it is at position="
                            f"{record.log_position}")
        if len(data) - offset - size < 8:
            problems.append(f"position={base + offset}: record leaves fewer than 8 bytes in its "
                            "segment")
        records.append(record)
        offset += size


def _check_queues(directory: Path, records: list[DispatchRecord],
                  by_position: dict[int, DispatchRecord], log_min: int,
                  set_aside: Callable[[int], bool], config: StoreConfig,
                  problems: list[str]) -> None:
    expected: dict[tuple[str, int], list[DispatchRecord]] = {}
    for record in records:
        if takes_queue_offset(record.sys_flag):
            expected.setdefault((record.topic, record.queue_id), []).append(record)
    seen: set[tuple[str, int]] = set()
    if directory.is_dir():
        for topic in sorted(os.listdir(directory)):
            for queue_name in sorted(os.listdir(directory / topic)):
                key = (topic, int(queue_name)) if queue_name.isdigit() else (topic, -1)
                seen.add(key)
                units = _read_units(directory / topic / queue_name, config, problems)
                units = [u if u[0] >= log_min and not set_aside(u[0])
                         else (0, FILLER_UNIT_SIZE, 0) for u in units]
                _check_queue(key, units, expected.get(key, []), by_position, problems)
    for key, queue_records in expected.items():
        if key not in seen:
            problems.append(f"queue {key[0]}/{key[1]}: {len(queue_records)} records in the log "
                            "but no consume queue")


def _read_units(directory: Path, config: StoreConfig,
                problems: list[str]) -> list[tuple[int, int, int]]:
    file_size = config.consume_queue.file_size_bytes
    units: list[tuple[int, int, int]] = []
    for name in sorted(n for n in os.listdir(directory) if n.isdigit()):
        data = (directory / name).read_bytes()
        if len(data) != file_size:
            problems.append(f"{directory}/{name}: {len(data)} bytes, expected {file_size}")
            return units
        if not units:
            units.extend([(0, FILLER_UNIT_SIZE, 0)] * (int(name) // 20))
        for unit in CONSUME_QUEUE_UNIT.iter_unpack(data):
            if unit[0] < 0 or unit[1] <= 0:
                return units
            units.append(unit)
    return units


def _check_queue(key: tuple[str, int], units: list[tuple[int, int, int]],
                 queue_records: list[DispatchRecord], by_position: dict[int, DispatchRecord],
                 problems: list[str]) -> None:
    topic, queue_id = key
    real_units = [(i, u) for i, u in enumerate(units) if u[1] != FILLER_UNIT_SIZE]
    for offset, (position, size, code) in real_units:
        record = by_position.get(position)
        where = f"queue {topic}/{queue_id} offset={offset}"
        if record is None:
            problems.append(f"{where}: points at position={position}, where no record starts")
            continue
        if (record.size, record.topic, record.queue_id, record.queue_offset) != (
                size, topic, queue_id, offset):
            problems.append(f"{where}: unit (position={position}, size={size}) does not match "
                            f"the record ({record.topic}/{record.queue_id} "
                            f"offset={record.queue_offset}, size={record.size})")
        elif not is_ext_address(code) and topic != DELAY_TOPIC and code != tag_hash(record.tags):
            problems.append(f"{where}: tag hash {code} != hash of {record.tags!r}")
    in_queue = {u[0] for _i, u in real_units}
    first = queue_records[0].queue_offset if queue_records else 0
    for record in queue_records:
        if record.log_position not in in_queue and record.queue_offset >= first:
            problems.append(f"queue {topic}/{queue_id}: record at position={record.log_position} "
                            f"(offset {record.queue_offset}) is missing from the consume queue")


def _check_key_index(directory: Path, by_position: dict[int, DispatchRecord], log_min: int,
                     set_aside: Callable[[int], bool], config: StoreConfig,
                     problems: list[str]) -> None:
    if not directory.is_dir():
        return
    for name in sorted(n for n in os.listdir(directory) if n.isdigit()):
        data = (directory / name).read_bytes()
        geometry = _index_geometry(len(data), config)
        if geometry is None:
            problems.append(f"index/{name}: size {len(data)} does not match the configured "
                            "key-index slot and entry counts")
            continue
        _check_index_file(name, data, geometry, by_position, log_min, set_aside, problems)


def _index_geometry(size: int, config: StoreConfig) -> tuple[int, int] | None:
    slots, entries = config.key_index.slot_count_max, config.key_index.entry_count_max
    return (slots, entries) if 40 + slots * 4 + entries * 20 == size else None


def _check_index_file(name: str, data: bytes, geometry: tuple[int, int],
                      by_position: dict[int, DispatchRecord], log_min: int,
                      set_aside: Callable[[int], bool], problems: list[str]) -> None:
    slots, _entries = geometry
    *_times, _begin, _end, _used, count = INDEX_HEADER.unpack_from(data, 0)
    for number in range(1, max(count, 1)):
        key_hash, position, _diff, previous = INDEX_ENTRY.unpack_from(
            data, entry_position(number, slots))
        record = by_position.get(position)
        where = f"index/{name} entry {number}"
        if (record is None and position < log_min) or set_aside(position):
            continue  # its record was removed by retention
        if record is None:
            problems.append(f"{where}: points at position={position}, where no record starts")
            continue
        keys = split_keys(record.keys) + ([record.unique_key] if record.unique_key else [])
        if key_hash not in {index_key_hash(f"{record.topic}#{key}") for key in keys}:
            problems.append(f"{where}: hash {key_hash} matches no key of the record at "
                            f"position={position}")
        if not 0 <= previous < number:
            problems.append(f"{where}: chain link {previous} does not point to an older entry")
