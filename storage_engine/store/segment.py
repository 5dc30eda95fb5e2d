"""``MappedSegment``: one fixed-size, memory-mapped file (RocketMQ's MappedFile).

A segment is named by its ``base_position`` (20 decimal digits) and its file always has the
length ``size_bytes``. How much of that takes blocks on disk is its ``Allocation``:
``PREALLOCATED`` files (commit-log segments, as RocketMQ's) get every block at creation, so a full
disk fails there, cleanly, before anything is written; ``SPARSE`` files (consume queues, key
index) start as a hole and get blocks reserved just ahead of the writes (``reserve``, doubling
up to ``RESERVE_STEP_MAX_BYTES``), so disk use follows data: a new topic's queue
takes a page, not 6 MB. Holes read as zeros, so a sparse file holds exactly the bytes of a
preallocated one and RocketMQ reads it the same way. Writes into a sparse file must call
``reserve`` (or ``allocate``) first: a write through the mapping into a hole on a full disk is a
SIGBUS, while ``posix_fallocate`` reports ENOSPC as an error (``DiskFullError``).

``written_position`` is how far data has been written (in page cache);
``flushed_position`` how far it has been made durable. Writes go through the mapping; ``flush``
uses ``fdatasync`` on the file, which releases the GIL and also persists bytes written through the
mapping (``mmap.flush`` would hold the GIL while the disk works).

A segment given an ``OpenFiles`` (consume-queue files) holds no descriptor or mapping between
uses: each method opens the file through it (``buffer`` is a closed mapping while it is
closed), so any number of such files fits the process's open-file limit. Others (commit log,
key index) are mapped from creation or load until ``close``.

Thread-safety: ``written_position`` is advanced only by the owner's single writer (under its put
lock); readers read bytes below a position they were given. What survives a crash: bytes below
``flushed_position`` certainly; the rest only if the OS wrote them back.
"""

from __future__ import annotations

import enum
import errno
import mmap
import os
import struct
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigMismatchError, StorageIOError
from .fsutil import allocate_range, preallocate

if TYPE_CHECKING:
    from .open_files import OpenFiles

_ZERO_CHUNK = bytes(1 << 20)
PAGE_SIZE_BYTES = 4096
SCAN_WINDOW_BYTES = 8 << 20
"""How much of a mapping a scan that releases its pages (``release_pages``) walks before it
drops them: what such a scan adds to the process's resident memory at most."""
RESERVE_STEP_MAX_BYTES = 1 << 20
_CLOSED_MAP = mmap.mmap(-1, 1)
_CLOSED_MAP.close()  # ``buffer`` of a segment not opened yet: any access is a ValueError
"""Largest step by which ``reserve`` grows a sparse file's reserved blocks (steps double from
one page, so a file never holds more than twice its data plus a page, or data + 1 MiB)."""


class Allocation(enum.Enum):
    """How a segment file gets its disk blocks."""

    PREALLOCATED = "preallocated"  # all blocks at creation (commit log)
    SPARSE = "sparse"  # a hole at creation; blocks reserved just ahead of the writes


