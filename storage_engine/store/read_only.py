"""A read-only view of a store that another process may be writing (``MessageStore.open(...,
read_only=True)``): what inspection tools open.

Safe against the writer by construction:

- no lock is taken (the writer's ``lock`` file is only looked at with ``F_GETLK``, which takes
  nothing), so a broker can start, stop or restart while an inspection runs;
- every file is opened ``O_RDONLY``, and mapped ``PROT_READ`` (``ReadOnlySegment``: a write
  through a mapping is a ``TypeError``, not a changed byte) or, for consume queues, read with
  ``pread`` (``UnmappedSegment``); nothing is created, extended,
  truncated, zeroed, deleted or reserved (no ``abort``, no checkpoint, no layout file, no config
  table), and no recovery runs;
- a tail being written is cut off, never read half-written. The commit log ends at the last
  record that passes its checks with its body CRC; while a writer holds the store it ends,
  further, at the end of the last record dispatched to a consume queue (the writer dispatches a
  record only once it is complete, so no torn property bytes are read). Consume-queue units are
  read up to the first unit that is not valid (a unit being written reads as zeros or a step
  backwards) and never past that log end; key-index entries past the header's count are
  counted by reading on until an empty entry (the writer defers the header), and entries that
  name positions past the log end are skipped by the reader.

A file the writer is creating at this moment (shorter than its configured size) is left out:
the view is what existed, complete, when it was opened. The view is a snapshot of the moment
of opening; open again to see newer messages. Opened again with the previous view's
``tail_mark`` (its end and a digest of the bytes before it), the tail scan starts at that end
when those bytes are still there unchanged (a log cut and written again after a crash is not:
it is scanned as usual); records are checked, and their pages kept from piling up in the
process, either way.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import logging
import mmap
import os
import struct
from pathlib import Path
from typing import NamedTuple

from ..contract.topics import validate_topic
from ..errors import ConfigMismatchError, InvalidTopicError
from ..formats import (
    FILLER_UNIT_SIZE,
    INDEX_ENTRY,
    INDEX_HEADER,
    entry_position,
    index_file_size,
)
from .commit_log import CommitLog
from .consume_queue import UNIT, ConsumeQueue
from .consume_queue_set import ConsumeQueueSet
from .damage import next_valid_position
from .fsutil import LOCK_FILE_NAME
from .key_index import KeyIndex, KeyIndexFile
from .recovery import SCAN_SEGMENTS_BACK
from .segment import SCAN_WINDOW_BYTES, MappedSegment
from .segment_set import SegmentSet

log = logging.getLogger(__name__)

_ENTRY_SIZE_BYTES = INDEX_ENTRY.size
_ENTRY_SCAN_CHUNK = 4096  # entries read per chunk when counting a live file's entries
TAIL_MARK_BYTES = 4096
_NO_MAPPING = mmap.mmap(-1, 1)
_NO_MAPPING.close()


class TailMark(NamedTuple):
    """Where a read-only view's commit log ended, and a digest of the (at most
    ``TAIL_MARK_BYTES``) bytes of its segment before that end."""

    end: int
    digest: bytes


class ReadOnlySegment(MappedSegment):
    """A segment file opened ``O_RDONLY`` and mapped ``PROT_READ``: it cannot be written."""

    __slots__ = ()

    def __init__(self, path: Path, base_position: int,
                 size_bytes: int) -> None:
        self.path = path
        self.base_position = base_position
        self.size_bytes = size_bytes
        self.written_position = self.flushed_position = size_bytes
        self.allocated_end = 0  # ``data_end_bound`` asks the file system where data ends
        self._files = None  # mapped for good, never closed by an ``OpenFiles``
        self.pins = 0
        self.retired = False
        self.open_handle()

    def open_handle(self) -> None:
        """Open the file ``O_RDONLY`` and map it ``PROT_READ``."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            self.buffer = mmap.mmap(fd, self.size_bytes, prot=mmap.PROT_READ)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd


class UnmappedSegment(ReadOnlySegment):
    """A segment file opened ``O_RDONLY`` and read with ``pread``, never mapped: what a view
    reads of a consume queue. A read through a mapping maps the cached pages around it too
    (fault-around), so thousands of small queue files read a unit or two each would keep
    tens of kilobytes each in the process; a ``pread`` keeps nothing."""

    __slots__ = ()

    def open_handle(self) -> None:
        """Open the file ``O_RDONLY`` (``buffer`` is a closed mapping: any use is an error)."""
        self.buffer = _NO_MAPPING
        self._fd = os.open(self.path, os.O_RDONLY)

    def read(self, position: int, size: int) -> bytes:
        """``size`` bytes at ``position`` (fewer at the end of the file)."""
        return self.read_file(position, size)

    def unpack(self, layout: struct.Struct, position: int) -> tuple:
        """``layout`` unpacked at ``position``."""
        return layout.unpack(self.read_file(position, layout.size))

    def release_pages(self, start: int, end: int) -> None:
        """Nothing: no page of the file is mapped."""


