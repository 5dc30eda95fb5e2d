"""``repair_store``: set damaged spans of a commit log aside so the store opens again.

Log positions are addresses used everywhere (consume-queue units, key-index entries, offset
message ids, a slave's copy), so repair never moves a valid record. For each damaged span that
valid data follows (``damage.survey`` over the whole log):

1. its bytes are copied to ``DIR/damaged/<segment>-<position>.bin`` with a JSON description
   beside it (``.json``: segment, position, end, size, reason, time), both fsynced, before the
   log is touched;
2. the span is overwritten in place, at exactly its length, with filler every reader already
   knows: a blank record when the span runs to the end of its segment (what closes every
   segment), otherwise a **placeholder record**: a valid record of topic ``SET_ASIDE_TOPIC``
   flagged as a rolled-back transaction message, whose body names the file. Rolled-back records
   never get a consume-queue unit or a key-index entry, here and in Apache RocketMQ, so the
   dispatchers skip it and any RocketMQ tool reads past it.

Consume-queue units written for a damaged record before the damage still point at its position.
A pull that reaches one skips it with a warning (``reader.py``), so no consumer is stuck there;
``verify_store`` accepts units that point into a span listed under ``damaged/``.

A torn tail (damage nothing valid follows) is not touched: the next open cuts it, as always.

Crash behaviour: the copy is durable before the log changes; the log change is one write per
span followed by an fsync. A crash in between leaves the damaged span as it was (the next run
finds it again and sets it aside under a new name). Runs under the store lock, so never against
an open store. Not thread-safe (a command-line operation).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..clock import Clock, SystemClock
from ..config import StoreConfig
from ..errors import RepairError, StoreStateError
from ..formats import (
    RECORD_FIXED_OVERHEAD_BYTES,
    SYSFLAG_TRANSACTION_ROLLBACK,
    RecordKind,
    check_record,
    encode_blank_record,
    encode_host,
    encode_record_parts,
    masked_crc32,
)
from .damage import DAMAGED_DIR_NAME, Damage, survey
from .fsutil import StoreLock, fsync_dir
from .segment import MappedSegment
from .segment_set import SegmentSet
from .store_layout import infer_config

log = logging.getLogger(__name__)

SET_ASIDE_TOPIC = "POSTBOX_SET_ASIDE"
"""Topic of the placeholder records repair writes (rolled back: never delivered)."""
_PLACEHOLDER_HOST = encode_host("127.0.0.1", 0)


@dataclass
class RepairReport:
    """What ``repair_store`` did."""

    store: str
    set_aside: list[dict[str, Any]] = field(default_factory=list)  # each span's JSON description
    valid_records: int = 0  # valid records in the log (all kept at their positions)
    log_end: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"store": self.store, "set_aside": list(self.set_aside),
                "valid_records": self.valid_records, "log_end": self.log_end}


def repair_store(root_dir: str | os.PathLike[str], config: StoreConfig | None = None, *,
                 clock: Clock | None = None) -> RepairReport:
    """Set every damaged span of the store's commit log aside (see the module docstring).

    Raises:
        StoreStateError: ``root_dir`` holds no commit log.
        StoreLockedError: the store is open.
        RepairError: a span cannot be replaced at its length (nothing of it was changed).
    """
    root = Path(root_dir)
    if not (root / "commitlog").is_dir():
        raise StoreStateError(f"{root} is not a store: it has no commitlog directory")
    config = config or infer_config(root)
    clock = clock or SystemClock()
    lock = StoreLock(root)
    lock.acquire()
    try:
        segments = SegmentSet(root / "commitlog", config.commit_log.segment_size_bytes)
        segments.load()
        try:
            found = survey(segments.segments, segments.min_position)
            report = RepairReport(str(root), valid_records=found.records, log_end=found.end)
            for damage in found.damages:
                report.set_aside.append(_set_aside(root, segments, damage, clock.now_ms()))
        finally:
            segments.close()
    finally:
        lock.release()
    return report


def _set_aside(root: Path, segments: SegmentSet, damage: Damage, now_ms: int) -> dict[str, Any]:
    """Copy one span out, then overwrite it with filler of the same length."""
    segment = segments.find(damage.position)
    assert segment is not None  # damage is found inside a segment
    offset = damage.position - segment.base_position
    filler_kind, filler = _filler(segment, offset, damage, now_ms)
    directory = root / DAMAGED_DIR_NAME
    directory.mkdir(exist_ok=True)
    stem = _free_stem(directory, f"{segment.path.name}-{damage.position}")
    description = {
        "segment": segment.path.name, "position": damage.position, "end": damage.end,
        "size_bytes": damage.size_bytes, "reason": damage.reason, "set_aside_at_ms": now_ms,
        "bytes_file": f"{stem}.bin", "replaced_by": filler_kind,
    }
    _write_durably(directory / f"{stem}.bin", bytes(segment.buffer[offset:offset +
                                                                    damage.size_bytes]))
    _write_durably(directory / f"{stem}.json",
                   json.dumps(description, indent=2).encode() + b"\n")
    fsync_dir(directory)
    segment.buffer[offset:offset + len(filler)] = filler
    segment.buffer.flush()
    log.warning("[repair] [set-aside] %s: bytes kept in %s, replaced by a %s",
                damage.describe(), directory / f"{stem}.bin", filler_kind)
    return description


def _filler(segment: MappedSegment, offset: int, damage: Damage,
            now_ms: int) -> tuple[str, bytes]:
    """(kind, bytes) that fill the span exactly: a closing blank, or a placeholder record.

    A span that runs to the end of its segment, or to the blank record closing it, becomes a
    blank record (then covering the old blank too: its bytes are kept in the copy).
    """
    span = damage.size_bytes
    end_offset = offset + span
    size = segment.size_bytes
    if end_offset == size or check_record(segment.buffer, end_offset, size,
                                          check_crc=False).kind == RecordKind.BLANK:
        return "blank record", encode_blank_record(size - offset) + bytes(size - offset - 8)
    topic_length = min(len(SET_ASIDE_TOPIC), span - RECORD_FIXED_OVERHEAD_BYTES)
    if topic_length < 1:
        raise RepairError(f"{damage.describe()}: {span} bytes is too short for a placeholder "
                          f"record ({RECORD_FIXED_OVERHEAD_BYTES + 1} at least); restore the "
                          "segment from a replica or a backup")
    topic = SET_ASIDE_TOPIC[:topic_length].encode()
    body_length = span - RECORD_FIXED_OVERHEAD_BYTES - topic_length
    note = (f"set aside by postbox store repair: {DAMAGED_DIR_NAME}/"
            f"{Path(damage.segment).name}-{damage.position}.bin ({damage.reason})").encode()
    body = note[:body_length].ljust(body_length, b" ")
    record = encode_record_parts(topic, False, body, b"", 0, 0, 0, damage.position,
                                 SYSFLAG_TRANSACTION_ROLLBACK, now_ms, _PLACEHOLDER_HOST,
                                 now_ms, _PLACEHOLDER_HOST, 0, 0, masked_crc32(body))
    return "placeholder record", record


def _free_stem(directory: Path, stem: str) -> str:
    """``stem``, or ``stem-2``, ``stem-3``… if a file of that name exists (a repeated repair)."""
    candidate, number = stem, 1
    while (directory / f"{candidate}.json").exists() or (directory / f"{candidate}.bin").exists():
        number += 1
        candidate = f"{stem}-{number}"
    return candidate


def _write_durably(path: Path, data: bytes) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as file:
        file.write(data)
        file.flush()
        os.fdatasync(file.fileno())
    os.replace(temporary, path)


def set_aside_spans(root_dir: Path) -> list[tuple[int, int, str]]:
    """``(position, end, bytes file)`` of every span repair set aside in this store."""
    directory = Path(root_dir) / DAMAGED_DIR_NAME
    spans = []
    if directory.is_dir():
        for path in sorted(directory.glob("*.json")):
            try:
                described = json.loads(path.read_text())
                spans.append((int(described["position"]), int(described["end"]),
                              str(directory / described["bytes_file"])))
            except (OSError, ValueError, KeyError, TypeError) as error:
                log.warning("[repair] cannot read %s: %s", path, error)
    return spans