def reservation_end(start: int, reserved_end: int, end: int, limit: int) -> int:
    """Where to extend a region's reserved blocks (from ``start``, reserved up to
    ``reserved_end``) so that ``end`` is covered: by at least the reserved size (from one page,
    at most ``RESERVE_STEP_MAX_BYTES``), rounded up to a page, never past ``limit``."""
    step = min(max(reserved_end - start, PAGE_SIZE_BYTES), RESERVE_STEP_MAX_BYTES)
    target = max(end, reserved_end + step)
    return min(limit, -(-target // PAGE_SIZE_BYTES) * PAGE_SIZE_BYTES)


class MappedSegment:
    """One mapped segment file."""

    __slots__ = ("path", "base_position", "size_bytes", "written_position", "flushed_position",
                 "allocated_end", "buffer", "_fd", "_files", "pins", "retired")

    def __init__(self, path: Path, base_position: int, size_bytes: int, *, create: bool,
                 allocation: Allocation = Allocation.PREALLOCATED,
                 files: OpenFiles | None = None) -> None:
        self.path = path
        self.base_position = base_position
        self.size_bytes = size_bytes
        self.written_position = 0
        self.flushed_position = 0
        sparse = allocation is Allocation.SPARSE
        # bytes [0, allocated_end) certainly have blocks; a loaded sparse file starts at 0 and
        # re-reserves (posix_fallocate over blocks a file has already costs no space)
        self.allocated_end = 0 if sparse else size_bytes
        self._files = files  # None: mapped for good; else opened on demand by ``files``
        self.pins = 0
        self.retired = False
        self.buffer = _CLOSED_MAP  # the mapping while open (``is_open``)
        self._fd = -1
        try:
            if create:
                self._create(sparse)
            elif files is not None:
                self._check_size(os.stat(path).st_size)
            if files is None:
                self.open_handle()
        except OSError as error:
            raise StorageIOError(f"cannot map {path}: {error}", path=str(path)) from error

    def _create(self, sparse: bool) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            if sparse:
                os.ftruncate(fd, self.size_bytes)  # a hole: no blocks yet
            else:
                preallocate(fd, self.size_bytes, self.path)
        except BaseException:
            os.close(fd)
            self.path.unlink(missing_ok=True)
            raise
        os.close(fd)

    def _check_size(self, actual: int) -> None:
        if actual != self.size_bytes:
            raise ConfigMismatchError(
                f"{self.path} is {actual} bytes but the configured file size is "
                f"{self.size_bytes}: open the store with the size it was written with",
                path=str(self.path))

    def open_handle(self) -> None:
        """Open and map the file (``OpenFiles`` calls this under its lock).

        Raises:
            StorageIOError: it cannot be opened or mapped (out of descriptors: named).
            ConfigMismatchError: the file does not have the configured size.
        """
        try:
            fd = os.open(self.path, os.O_RDWR)
            try:
                self._check_size(os.fstat(fd).st_size)
                buffer = mmap.mmap(fd, self.size_bytes)
            except BaseException:
                os.close(fd)
                raise
        except OSError as error:
            hint = ""
            if error.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
                hint = (": the process is out of file descriptors or mappings; raise the "
                        "open-file limit (ulimit -n) or lower consume_queue.open_files_max")
            raise StorageIOError(f"cannot map {self.path}: {error}{hint}",
                                 path=str(self.path)) from error
        self.buffer = buffer
        self._fd = fd

    @property
    def is_open(self) -> bool:
        """Whether the file is open and mapped now."""
        return self._fd >= 0

    def close_handle(self) -> None:
        """Unmap and close the descriptor (bytes written stay in the page cache; ``buffer``
        is left closed: a late reader gets ``ValueError``, never other bytes)."""
        if self._fd >= 0:
            self.buffer.close()
            os.close(self._fd)
            self._fd = -1

    def _pin(self) -> mmap.mmap | None:
        """The mapping, opened and pinned for one call (None: a retired file, closed)."""
        files = self._files
        return self.buffer if files is None else files.acquire(self)

    def _unpin(self) -> None:
        if self._files is not None:
            self._files.release(self)

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

    def _pin_required(self) -> mmap.mmap:
        buffer = self._pin()
        if buffer is None:
            self._unpin()
            raise StorageIOError(f"{self.path} was deleted by retention", path=str(self.path))
        return buffer

    def data_end_bound(self) -> int:
        """A position past which a sparse file holds only holes (its size if preallocated, or
        when the file system cannot tell). Reading a hole through the mapping costs a page (on
        tmpfs, a page of the disk's size, and a SIGBUS when it is full), so scans stop here."""
        if self.allocated_end >= self.size_bytes:
            return self.size_bytes
        if self._pin() is None:
            self._unpin()
            return 0
        end = 0
        try:
            while end < self.size_bytes:
                start = os.lseek(self._fd, end, os.SEEK_DATA)
                end = os.lseek(self._fd, start, os.SEEK_HOLE)
        except OSError as error:
            if error.errno != errno.ENXIO:  # ENXIO: no data after ``end``
                return self.size_bytes
        finally:
            self._unpin()
        return min(end, self.size_bytes)

    def read_file(self, position: int, size: int) -> bytes:
        """``size`` bytes at ``position`` read through the file, not the mapping (holes read as
        zeros without taking a page; may return fewer bytes at the end of the file)."""
        if self._pin() is None:
            self._unpin()
            return b""
        try:
            return os.pread(self._fd, size, position)
        except OSError as error:
            raise StorageIOError(f"cannot read {self.path}: {error}",
                                 path=str(self.path)) from error
        finally:
            self._unpin()

    def release_pages(self, start: int, end: int) -> None:
        """Drop this process's mapped pages of bytes ``[start, end)`` (widened to whole pages):
        they stop counting in its resident memory; the page cache keeps them and a later read
        maps them again. Nothing is written or lost (the mapping is shared)."""
        first = start - start % PAGE_SIZE_BYTES
        end = min(end, self.size_bytes)
        if end > first and self._files is None and self._fd >= 0:
            self.buffer.madvise(mmap.MADV_DONTNEED, first, end - first)

    def reserve(self, end: int) -> None:
        """Make sure bytes below ``end`` have disk blocks (a no-op for preallocated files).

        Grows the reserved prefix by at least the size it already has (from one page, at most
        ``RESERVE_STEP_MAX_BYTES``), so appends reach the file system rarely.

        Raises:
            DiskFullError: the file system has no space for the blocks (nothing was written).
            StorageIOError: another error from the file system.
        """
        if end <= self.allocated_end:
            return
        target = reservation_end(0, self.allocated_end, end, self.size_bytes)
        self._pin_required()
        try:
            allocate_range(self._fd, self.allocated_end, target - self.allocated_end, self.path)
        finally:
            self._unpin()
        self.allocated_end = target

    def allocate(self, start: int, length: int) -> None:
        """Give bytes ``[start, start + length)`` disk blocks (random writes, e.g. index slots).

        Raises:
            DiskFullError, StorageIOError: as ``reserve``.
        """
        if start + length > self.allocated_end:
            self._pin_required()
            try:
                allocate_range(self._fd, start, length, self.path)
            finally:
                self._unpin()

    def write(self, data: bytes | memoryview) -> None:
        """Append ``data`` at ``written_position`` (the caller checked there is room)."""
        start = self.written_position
        end = start + len(data)
        if end > self.allocated_end:
            self.reserve(end)
        self._copy_in(start, data)
        self.written_position = end

    def write_at(self, position: int, data: bytes) -> None:
        """Overwrite ``data`` at ``position`` below ``written_position`` (blocks allocated
        first)."""
        self.allocate(position, len(data))
        self._copy_in(position, data)

    def _copy_in(self, start: int, data: bytes | memoryview) -> None:
        files = self._files
        if files is None:
            self.buffer[start:start + len(data)] = data
        elif not files.write(self, start, data):
            raise StorageIOError(f"{self.path} was deleted by retention", path=str(self.path))

    def read(self, position: int, size: int) -> bytes:
        """Copy ``size`` bytes starting at ``position`` within the segment (a retired file
        that is closed reads as zeros)."""
        files = self._files
        if files is None:
            return self.buffer[position:position + size]
        data = files.read(self, position, position + size)
        return bytes(size) if data is None else data

    def unpack(self, layout: struct.Struct, position: int) -> tuple:
        """``layout`` unpacked at ``position`` (zeros from a retired file that is closed)."""
        files = self._files
        if files is None:
            return layout.unpack_from(self.buffer, position)
        values = files.unpack(self, layout, position)
        return layout.unpack(bytes(layout.size)) if values is None else values

    def data_ranges(self, offset: int):
        """``(start, end)`` offsets of the regions at or after ``offset`` that may hold data.

        Asks the file system (``SEEK_DATA``/``SEEK_HOLE``): preallocated blocks never written
        are holes to it, so a search for records after damage skips the zero tail of a segment
        without reading it. A file system without that support yields the whole rest.
        """
        self._pin_required()
        try:
            yield from self._data_ranges(offset)
        finally:
            self._unpin()

    def _data_ranges(self, offset: int):
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
        the bytes below the ``written_position`` read first are in the mapping already (or,
        for a file ``OpenFiles`` closed since, in the page cache, which a new descriptor's
        fdatasync covers).

        Raises:
            StorageIOError: fdatasync failed. The caller must go fail-stop, never retry.
        """
        target = self.written_position
        if target <= self.flushed_position:
            return self.flushed_position
        if least_pages and target < self.size_bytes and self.dirty_pages() < least_pages:
            return self.flushed_position
        if self._pin() is None:  # retired and closed: deleted, nothing left to persist
            self._unpin()
            return self.flushed_position
        try:
            self._sync()
        finally:
            self._unpin()
        self.flushed_position = target
        return target

    def _sync(self) -> None:
        """fdatasync the file (pinned by the caller)."""
        try:
            os.fdatasync(self._fd)
        except OSError as error:
            raise StorageIOError(f"fdatasync of {self.path} failed: {error}",
                                 path=str(self.path)) from error

    def truncate_to(self, position: int) -> int:
        """Forget data at and after ``position`` and zero it, so no stale record can reappear.

        Returns the number of bytes that were not already zero. The scan stops at the first
        all-zero megabyte (files are zeros when created and written front to back, and every
        truncation zeroes, so nothing but a torn write can sit after the end of valid data) and
        at ``data_end_bound``, so the holes of a sparse file are never touched.
        """
        buffer = self._pin_required()
        try:
            cleared = self._zero_from(buffer, position)
            self.written_position = position
            self.flushed_position = min(self.flushed_position, position)
            if cleared:  # the zeros must reach the disk, or a later power loss revives them
                self._sync()
        finally:
            self._unpin()
        return cleared

    def _zero_from(self, buffer: mmap.mmap, position: int) -> int:
        """Zero the non-zero pages from ``position`` to the end of data; the bytes cleared."""
        cleared = 0
        cursor = position
        data_end = self.data_end_bound()  # past it only holes: nothing to zero, nothing to read
        while cursor < data_end:
            chunk = min(len(_ZERO_CHUNK), data_end - cursor)
            data = buffer[cursor:cursor + chunk]
            if data == _ZERO_CHUNK[:chunk]:
                break
            cleared += chunk - data.count(0)
            self._zero_pages(buffer, cursor, data)
            cursor += chunk
        return cleared

    @staticmethod
    def _zero_pages(buffer: mmap.mmap, start: int, data: bytes) -> None:
        """Zero the pages of ``data`` (the bytes at ``start``) that hold a non-zero byte.

        All-zero pages are left alone: in a sparse file they may be holes, and writing into a
        hole would need a block (on a full disk, a SIGBUS)."""
        zero_page = _ZERO_CHUNK[:PAGE_SIZE_BYTES]
        for page in range(0, len(data), PAGE_SIZE_BYTES):
            length = min(PAGE_SIZE_BYTES, len(data) - page)
            if data[page:page + length] != zero_page[:length]:
                buffer[start + page:start + page + length] = zero_page[:length]

    def retire(self) -> None:
        """Retention detached this file (its name is about to be unlinked): an open file stays
        open until ``close``; a closed one is not reopened and reads as zeros."""
        if self._files is not None:
            self._files.retire(self)

    def close(self) -> None:
        """Unmap and close (does not flush)."""
        if self._files is not None:
            self._files.close(self)
        else:
            self.close_handle()

    def destroy(self) -> None:
        """Close and delete the file."""
        self.close()
        self.path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return (f"MappedSegment({self.path.name}, written={self.written_position}, "
                f"flushed={self.flushed_position})")
