"""``MappedSegment``: one fixed-size, preallocated, memory-mapped file (RocketMQ's MappedFile).

A segment is named by its ``base_position`` (20 decimal digits) and always has exactly
``size_bytes`` on disk. ``written_position`` is how far data has been written (in page cache);
``flushed_position`` how far it has been made durable. Writes go through the mapping; ``flush``
uses ``fdatasync`` on the file, which releases the GIL and also persists bytes written through the
mapping (``mmap.flush`` would hold the GIL while the disk works).

Thread-safety: ``written_position`` is advanced only by the owner's single writer (under its put
lock); readers read bytes below a position they were given. What survives a crash: bytes below
``flushed_position`` certainly; the rest only if the OS wrote them back.
"""

from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path

from .errors import ConfigMismatchError, StorageIOError
from .fsutil import preallocate

_ZERO_CHUNK = bytes(1 << 20)
PAGE_SIZE_BYTES = 4096


class MappedSegment:
    """One mapped segment file."""

    __slots__ = ("path", "base_position", "size_bytes", "written_position", "flushed_position",
                 "buffer", "_fd")

    def __init__(self, path: Path, base_position: int, size_bytes: int, *, create: bool) -> None:
        self.path = path
        self.base_position = base_position
        self.size_bytes = size_bytes
        self.written_position = 0
        self.flushed_position = 0
        try:
            if create:
                self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                try:
                    preallocate(self._fd, size_bytes, path)
                except BaseException:
                    os.close(self._fd)
                    path.unlink(missing_ok=True)
                    raise
            else:
                self._fd = os.open(path, os.O_RDWR)
                actual = os.fstat(self._fd).st_size
                if actual != size_bytes:
                    os.close(self._fd)
                    raise ConfigMismatchError(
                        f"{path} is {actual} bytes but the configured file size is "
                        f"{size_bytes}: open the store with the size it was written with",
                        path=str(path))
            self.buffer = mmap.mmap(self._fd, size_bytes)
        except OSError as error:
            raise StorageIOError(f"cannot map {path}: {error}", path=str(path)) from error

    @property
    def end_position(self) -> int:
        """Log position one past the last written byte."""
        return self.base_position + self.written_position

    @property
    def is_full(self) -> bool:
        """Whether nothing more can be written."""
        return self.written_position >= self.size_bytes

    @property
    def remaining_bytes(self) -> int:
        """Bytes left after ``written_position``."""
        return self.size_bytes - self.written_position

    def write(self, data: bytes) -> None:
        """Append ``data`` at ``written_position`` (the caller checked there is room)."""
        start = self.written_position
        end = start + len(data)
        self.buffer[start:end] = data
        self.written_position = end

    def read(self, position: int, size: int) -> bytes:
        """Copy ``size`` bytes starting at ``position`` within the segment."""
        return self.buffer[position:position + size]

    def data_ranges(self, offset: int):
        """``(start, end)`` offsets of the regions at or after ``offset`` that may hold data.

        Asks the file system (``SEEK_DATA``/``SEEK_HOLE``): preallocated blocks never written
        are holes to it, so a search for records after damage skips the zero tail of a segment
        without reading it. A file system without that support yields the whole rest.
        """
        position = offset
        while position < self.size_bytes:
            try:
                start = os.lseek(self._fd, position, os.SEEK_DATA)
            except OSError as error:
                if error.errno == errno.ENXIO:
                    return
                yield position, self.size_bytes
                return
            if start >= self.size_bytes:
                return
            end = min(os.lseek(self._fd, start, os.SEEK_HOLE), self.size_bytes)
            yield start, end
            position = end

    def dirty_pages(self) -> int:
        """4 KiB pages written but not yet flushed (RocketMQ's page-count rule, §6.1)."""
        return self.written_position // PAGE_SIZE_BYTES - self.flushed_position // PAGE_SIZE_BYTES

    def flush(self, least_pages: int = 0) -> int:
        """Make everything written so far durable; returns the new flushed position.

        With ``least_pages > 0`` the flush happens only when that many pages are dirty or the
        segment is full (§6.1). Safe to call from a flusher thread while the owner appends:
        the bytes below the ``written_position`` read first are in the mapping already.

        Raises:
            StorageIOError: fdatasync failed. The caller must go fail-stop, never retry.
        """
        target = self.written_position
        if target <= self.flushed_position:
            return self.flushed_position
        if least_pages and target < self.size_bytes and self.dirty_pages() < least_pages:
            return self.flushed_position
        try:
            os.fdatasync(self._fd)
        except OSError as error:
            raise StorageIOError(f"fdatasync of {self.path} failed: {error}",
                                 path=str(self.path)) from error
        self.flushed_position = target
        return target

    def truncate_to(self, position: int) -> int:
        """Forget data at and after ``position`` and zero it, so no stale record can reappear.

        Returns the number of bytes that were not already zero. The scan stops at the first
        all-zero megabyte: files are preallocated with zeros and written front to back, and every
        truncation zeroes, so nothing but a torn write can sit after the end of valid data.
        """
        cleared = 0
        cursor = position
        while cursor < self.size_bytes:
            chunk = min(len(_ZERO_CHUNK), self.size_bytes - cursor)
            data = self.buffer[cursor:cursor + chunk]
            if data == _ZERO_CHUNK[:chunk]:
                break
            cleared += chunk - data.count(0)
            self.buffer[cursor:cursor + chunk] = _ZERO_CHUNK[:chunk]
            cursor += chunk
        self.written_position = position
        self.flushed_position = min(self.flushed_position, position)
        if cleared:  # the zeros must reach the disk, or a later power loss revives the data
            try:
                os.fdatasync(self._fd)
            except OSError as error:
                raise StorageIOError(f"fdatasync of {self.path} failed: {error}",
                                     path=str(self.path)) from error
        return cleared

    def close(self) -> None:
        """Unmap and close (does not flush)."""
        if not self.buffer.closed:
            self.buffer.close()
            os.close(self._fd)

    def destroy(self) -> None:
        """Close and delete the file."""
        self.close()
        self.path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return (f"MappedSegment({self.path.name}, written={self.written_position}, "
                f"flushed={self.flushed_position})")
