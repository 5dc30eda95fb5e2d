"""``OpenFiles``: the consume-queue files a store holds open, at most ``files_max`` of them.

Every consume-queue file is a ``MappedSegment`` whose descriptor and mapping are opened when a
read, write, reservation or flush needs them (``acquire``/``release`` pin them for that call) and
closed again, least recently used first, once more than ``files_max`` are open. So a store with
any number of queues, and any number of queue files, opens and restarts within the process's
open-file limit (``RLIMIT_NOFILE``); what a file's state needs between uses (written, flushed and
reserved positions) stays in memory. An open file costs two descriptors (Python's ``mmap`` keeps
a duplicate of the one it was given) and one mapping (``vm.max_map_count``); a closed one
neither. Bytes written through a mapping stay in the page cache when it is closed, and an
``fdatasync`` on a descriptor opened later makes them durable: closing a file early changes
nothing about what a crash keeps.

A file in use (pinned) is never closed, and room is made before a file is opened, never by
closing it: with every open file pinned the set grows past ``files_max`` for that moment and
shrinks back when they are released. A file retention detached (``retire``) leaves the LRU: if it is
open it stays open until retention closes it after its grace period; if it is closed it is not
reopened (its name is already unlinked) and reads as zeros, i.e. as units of messages already
deleted.

``fit_files_max`` checks the open-file limit at open: the configured cap is lowered to what the
limit leaves after the descriptors already in use, the store's other files and a reserve for the
rest of the process (connections), and a warning names the limit to raise.

Thread-safety: one lock guards the LRU, the pins and every open/close it does.
"""

from __future__ import annotations

import logging
import os
import resource
import struct
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import mmap

    from .segment import MappedSegment

log = logging.getLogger(__name__)

DESCRIPTORS_PER_FILE = 2
"""Descriptors one open mapped file holds: its own and the duplicate ``mmap`` keeps."""
OPEN_FILES_MIN = 8
"""The cap is never lowered below this (a queue's write needs one file, its readers a few)."""
RESERVED_DESCRIPTORS_MIN = 64


