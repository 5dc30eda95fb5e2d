"""``KeyIndex``: hash index from message keys to log positions (RocketMQ's IndexService).

Each ``KeyIndexFile`` is a fixed-size file of a 40-byte header, ``slot_count`` 4-byte slots and
``entry_count`` 20-byte entries (layout in ``formats.index_layout``). It is sparse: blocks are
reserved page by page as slots and entries are written, so a new file takes a few pages on disk,
not its 420 MB (holes read as zeros: the bytes are those of a preallocated file). A key
``topic#key`` hashes (Java ``hashCode``, abs) to a slot; the slot holds the newest entry number
and entries chain to older ones through ``prev``. Entry 0 is never used, so a file takes
``entry_count - 1`` keys. When a file fills, a new one is created, named by the clock
(``yyyyMMddHHmmssSSS``), with its header begin/end values copied from the previous file's end
(a RocketMQ quirk kept for byte compatibility). Lookups visit files newest first and stop at
64 results; hash collisions are returned too and must be filtered by the caller against the
real key and topic.

Thread-safety: one writer (the dispatch thread); readers may run concurrently: a reader sees a
slot value only after the entry it names has been written (entry first, then slot). The header
lives in memory while keys are added and is written to the file after every dispatch batch, when
a file fills, and at close.
What survives a crash: files are flushed when full and at close, and the checkpoint records the
end time of the newest file flushed whole. After an unclean stop, files with newer entries are
dropped and rebuilt by re-dispatch from their first position; a file whose size or header is
impossible is dropped (with every newer file) at load and rebuilt the same way.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from ..clock import Clock
from ..config import KeyIndexConfig
from ..formats import (
    INDEX_ENTRY,
    INDEX_HEADER,
    INDEX_HEADER_SIZE_BYTES,
    INDEX_SLOT,
    entry_position,
    index_file_name,
    index_file_size,
)
from ..formats.engine import index_key_hash
from .fsutil import fsync_dir
from .segment import PAGE_SIZE_BYTES, Allocation, MappedSegment, reservation_end

log = logging.getLogger(__name__)

_pack_header_into = INDEX_HEADER.pack_into
_pack_entry_into = INDEX_ENTRY.pack_into
_pack_slot_into = INDEX_SLOT.pack_into
_unpack_slot = INDEX_SLOT.unpack_from
_unpack_entry = INDEX_ENTRY.unpack_from
_INT_MAX = (1 << 31) - 1


class KeyIndexFile:
    """One index file."""

    def __init__(self, path: Path, slot_count: int, entry_count: int, *, create: bool,
                 previous_end: tuple[int, int] = (0, 0)) -> None:
        self.slot_count = slot_count
        self.entry_count_max = entry_count
        self._entries_base = entry_position(0, slot_count)
        self.file = MappedSegment(path, 0, index_file_size(slot_count, entry_count),
                                  create=create, allocation=Allocation.SPARSE)
        # sparse file: the pages of the header and slots that have blocks, and how far the
        # entries have them (reserved before each write; a loaded file re-reserves, for free)
        self._slot_pages = bytearray(-(-self._entries_base // PAGE_SIZE_BYTES))
        self._entries_reserved_end = self._entries_base
        self._reserve_slot_page(0)  # the header
        if create:
            end_position, end_timestamp_ms = previous_end
            self.begin_timestamp_ms = self.end_timestamp_ms = end_timestamp_ms
            self.begin_position = self.end_position = end_position
            self.used_slot_count = 0
            self.entry_count = 1
            self.write_header()
        else:
            (self.begin_timestamp_ms, self.end_timestamp_ms, self.begin_position,
             self.end_position, self.used_slot_count, self.entry_count) = INDEX_HEADER.unpack_from(
                self.file.buffer, 0)
            self.entry_count = max(self.entry_count, 1)

    @property
    def path(self) -> Path:
        """File path."""
        return self.file.path

    @property
    def is_full(self) -> bool:
        """Whether no further key fits."""
        return self.entry_count >= self.entry_count_max

    def write_header(self) -> None:
        """Copy the in-memory header into the file (puts defer it; readers use memory)."""
        _pack_header_into(self.file.buffer, 0, self.begin_timestamp_ms, self.end_timestamp_ms,
                          self.begin_position, self.end_position, self.used_slot_count,
                          self.entry_count)

    def put_key(self, key_hash: int, log_position: int, store_timestamp_ms: int) -> bool:
        """Add one entry; False when the file is full (§4.3)."""
        number = self.entry_count
        if number >= self.entry_count_max:
            return False
        buffer = self.file.buffer
        slot_at = INDEX_HEADER_SIZE_BYTES + (key_hash % self.slot_count) * 4
        entry_at = self._entries_base + number * 20
        if not self._slot_pages[slot_at // PAGE_SIZE_BYTES]:
            self._reserve_slot_page(slot_at // PAGE_SIZE_BYTES)
        if entry_at + 20 > self._entries_reserved_end:
            self._reserve_entries(entry_at + 20)
        previous = _unpack_slot(buffer, slot_at)[0]
        if previous <= 0 or previous > number:
            previous = 0
        if self.begin_timestamp_ms <= 0:
            time_diff = 0
        else:
            time_diff = (store_timestamp_ms - self.begin_timestamp_ms) // 1000
            time_diff = 0 if time_diff < 0 else min(time_diff, _INT_MAX)
        _pack_entry_into(buffer, entry_at, key_hash, log_position, time_diff, previous)
        _pack_slot_into(buffer, slot_at, number)
        if number <= 1:
            self.begin_position = log_position
            self.begin_timestamp_ms = store_timestamp_ms
        if previous == 0:
            self.used_slot_count += 1
        self.entry_count = number + 1
        self.end_position = log_position
        self.end_timestamp_ms = store_timestamp_ms
        return True

    def _reserve_slot_page(self, page: int) -> None:
        """Give one page of the header and slot area disk blocks (slots are written at random
        places, so they are reserved page by page)."""
        start = page * PAGE_SIZE_BYTES
        self.file.allocate(start, min(PAGE_SIZE_BYTES, self.file.size_bytes - start))
        self._slot_pages[page] = 1

    def _reserve_entries(self, end: int) -> None:
        """Give the entry area blocks up to at least ``end`` (doubling steps, as segments)."""
        target = reservation_end(self._entries_base, self._entries_reserved_end, end,
                                 self.file.size_bytes)
        self.file.allocate(self._entries_reserved_end, target - self._entries_reserved_end)
        self._entries_reserved_end = target

    def select_positions(self, key_hash: int, max_count: int, begin_ms: int, end_ms: int,
                         found: list[int]) -> None:
        """Append to ``found`` positions whose entry has ``key_hash`` and a time in range."""
        buffer = self.file.buffer
        count = self.entry_count
        # the slot is read through the file: an empty slot may be a hole, which a read through
        # the mapping would back with a page (on tmpfs, disk space; a SIGBUS when it is full)
        slot = self.file.read_file(INDEX_HEADER_SIZE_BYTES + (key_hash % self.slot_count) * 4, 4)
        number = _unpack_slot(slot.ljust(4, b"\0"), 0)[0]
        if number <= 0 or number > count or count <= 1:
            return
        begin_timestamp = self.begin_timestamp_ms
        while len(found) < max_count:
            entry_hash, position, time_diff, previous = _unpack_entry(
                buffer, self._entries_base + number * 20)
            if time_diff < 0:
                break
            entry_ms = begin_timestamp + time_diff * 1000
            if entry_ms < begin_ms:
                break
            if entry_hash == key_hash and entry_ms <= end_ms:
                found.append(position)
            if previous <= 0 or previous > count or previous == number:
                break
            number = previous

    def overlaps(self, begin_ms: int, end_ms: int) -> bool:
        """Whether this file may hold entries stored within [begin_ms, end_ms]."""
        # Entry times are rounded down to whole seconds after the begin timestamp.
        return self.begin_timestamp_ms - 1000 <= end_ms and self.end_timestamp_ms >= begin_ms

    def flush(self) -> None:
        """Persist header, slots and entries (always syncs: slots change in place, so the
        segment's written/flushed watermarks cannot tell what is dirty)."""
        self.write_header()
        self.file.written_position = self.file.size_bytes
        self.file.flushed_position = 0
        self.file.flush()

    def close(self) -> None:
        """Unmap."""
        self.file.close()


class KeyIndex:
    """All index files of a store, oldest first."""

    def __init__(self, directory: Path, config: KeyIndexConfig, clock: Clock) -> None:
        self.directory = directory
        self.config = config
        self._clock = clock
        self.files: list[KeyIndexFile] = []
        self._structure_lock = threading.Lock()
        self.durable_state: tuple[int, int] = (0, 0)
        """(end time, entry count) of the newest file when it was last flushed whole — one
        tuple, so the checkpoint writer never reads half an update."""
        self.rebuild_from: int | None = None
        """Set by ``load`` when damaged files were deleted: where re-dispatch must start."""

    def load(self) -> None:
        """Open existing files in name (creation time) order.

        A file whose size or header cannot be right (derived data, so never worth refusing to
        open over) is deleted together with every newer file; ``rebuild_from`` then tells
        recovery where re-dispatch must start to index those positions again.
        """
        if not self.directory.is_dir():
            return
        names = sorted(n for n in os.listdir(self.directory) if n.isdigit() and len(n) == 17)
        for position, name in enumerate(names):
            problem = self._check_file(self.directory / name)
            if problem is None:
                self.files.append(KeyIndexFile(self.directory / name, self.config.slot_count_max,
                                               self.config.entry_count_max, create=False))
                continue
            for dropped in names[position:]:
                log.warning("[recovery] deleting key-index file %s: %s", dropped,
                            problem if dropped == name else "newer than a damaged file")
                (self.directory / dropped).unlink()
            self.rebuild_from = self.end_position
            return

    def _check_file(self, path: Path) -> str | None:
        """Why ``path`` cannot be a valid index file of this geometry (None: plausible)."""
        expected = index_file_size(self.config.slot_count_max, self.config.entry_count_max)
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            header = handle.read(INDEX_HEADER_SIZE_BYTES)
        if size != expected:
            return f"{size} bytes, expected {expected}"
        begin_ms, end_ms, begin, end, used, count = INDEX_HEADER.unpack(header)
        if not (0 <= begin <= end and 0 <= begin_ms <= end_ms and 0 <= count
                <= self.config.entry_count_max and 0 <= used <= self.config.slot_count_max):
            return "its header is not plausible"
        return None

    @property
    def durable_timestamp_ms(self) -> int:
        """End time of the newest file flushed whole (the checkpoint's index timestamp)."""
        return self.durable_state[0]

    def drop_not_durable(self, durable: tuple[int, int]) -> int | None:
        """After an unclean stop: delete the newest files unless one is exactly the state the
        checkpoint recorded as flushed whole — ``durable`` = (end timestamp, entry count) — since
        anything added after that flush may be torn. Returns where re-dispatch must start
        (None: nothing dropped)."""
        rebuild_from = None
        while self.files and (self.files[-1].end_timestamp_ms,
                              self.files[-1].entry_count) != durable:
            if rebuild_from is not None and self.files[-1].end_timestamp_ms < durable[0]:
                break  # older than the durable state: flushed whole when it rolled
            dropped = self.files.pop()
            log.warning("[recovery] dropping key-index file %s: (end %d ms, %d entries) is not "
                        "the flushed state the checkpoint records (%d ms, %d entries)",
                        dropped.path.name, dropped.end_timestamp_ms, dropped.entry_count,
                        *durable)
            dropped.file.destroy()
            rebuild_from = dropped.begin_position
        return rebuild_from

    @property
    def end_position(self) -> int:
        """Start position of the newest indexed message (0 when empty)."""
        return self.files[-1].end_position if self.files else 0

    def add(self, topic: str, keys: list[str], log_position: int, store_timestamp_ms: int) -> None:
        """Index ``topic#key`` for every key of one message (UNIQ_KEY first, then KEYS)."""
        current = self._writable_file()
        if log_position < current.end_position or (
                log_position == current.end_position and self._has_entries(current)):
            return  # re-dispatch of a message already indexed
        for key in keys:
            key_hash = index_key_hash(f"{topic}#{key}")
            if not current.put_key(key_hash, log_position, store_timestamp_ms):
                current = self._roll()
                current.put_key(key_hash, log_position, store_timestamp_ms)

    def truncate_from(self, log_end: int) -> int | None:
        """Delete the files holding entries for positions at or after ``log_end``.

        Entries cannot be unlinked from their hash chains one by one, so a file that reaches past
        the recovered end of the log is dropped whole. Returns the position re-dispatch must start
        from to rebuild what the dropped files held before ``log_end`` (None: nothing dropped).
        """
        rebuild_from = None
        while self.files and self.files[-1].end_position >= log_end and (
                self.files[-1].entry_count > 1 or self.files[-1].begin_position >= log_end):
            dropped = self.files.pop()
            log.warning("[recovery] dropping key-index file %s: it indexes positions up to %d, "
                        "past the log end %d", dropped.path.name, dropped.end_position, log_end)
            dropped.file.destroy()
            rebuild_from = dropped.begin_position
        return rebuild_from

    def remove_before(self, log_min_position: int) -> list[KeyIndexFile]:
        """Delete files whose entries all point below ``log_min_position`` (never the newest).

        Returns the detached files; the caller closes them after a grace period.
        """
        with self._structure_lock:  # against a roll on the dispatch thread
            files = self.files
            count = 0
            for index_file in files[:-1]:
                if index_file.end_position >= log_min_position:
                    break
                count += 1
            removed = files[:count]
            self.files = files[count:]  # a new list: concurrent queries see old or new
        for index_file in removed:
            log.info("[retention] deleting key-index file %s", index_file.path.name)
            index_file.path.unlink(missing_ok=True)
        return removed

    def sync_header(self) -> None:
        """Write the newest file's header (after a dispatch batch)."""
        if self.files:
            self.files[-1].write_header()

    def _has_entries(self, current: KeyIndexFile) -> bool:
        return current.entry_count > 1 or len(self.files) > 1

    def _writable_file(self) -> KeyIndexFile:
        if not self.files or self.files[-1].is_full:
            return self._roll()
        return self.files[-1]

    def _roll(self) -> KeyIndexFile:
        previous = self.files[-1] if self.files else None
        if previous is not None:
            previous.flush()
            self.durable_state = (previous.end_timestamp_ms, previous.entry_count)
        self.directory.mkdir(parents=True, exist_ok=True)
        now_ms = self._clock.now_ms()
        path = self.directory / index_file_name(now_ms)
        while path.exists():  # two files within one millisecond
            now_ms += 1
            path = self.directory / index_file_name(now_ms)
        previous_end = (previous.end_position, previous.end_timestamp_ms) if previous else (0, 0)
        created = KeyIndexFile(path, self.config.slot_count_max, self.config.entry_count_max,
                               create=True, previous_end=previous_end)
        with self._structure_lock:
            self.files.append(created)
        fsync_dir(self.directory)
        log.info("[key-index] new index file %s", path.name)
        return created

    def query(self, topic: str, key: str, max_count: int, begin_ms: int, end_ms: int) -> list[int]:
        """Candidate positions for ``topic#key``, newest files first (collisions included)."""
        key_hash = index_key_hash(f"{topic}#{key}")
        found: list[int] = []
        for index_file in reversed(self.files):
            if len(found) >= max_count:
                break
            if index_file.overlaps(begin_ms, end_ms):
                index_file.select_positions(key_hash, max_count, begin_ms, end_ms, found)
            if index_file.begin_timestamp_ms < begin_ms:
                break
        return found

    @property
    def entry_count(self) -> int:
        """Keys indexed across all files."""
        return sum(index_file.entry_count - 1 for index_file in self.files)

    def flush(self) -> None:
        """Flush every file (done at close; full files are flushed when they roll)."""
        for index_file in self.files:
            index_file.flush()
        if self.files:
            self.durable_state = (self.files[-1].end_timestamp_ms, self.files[-1].entry_count)

    def close(self) -> None:
        """Unmap every file."""
        for index_file in self.files:
            index_file.close()
