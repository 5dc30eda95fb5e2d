"""``SegmentSet``: the ordered run of equally sized segments behind one log (RocketMQ's
MappedFileQueue).

Segments are contiguous: segment *i* starts at ``first.base_position + i * size_bytes`` and is
named by that position in 20 digits. Loading checks names and sizes and drops a zero-length last
file (an interrupted creation); anything else that does not fit is a ``ConfigMismatchError`` or a
``CorruptionError`` rather than a silent skip.

Thread-safety: mutated only by the owning log's writer (or recovery, before services start);
readers look segments up by position through ``find`` on a list that is only appended to, or
trimmed from the front/back by the owner while holding its lock.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from ..errors import CorruptionError
from ..formats import segment_file_name
from .fsutil import fsync_dir, preallocate
from .open_files import OpenFiles
from .segment import Allocation, MappedSegment

log = logging.getLogger(__name__)


class SegmentSet:
    """All segments of one log directory."""

    def __init__(self, directory: Path, segment_size_bytes: int,
                 allocation: Allocation = Allocation.PREALLOCATED,
                 files: OpenFiles | None = None) -> None:
        self.directory = directory
        self.segment_size_bytes = segment_size_bytes
        self.allocation = allocation
        self.files = files
        """Opens the segments' files on demand (None: each stays mapped while loaded)."""
        self.segments: list[MappedSegment] = []
        self._structure_lock = threading.Lock()  # create_next vs remove_front

    def load(self) -> None:
        """Map every existing segment; positions are set to "full" until recovery trims them,
        and to "not flushed" so the first flush syncs each file once."""
        if not self.directory.is_dir():
            return
        names = sorted(name for name in os.listdir(self.directory) if name.isdigit())
        if names and (self.directory / names[-1]).stat().st_size == 0:
            log.warning("[load] removing empty last segment %s", self.directory / names[-1])
            (self.directory / names[-1]).unlink()
            names.pop()
        for index, name in enumerate(names):
            base = int(name)
            if name != segment_file_name(base):
                raise CorruptionError(f"segment file name {name!r} is not 20 digits",
                                      path=str(self.directory / name))
            if index and base != self.segments[-1].base_position + self.segment_size_bytes:
                raise CorruptionError(
                    f"segment {name} does not follow {self.segments[-1].path.name}: a segment "
                    "is missing", path=str(self.directory / name))
            self._check_size(self.directory / name, is_first=index == 0,
                             is_last=index == len(names) - 1)
            segment = MappedSegment(self.directory / name, base, self.segment_size_bytes,
                                    create=False, allocation=self.allocation, files=self.files)
            segment.written_position = self.segment_size_bytes
            segment.flushed_position = 0  # a dead process may have left dirty pages: sync once
            self.segments.append(segment)

    def _check_size(self, path: Path, *, is_first: bool, is_last: bool) -> None:
        """A short last file is extended (its valid prefix is kept; recovery trims the rest);
        a short file elsewhere is damage the store cannot repair. A first file of another
        size is left to ``MappedSegment``, which reports a configuration mismatch."""
        size = path.stat().st_size
        if size == self.segment_size_bytes or (is_first and not is_last):
            return
        if is_last and 0 < size < self.segment_size_bytes:
            log.warning("[load] %s is %d bytes, shorter than %d: extending it with zeros",
                        path, size, self.segment_size_bytes)
            fd = os.open(path, os.O_RDWR)
            try:
                if self.allocation is Allocation.SPARSE:
                    os.ftruncate(fd, self.segment_size_bytes)
                else:
                    preallocate(fd, self.segment_size_bytes, path)
            finally:
                os.close(fd)
            return
        if not is_first:
            raise CorruptionError(
                f"{path} is {size} bytes, expected {self.segment_size_bytes}: the file was "
                "truncated or replaced; restore it from a backup, or move it and every later "
                "file away to keep only the data before it", path=str(path))

    @property
    def last(self) -> MappedSegment | None:
        """The segment being written, or None when there is none."""
        return self.segments[-1] if self.segments else None

    @property
    def min_position(self) -> int:
        """Log position of the first byte still on disk."""
        return self.segments[0].base_position if self.segments else 0

    @property
    def max_position(self) -> int:
        """Log position one past the last written byte."""
        return self.segments[-1].end_position if self.segments else 0

    def create_next(self, base_position: int | None = None) -> MappedSegment:
        """Create the segment after the last one (or at ``base_position`` for the first)."""
        if self.segments:
            base_position = self.segments[-1].base_position + self.segment_size_bytes
        elif base_position is None:
            base_position = 0
        self.directory.mkdir(parents=True, exist_ok=True)
        segment = MappedSegment(self.directory / segment_file_name(base_position), base_position,
                                self.segment_size_bytes, create=True,
                                allocation=self.allocation, files=self.files)
        with self._structure_lock:
            self.segments.append(segment)
        fsync_dir(self.directory)
        return segment

    def find(self, position: int) -> MappedSegment | None:
        """The segment holding ``position``, or None if it is outside every segment."""
        segments = self.segments
        if not segments:
            return None
        index = (position - segments[0].base_position) // self.segment_size_bytes
        if 0 <= index < len(segments):
            return segments[index]
        return None

    def truncate(self, position: int) -> int:
        """Drop everything at and after ``position``; returns how many non-zero bytes went.

        Later segments are deleted, and so is a segment that would be left empty, unless it is
        the only one (the first segment's name keeps the log's start position).
        """
        removed = 0
        while self.segments and (self.segments[-1].base_position > position or (
                self.segments[-1].base_position == position and len(self.segments) > 1)):
            segment = self.segments.pop()
            log.warning("[truncate] deleting segment %s at or beyond position=%d", segment.path,
                        position)
            removed += segment.written_position
            segment.destroy()
        last = self.last
        if last is not None and position - last.base_position < last.written_position:
            cleared = last.truncate_to(position - last.base_position)
            removed += cleared
            if cleared:
                log.warning("[truncate] %s: zeroed %d non-zero bytes after position=%d",
                            last.path, cleared, position)
        if self.directory.is_dir():
            fsync_dir(self.directory)
        return removed

    def remove_front(self, count: int) -> list[MappedSegment]:
        """Delete the first ``count`` segment files (never the last segment).

        The segments are detached from the set and their files unlinked at once; their mappings
        stay valid for readers that looked them up just before, and the caller closes them after
        a grace period (``MappedSegment.close``); one that ``OpenFiles`` had closed reads as
        zeros. A new list replaces the old one, so a reader
        never sees a half-updated list.
        """
        with self._structure_lock:
            count = max(0, min(count, len(self.segments) - 1))
            removed = self.segments[:count]
            self.segments = self.segments[count:]
        for segment in removed:
            segment.retire()
            segment.path.unlink(missing_ok=True)
        if removed:
            fsync_dir(self.directory)
        return removed

    def flush(self, least_pages: int = 0) -> int:
        """Flush segments front to back from the first with unflushed bytes (§6.1 page rule).

        Returns the flushed position: every byte below it is durable. Runs on a flusher thread
        concurrently with appends; the list is copied so a concurrent roll is harmless.

        Raises:
            StorageIOError: an fdatasync failed (fail-stop: the caller must not retry).
        """
        segments = list(self.segments)
        flushed = segments[0].base_position if segments else 0
        for segment in segments:
            if segment.flushed_position < segment.size_bytes:
                segment.flush(least_pages)
            flushed = segment.base_position + segment.flushed_position
            if segment.flushed_position < segment.written_position:
                break
            if segment.written_position < segment.size_bytes:
                break
        return flushed

    @property
    def flushed_position(self) -> int:
        """Position below which every byte is durable."""
        flushed = self.min_position
        for segment in self.segments:
            flushed = segment.base_position + segment.flushed_position
            if segment.flushed_position < segment.size_bytes:
                break
        return flushed

    def close(self) -> None:
        """Unmap every segment."""
        for segment in self.segments:
            segment.close()

    def destroy(self) -> None:
        """Delete every segment file."""
        for segment in self.segments:
            segment.destroy()
        self.segments.clear()