class OpenFiles:
    """The LRU of open consume-queue files (see the module docstring)."""

    def __init__(self, files_max: int) -> None:
        self.files_max = files_max
        self._lock = threading.Lock()
        self._open: OrderedDict[MappedSegment, None] = OrderedDict()
        self._retired_open: set[MappedSegment] = set()
        self.opened_count = 0
        """Files opened since start (a reopen after eviction counts again)."""
        self.evicted_count = 0
        """Files closed to stay within ``files_max``."""

    @property
    def open_count(self) -> int:
        """Files open now (retired ones still open included)."""
        return len(self._open) + len(self._retired_open)

    def as_dict(self) -> dict[str, int]:
        """Open files, the cap, files opened and closed for the cap since start."""
        return {"open": self.open_count, "max": self.files_max, "opened": self.opened_count,
                "evicted": self.evicted_count}

    def acquire(self, segment: MappedSegment) -> mmap.mmap | None:
        """Open ``segment`` if needed and pin it; its mapping (None: retired and closed).
        For calls that use the descriptor or work a while (flush, reservations, scans).

        Raises:
            StorageIOError: the file cannot be opened (the message names the limit when the
                process is out of descriptors).
        """
        with self._lock:
            buffer = self._use(segment)
            segment.pins += 1
            return buffer

    def release(self, segment: MappedSegment) -> None:
        """Unpin a file ``acquire`` returned (closing files over the cap that a pin kept)."""
        with self._lock:
            segment.pins -= 1
            if len(self._open) > self.files_max:
                self._evict(len(self._open) - self.files_max)

    def read(self, segment: MappedSegment, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` of ``segment``, copied under the lock (no pin needed; None:
        retired and closed)."""
        with self._lock:
            buffer = self._use(segment)
            return None if buffer is None else buffer[start:end]

    def unpack(self, segment: MappedSegment, layout: struct.Struct, position: int
               ) -> tuple | None:
        """``layout`` unpacked at ``position`` of ``segment`` (None: retired and closed)."""
        with self._lock:
            buffer = self._use(segment)
            return None if buffer is None else layout.unpack_from(buffer, position)

    def write(self, segment: MappedSegment, start: int, data: bytes | memoryview) -> bool:
        """Copy ``data`` into ``segment`` at ``start``; False when it is retired and closed."""
        with self._lock:
            buffer = self._use(segment)
            if buffer is None:
                return False
            buffer[start:start + len(data)] = data
            return True

    def _use(self, segment: MappedSegment) -> mmap.mmap | None:
        """(Under the lock) the open mapping of ``segment``, now the most recently used."""
        if segment.is_open:
            if not segment.retired:
                self._open.move_to_end(segment)
            return segment.buffer
        if segment.retired:
            return None
        self._evict(len(self._open) + 1 - self.files_max)  # room first: never the new one
        segment.open_handle()
        self.opened_count += 1
        self._open[segment] = None
        return segment.buffer

    def _evict(self, excess: int) -> None:
        """Close the ``excess`` least recently used files not in use (fewer if all are)."""
        if excess <= 0:
            return
        victims = []
        for candidate in self._open:  # least recently used first
            if not candidate.pins:
                victims.append(candidate)
                if len(victims) == excess:
                    break
        for victim in victims:
            del self._open[victim]
            victim.close_handle()
        self.evicted_count += len(victims)

    def retire(self, segment: MappedSegment) -> None:
        """``segment`` was detached by retention: never evicted, never reopened."""
        with self._lock:
            segment.retired = True
            if segment in self._open:
                del self._open[segment]
                self._retired_open.add(segment)

    def close(self, segment: MappedSegment) -> None:
        """Close ``segment`` now (store close, deletion, end of a retired file's grace)."""
        with self._lock:
            self._open.pop(segment, None)
            self._retired_open.discard(segment)
            segment.close_handle()


def descriptor_limit() -> int | None:
    """The soft ``RLIMIT_NOFILE`` of this process (None: unlimited)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def descriptors_in_use() -> int:
    """Descriptors this process holds now."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # the listing's own descriptor
    except OSError:
        return 0


def reserved_descriptors(limit: int) -> int:
    """Descriptors left to the rest of the process: a quarter of the limit, at least 64."""
    return max(RESERVED_DESCRIPTORS_MIN, limit // 4)


def fit_files_max(configured: int, other_files: int) -> int:
    """The number of consume-queue files the store may hold open.

    ``configured`` is ``consume_queue.open_files_max``; ``other_files`` the mapped files the
    store keeps open besides (commit-log segments, key-index files). When the soft limit cannot
    hold them, the descriptors in use and the reserve, the cap is lowered (to at least
    ``OPEN_FILES_MIN``) and a warning says what to raise.
    """
    limit = descriptor_limit()
    if limit is None:
        return configured
    in_use = descriptors_in_use()
    fixed = in_use + other_files * DESCRIPTORS_PER_FILE + reserved_descriptors(limit)
    needed = fixed + configured * DESCRIPTORS_PER_FILE
    fitted = max(OPEN_FILES_MIN, min(configured, (limit - fixed) // DESCRIPTORS_PER_FILE))
    if fitted < configured:
        log.warning(
            "[limits] open-file limit (RLIMIT_NOFILE) %d: %d descriptors in use, %d for %d "
            "commit-log and key-index files, %d kept for connections; consume queues may keep "
            "%d files open, not consume_queue.open_files_max=%d (more reopening): raise the "
            "limit to at least %d (ulimit -n, systemd LimitNOFILE=) or lower the setting",
            limit, in_use, other_files * DESCRIPTORS_PER_FILE, other_files,
            reserved_descriptors(limit), fitted, configured, needed)
    else:
        log.info("[limits] open-file limit %d; consume queues keep at most %d files open",
                 limit, fitted)
    return fitted