def writer_holds(root_dir: Path) -> bool:
    """Whether a process holds the store's ``lock`` file (asked with ``F_GETLK``: no lock is
    taken, so a writer starting at this moment is never refused)."""
    try:
        fd = os.open(root_dir / LOCK_FILE_NAME, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        query = struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
        return struct.unpack("hhqqi", answer)[0] != fcntl.F_UNLCK
    finally:
        os.close(fd)


def _map_files(segments: SegmentSet, kind: type[ReadOnlySegment] = ReadOnlySegment) -> None:
    """Open the set's files read-only as ``kind`` (mapped, or not), in order; stop at a gap or a
    file still being created (empty, the last one). A first file of another size is a
    ``ConfigMismatchError``."""
    directory = segments.directory
    if not directory.is_dir():
        return
    size = segments.segment_size_bytes
    names = sorted(n for n in os.listdir(directory) if n.isdigit() and len(n) == 20)
    for index, name in enumerate(names):
        base = int(name)
        if segments.segments and base != segments.segments[-1].base_position + size:
            log.warning("[read-only] %s: a file before %s is missing; the view ends there",
                        directory, name)
            return
        try:
            actual = os.stat(directory / name).st_size
            if actual != size and (index == 0 or index < len(names) - 1) and actual:
                raise ConfigMismatchError(
                    f"{directory / name} is {actual} bytes but the configured file size is "
                    f"{size}: open the store with the size it was written with",
                    path=str(directory / name))
            if actual != size:
                return  # the last file, being created (or cut short): not part of the view
            segments.segments.append(kind(directory / name, base, size))
        except FileNotFoundError:
            return  # deleted by retention meanwhile


def _trim(segments: SegmentSet, end: int) -> None:
    """Forget (without touching the files) everything at and after ``end``."""
    while segments.segments and segments.segments[-1].base_position >= end and (
            len(segments.segments) > 1 or segments.segments[-1].base_position > end):
        segments.segments.pop().close()
    last = segments.last
    if last is not None:
        last.written_position = last.flushed_position = min(
            last.size_bytes, max(0, end - last.base_position))


def load_commit_log(commit_log: CommitLog, writer_live: bool,
                    after: TailMark | None = None) -> None:
    """Map the log and find the end of its valid records (body CRCs checked), scanning the last
    segments as recovery does, or from ``after``'s end when its bytes are unchanged. With no
    writer, valid records after that end are mid-log damage: ``MidLogCorruptionError`` names it
    and ``postbox store repair``, as the writable open would (with a writer they are records it
    wrote meanwhile)."""
    _map_files(commit_log.segments)
    segments = commit_log.segments.segments
    if not segments:
        return
    start = segments[max(0, len(segments) - SCAN_SEGMENTS_BACK)].base_position
    if after is not None and after.end > start and mark_tail(commit_log, after.end) == after:
        start = after.end  # what lies before it was checked by the view that ended there
    # body CRCs checked whatever the store's setting: a record being copied in reads with a
    # body that does not match its CRC
    config = commit_log.config
    commit_log.config = dataclasses.replace(config, check_crc_on_recover=True)
    try:
        end = commit_log.scan_valid_end(start, release_pages=True)
        if not writer_live and next_valid_position(
                segments, end, check_crc=True, release_window=SCAN_WINDOW_BYTES) is not None:
            raise commit_log._mid_log_error(end, None)
    finally:
        commit_log.config = config
    _trim(commit_log.segments, end)
    for segment in segments:  # the scan's pages leave this process (the page cache keeps them)
        segment.release_pages(0, segment.size_bytes)


def mark_tail(commit_log: CommitLog, end: int) -> TailMark | None:
    """The ``TailMark`` of the mapped log ending at ``end`` (read through the file, no page
    mapped); None at the start of a segment (nothing of its own to digest) or past the log."""
    segment = commit_log.segments.find(end - 1) if end > 0 else None
    if segment is None or end == segment.base_position + segment.size_bytes:
        return None  # a segment's last bytes are a blank record's: nothing to tell logs apart
    offset = end - segment.base_position
    length = min(TAIL_MARK_BYTES, offset)
    data = segment.read_file(offset - length, length)
    if len(data) != length:
        return None
    return TailMark(end, hashlib.blake2b(data, digest_size=16).digest())


def load_commit_log_end(commit_log: CommitLog, end: int) -> None:
    """Cut the view of the log at ``end`` (a record boundary below its current end)."""
    _trim(commit_log.segments, end)


def load_queue(queue: ConsumeQueue, log_end: int) -> None:
    """Open a queue's files (``UnmappedSegment``) and find its valid units: up to the first
    invalid one, and only units of complete records below ``log_end``."""
    _map_files(queue.segments, UnmappedSegment)
    if not queue.segments.segments:
        return
    _trim(queue.segments, queue.find_data_end())
    if not queue.segments.segments:
        return
    offset = queue.max_offset
    while offset > 0:
        position, size, _tag = queue.unit_at(offset - 1)
        if size != FILLER_UNIT_SIZE and size > 0 and position + size <= log_end:
            break
        offset -= 1
    _trim(queue.segments, offset * UNIT)
    if queue.segments.segments:
        queue._find_min_logic_position()
        queue._set_max_log_end()


def load_queues(queues: ConsumeQueueSet, log_end: int) -> None:
    """Every queue on disk (``ConsumeQueueSet.load``'s walk, with ``load_queue``)."""
    if not queues.directory.is_dir():
        return
    for topic in sorted(os.listdir(queues.directory)):
        if not is_legal_topic(topic):
            continue  # not a queue directory (the writable load warns about it)
        try:
            queue_names = sorted(os.listdir(queues.directory / topic))
        except (FileNotFoundError, NotADirectoryError):
            continue  # removed by the writer meanwhile, or not a queue directory
        for queue_name in queue_names:
            if queue_name.isdigit():
                load_queue(queues.get_or_create(topic, int(queue_name)), log_end)


def is_legal_topic(name: str) -> bool:
    """Whether ``name`` is a legal topic name (a directory of ``consumequeue/``)."""
    try:
        validate_topic(name)
    except InvalidTopicError:
        return False
    return True


def dispatched_end(queues: ConsumeQueueSet) -> int:
    """End of the newest record any consume queue names (the writer dispatched it whole)."""
    return max((queue.max_log_end for queue in queues.queues.values()), default=0)


class ReadOnlyIndexFile(KeyIndexFile):
    """A key-index file read through a ``ReadOnlySegment``; its entry count and end time come
    from the entries themselves, since a live writer defers the header."""

    def __init__(self, path: Path, slot_count: int,
                 entry_count: int, now_ms: int) -> None:
        self.slot_count = slot_count
        self.entry_count_max = entry_count
        self._entries_base = entry_position(0, slot_count)
        self.file = ReadOnlySegment(path, 0, index_file_size(slot_count, entry_count))
        (self.begin_timestamp_ms, self.end_timestamp_ms, self.begin_position,
         self.end_position, self.used_slot_count, self.entry_count) = INDEX_HEADER.unpack_from(
            self.file.buffer, 0)
        self.entry_count = self._count_entries(max(self.entry_count, 1))
        self.end_timestamp_ms = max(self.end_timestamp_ms, now_ms)
        self.file.release_pages(0, self.file.size_bytes)

    def _count_entries(self, count: int) -> int:
        """``count`` raised past every non-empty entry written after the header was."""
        chunk_bytes = _ENTRY_SCAN_CHUNK * _ENTRY_SIZE_BYTES
        while count < self.entry_count_max:
            start = self._entries_base + count * _ENTRY_SIZE_BYTES
            data = self.file.read_file(start, chunk_bytes)
            for offset in range(0, len(data) - _ENTRY_SIZE_BYTES + 1, _ENTRY_SIZE_BYTES):
                if not any(data[offset:offset + _ENTRY_SIZE_BYTES]):
                    return count
                count += 1
            if len(data) < chunk_bytes:
                return count
        return count


def load_key_index(key_index: KeyIndex, now_ms: int) -> None:
    """Map every index file that has this geometry (a file being created is left out)."""
    directory = key_index.directory
    if not directory.is_dir():
        return
    config = key_index.config
    expected = index_file_size(config.slot_count_max, config.entry_count_max)
    for name in sorted(n for n in os.listdir(directory) if n.isdigit() and len(n) == 17):
        try:
            if os.stat(directory / name).st_size != expected:
                continue
            key_index.files.append(ReadOnlyIndexFile(
                directory / name, config.slot_count_max, config.entry_count_max, now_ms))
        except FileNotFoundError:
            continue


def release_all(commit_log: CommitLog, key_index: KeyIndex) -> None:
    """Drop the process's pages of every mapped file of the view (consume queues have none)."""
    for segment in commit_log.segments.segments:
        segment.release_pages(0, segment.size_bytes)
    for index_file in key_index.files:
        index_file.file.release_pages(0, index_file.file.size_bytes)


def close_all(commit_log: CommitLog, queues: ConsumeQueueSet, key_index: KeyIndex) -> None:
    """Unmap and close every file of the view (nothing is flushed: nothing was written)."""
    for segment in commit_log.segments.segments:
        segment.close()
    for queue in queues.queues.values():
        for segment in queue.segments.segments:
            segment.close()
    for index_file in key_index.files:
        index_file.file.close()
