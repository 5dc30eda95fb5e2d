"""Find a store's files and read its consumer offsets, on the driver, without opening the store.

The store is only read: its segments and consume queues are listed (the Spark tasks decode
them, see ``store_decode``) and ``config/consumerOffset.json`` is parsed (its ``.bak`` when the
file itself is unreadable). Works on a copy of a live store: a file that grows or disappears
while it is listed is the tasks' concern, not an error here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from postbox.storage_engine.formats import (
    BACKUP_SUFFIX,
    COMMIT_LOG_DIR_NAME,
    CONFIG_DIR_NAME,
    CONSUME_QUEUE_DIR_NAME,
    CONSUME_QUEUE_UNIT_SIZE_BYTES,
    CONSUMER_OFFSET_FILE_NAME,
    SEGMENT_NAME_DIGITS,
    TOPIC_GROUP_SEPARATOR,
    decode_config_json,
)
from postbox.storage_engine.formats.topic_names import RETRY_TOPIC_PREFIX

from .errors import EmptyStoreError, StoreNotFoundError
from .results import StoreProblem


@dataclass(frozen=True)
class SegmentFile:
    """One commit-log segment: its path and the log position its first byte holds."""

    path: str
    base_position: int
    size_bytes: int


@dataclass(frozen=True)
class QueueFile:
    """A consume-queue file of ``topic``/``queue_id``, from queue offset ``base_offset``."""

    path: str
    topic: str
    queue_id: int
    base_offset: int
    size_bytes: int


@dataclass(frozen=True)
class CommittedOffset:
    """``group``'s next offset to consume on ``topic``/``queue_id``."""

    topic: str
    consumer_group: str
    queue_id: int
    offset: int


@dataclass
class StoreFiles:
    """What the driver found in a store directory."""

    root: Path
    segments: list[SegmentFile] = field(default_factory=list)
    queue_files: list[QueueFile] = field(default_factory=list)
    offsets: list[CommittedOffset] = field(default_factory=list)
    problems: list[StoreProblem] = field(default_factory=list)


def list_store_files(root_dir: str | os.PathLike) -> StoreFiles:
    """List the segments and consume-queue files under ``root_dir`` and read the offsets.

    Raises:
        StoreNotFoundError: ``root_dir`` is not a directory.
        EmptyStoreError: it holds neither a commit-log segment nor a consume-queue file.
    """
    root = Path(root_dir)
    if not root.is_dir():
        raise StoreNotFoundError(f"store directory {root} does not exist (--store must name the "
                                 "store root, the directory holding commitlog/ and config/)")
    found = StoreFiles(root=root.resolve())
    found.segments = _segments(root / COMMIT_LOG_DIR_NAME)
    found.queue_files = _queue_files(root / CONSUME_QUEUE_DIR_NAME, found.problems)
    if not found.segments and not found.queue_files:
        raise EmptyStoreError(f"store {root} holds no commit-log segment and no consume queue: "
                              "either it is not a Postbox/RocketMQ store root or nothing was "
                              "ever stored in it")
    found.offsets = _committed_offsets(root / CONFIG_DIR_NAME / CONSUMER_OFFSET_FILE_NAME,
                                       found.problems)
    return found


def _numbered_files(directory: Path) -> list[tuple[int, Path]]:
    if not directory.is_dir():
        return []
    return sorted((int(entry.name), Path(entry.path)) for entry in os.scandir(directory)
                  if entry.is_file() and entry.name.isdigit()
                  and len(entry.name) == SEGMENT_NAME_DIGITS)


def _segments(directory: Path) -> list[SegmentFile]:
    return [SegmentFile(str(path), base, path.stat().st_size)
            for base, path in _numbered_files(directory)]


def _queue_files(directory: Path, problems: list[StoreProblem]) -> list[QueueFile]:
    files: list[QueueFile] = []
    if not directory.is_dir():
        return files
    for topic_dir in sorted(directory.iterdir()):
        if not topic_dir.is_dir():
            continue
        for queue_dir in sorted(topic_dir.iterdir()):
            if not (queue_dir.is_dir() and queue_dir.name.isdigit()):
                continue
            for base_byte, path in _numbered_files(queue_dir):
                if base_byte % CONSUME_QUEUE_UNIT_SIZE_BYTES:
                    problems.append(StoreProblem(str(path), "consume-queue file name is not a "
                                                 "multiple of the 20-byte unit"))
                    continue
                files.append(QueueFile(str(path), topic_dir.name, int(queue_dir.name),
                                       base_byte // CONSUME_QUEUE_UNIT_SIZE_BYTES,
                                       path.stat().st_size))
    return files


def _committed_offsets(path: Path, problems: list[StoreProblem]) -> list[CommittedOffset]:
    """Offsets of every ``topic@group`` (retry topics left out: stubs never live there)."""
    table = _offset_table(path, problems)
    offsets: list[CommittedOffset] = []
    for key, queues in table.items():
        topic, separator, group = str(key).rpartition(TOPIC_GROUP_SEPARATOR)
        if not separator or topic.startswith(RETRY_TOPIC_PREFIX) or not isinstance(queues, dict):
            continue
        for queue_id, offset in queues.items():
            try:
                offsets.append(CommittedOffset(topic, group, int(queue_id), int(offset)))
            except (TypeError, ValueError):
                problems.append(StoreProblem(str(path), f"offset of {key} queue {queue_id!r} "
                                             f"is not a number: {offset!r}"))
    return offsets


def _offset_table(path: Path, problems: list[StoreProblem]) -> dict:
    reasons: list[str] = []
    for candidate in (path, path.with_name(path.name + BACKUP_SUFFIX)):
        try:
            document = decode_config_json(candidate.read_text(encoding="utf-8"))
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as error:
            reasons.append(f"{candidate.name}: {error}")
            continue
        table = document.get("offsetTable") if isinstance(document, dict) else None
        if isinstance(table, dict):
            if reasons:  # the file was bad but its backup served: say so, the offsets may lag
                problems.append(StoreProblem(str(path), "; ".join(reasons) + " (read the "
                                             "backup instead; offsets may be older)"))
            return table
        reasons.append(f"{candidate.name}: no offsetTable object")
    if reasons:
        problems.append(StoreProblem(str(path), "consumer offsets unreadable: "
                                     + "; ".join(reasons)))
    return {}


__all__ = ["CommittedOffset", "QueueFile", "SegmentFile", "StoreFiles", "list_store_files"]
