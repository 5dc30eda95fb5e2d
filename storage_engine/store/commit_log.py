"""``CommitLog``: the single append-only log of every message, the store's source of truth.

Appends take one lock, assign each message the next offset of its (topic, queue) and a log
position, encode the record and copy it into the last segment. A record must leave at least
8 bytes in its segment; otherwise the segment is closed with a blank record and the message goes
to the start of a new segment (reference §1.3). Reads by position validate magic, lengths and the
body CRC and raise ``CorruptionError`` with the position when they do not hold.

A slave's log grows by ``append_replicated`` instead: raw bytes from the master, written at the
same positions (reference §14.1), possibly ending inside a record until the next frame.

Thread-safety: ``append`` and ``append_replicated`` are serialised by the put lock; ``read`` may
run concurrently from any thread for positions below ``max_position``. What survives a crash:
flushed bytes; recovery (``recover_end``) scans from a safe segment and truncates a torn tail;
a damaged record that valid records follow is refused, never cut (``damage.py``).
"""

from __future__ import annotations

import logging
import struct
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from ..clock import Clock
from ..config import CommitLogConfig
from ..contract.message import PutResult
from ..errors import (
    CorruptionError,
    DiskFullError,
    InvalidMessageError,
    MidLogCorruptionError,
    ReplicationError,
    StorageIOError,
    StoreNotWritableError,
    invariant,
)
from ..formats import (
    END_FILE_MIN_BLANK_LENGTH,
    MAGIC_V1,
    MAGIC_V2,
    DispatchRecord,
    MessageView,
    RecordKind,
    check_record,
    encode_blank_record,
    takes_queue_offset,
)
from ..formats.engine import encode_record_parts, scan_records, seal_property_crc
from .damage import next_valid_position, survey
from .segment import SCAN_WINDOW_BYTES
from .segment_set import SegmentSet

log = logging.getLogger(__name__)


class PreparedMessage(NamedTuple):
    """A validated message with its variable parts encoded, ready to append."""

    topic: str
    topic_bytes: bytes
    is_v2: bool
    body: bytes
    properties: bytes
    queue_id: int
    flag: int
    sys_flag: int
    born_timestamp_ms: int  # -1: use the store timestamp
    born_host: bytes  # b"": use the store host
    reconsume_count: int
    prepared_transaction_position: int
    body_crc: int
    size: int  # TOTALSIZE of the encoded record
    tags: str | None
    keys: str | None  # the KEYS property (space-separated)
    unique_key: str | None
    user_properties: Mapping[str, str]  # the dispatchers read DELAY from them


_new_tuple = tuple.__new__  # builds NamedTuples without their Python-level __new__ (hot path)

DISPATCH_FEED_MAX = 65_536


class CommitLog:
    """The commit log of one store.

    Besides the bytes, every append leaves a ``DispatchRecord`` in ``dispatch_feed`` (bounded;
    the oldest entries fall off) so the dispatch service need not decode records it was just
    handed; whatever is missing from the feed is decoded from the log as usual.
    """

    def __init__(self, directory: Path, config: CommitLogConfig, store_host: bytes,
                 clock: Clock) -> None:
        self.config = config
        self.segments = SegmentSet(directory, config.segment_size_bytes)
        self.store_host = store_host
        self._clock = clock
        self._lock = threading.Lock()
        self.queue_offsets: dict[tuple[str, int], int] = {}
        self.last_store_timestamp_ms = 0
        self._last_scanned_position: int | None = None  # newest record seen by a recovery scan
        self.truncated_bytes = 0  # non-zero bytes the last ``recover_end`` cut from the tail
        self.failure: BaseException | None = None
        self.dispatch_feed: deque[DispatchRecord] = deque(maxlen=DISPATCH_FEED_MAX)
        self._seal_crc = config.append_property_crc

    # ---- lifecycle ---------------------------------------------------------------------------

    def load(self) -> None:
        """Map existing segments (all treated as full until ``recover_end``)."""
        self.segments.load()

    def recover_end(self, start_position: int, durable_end: int | None = None) -> int:
        """Scan from ``start_position`` to the last valid record and truncate a torn tail.

        ``durable_end``: bytes below it were known durable before the stop (None: all of them,
        after a clean close). Where the scan stops is a torn tail, and is cut, only when no
        valid record follows it, or when it lies at or after ``durable_end`` (records a power
        loss left behind a hole were never known durable). Returns the recovered end position.

        ``truncated_bytes`` is then how many bytes that were not zero the cut removed (the zeros
        after the last record of a clean log are not data).

        Raises:
            MidLogCorruptionError: a damaged record has valid records after it; nothing is
                changed (``postbox store repair`` sets the damage aside).
        """
        end = self.scan_valid_end(start_position)
        if self._last_scanned_position is not None:  # store times continue from the log
            self.last_store_timestamp_ms = max(
                self.last_store_timestamp_ms,
                self.read_store_timestamp(self._last_scanned_position))
        log.info("[recovery] commit log scanned from position=%d; valid data ends at %d",
                 start_position, end)
        check_crc = self.config.check_crc_on_recover
        resume = next_valid_position(self.segments.segments, end, check_crc=check_crc)
        if resume is not None:
            if durable_end is None or end < durable_end:
                raise self._mid_log_error(end, durable_end)
            log.warning("[recovery] torn tail at position=%d: the valid-looking record at "
                        "position=%d and any after it were never known durable (flushed up to "
                        "%d before the stop) and are cut with the tail", end, resume,
                        durable_end)
        self.truncated_bytes = self.segments.truncate(end)
        return end

    def _mid_log_error(self, end: int, durable_end: int | None) -> MidLogCorruptionError:
        """The error for damage at ``end`` that valid records follow (the whole log surveyed)."""
        found = survey(self.segments.segments, end,
                       check_crc=self.config.check_crc_on_recover)
        first = found.damages[0]
        root = self.segments.directory.parent
        others = (f"; {len(found.damages) - 1} more damaged span(s) after it"
                  if len(found.damages) > 1 else "")
        known = "the store was closed cleanly" if durable_end is None else \
            f"the log was known durable up to position={durable_end}"
        message = (f"commit log damaged in the middle, not at its end: {first.describe()}; "
                   f"{found.records_after_damage} valid record(s) follow it{others}, and "
                   f"{known}. Nothing was deleted or changed. Run `postbox store repair "
                   f"--store {root}` to set the damaged bytes aside (every valid record keeps "
                   "its position), or restore the segment from a replica or a backup")
        for damage in found.damages:
            log.error("[recovery] [corruption] %s", damage.describe())
        return MidLogCorruptionError(message, log_position=first.position, path=first.segment,
                                     damages=found.damages,
                                     valid_records_after=found.records_after_damage)

    def scan_valid_end(self, position: int, *, release_pages: bool = False) -> int:
        """Position after the last valid record, scanning forward from ``position``.

        ``release_pages``: the scan walks ``SCAN_WINDOW_BYTES`` at a time and drops each window's
        pages from the process once past it (``MappedSegment.release_pages``), so it never
        holds more than a window of the log however long the log is (a read-only open)."""
        check_crc = self.config.check_crc_on_recover
        segment_size = self.config.segment_size_bytes
        window = SCAN_WINDOW_BYTES if release_pages else segment_size
        while True:
            segment = self.segments.find(position)
            if segment is None:
                return position
            base = segment.base_position
            start = position - base
            offset, last = scan_records(segment.buffer, start, min(start + window, segment_size),
                                        check_crc=check_crc)
            if last >= 0:
                self._last_scanned_position = base + last
            position = base + offset
            # the full check at the stop: a record the window cut is stepped over whole
            check = check_record(segment.buffer, offset, segment_size, check_crc=check_crc)
            if release_pages:
                segment.release_pages(start, offset + (
                    check.size if check.kind == RecordKind.MESSAGE else 0))
            if check.kind == RecordKind.MESSAGE:  # valid, of a layout the fast loop leaves
                self._last_scanned_position = position
                position += check.size
            elif check.kind == RecordKind.BLANK:
                position = base + segment_size
            else:
                if check.kind == RecordKind.CORRUPT:
                    log.warning("[recovery] invalid record at position=%d: %s", position,
                                check.reason)
                return position

    def close(self) -> None:
        """Flush and unmap every segment."""
        with self._lock:
            if self.failure is None:
                self.segments.flush()
            self.segments.close()

    # ---- positions ---------------------------------------------------------------------------

    @property
    def min_position(self) -> int:
        """First position still on disk."""
        return self.segments.min_position

    @property
    def max_position(self) -> int:
        """One past the last written byte."""
        return self.segments.max_position

    # ---- append ------------------------------------------------------------------------------

    def append(self, batch: Sequence[PreparedMessage]) -> list[PutResult]:
        """Append messages in order under the put lock; every message gets the same store time.

        Raises:
            StoreNotWritableError: the log failed earlier (fail-stop).
            InvalidMessageError: a record can never fit in one segment.
            DiskFullError: no room on the disk for a new segment (preallocated whole, so this
                fails cleanly before anything is written to it); messages of the batch before
                the failing one are stored, the rest are not.
            StorageIOError: a new segment could not be created for another reason (same).
        """
        with self._lock:
            if self.failure is not None:
                raise StoreNotWritableError(
                    f"commit log stopped accepting writes after an I/O error: {self.failure}")
            now = self._clock.now_ms()
            if now < self.last_store_timestamp_ms:
                now = self.last_store_timestamp_ms  # store times never go backwards
            self.last_store_timestamp_ms = now
            return self._append_locked(batch, now)

    def _append_locked(self, batch: Sequence[PreparedMessage], now: int) -> list[PutResult]:
        results: list[PutResult] = []
        segment = self.segments.last
        pending: list[bytes] = []  # records for ``segment``, written in one copy
        position = segment.end_position if segment is not None else 0
        try:
            for message in batch:
                size = message.size
                if segment is None or segment.size_bytes - (position - segment.base_position) < (
                        size + END_FILE_MIN_BLANK_LENGTH):
                    self._write_pending(segment, pending)
                    segment = self._roll(size)
                    position = segment.base_position
                pending.append(self._encode(message, position, now, results))
                position += size
        finally:  # whatever was encoded is written, so offsets and feed match the log
            self._write_pending(segment, pending)
        return results

    def _encode(self, message: PreparedMessage, position: int, now: int,
                results: list[PutResult]) -> bytes:
        """Encode one record at ``position``; take its queue offset only once it encoded."""
        key = (message.topic, message.queue_id)
        takes_offset = takes_queue_offset(message.sys_flag)
        queue_offset = self.queue_offsets.get(key, 0) if takes_offset else 0  # half/rollback: 0
        store_host = self.store_host
        record = encode_record_parts(
            message.topic_bytes, message.is_v2, message.body, message.properties,
            message.queue_id, message.flag, queue_offset, position, message.sys_flag,
            now if message.born_timestamp_ms < 0 else message.born_timestamp_ms,
            message.born_host or store_host, now, store_host, message.reconsume_count,
            message.prepared_transaction_position, message.body_crc)
        if self._seal_crc:
            record = seal_property_crc(record)
        invariant(len(record) == message.size,
                  f"encoded {len(record)} bytes where {message.size} were computed")
        if takes_offset:
            self.queue_offsets[key] = queue_offset + 1
        self.dispatch_feed.append(_new_tuple(DispatchRecord, (
            message.topic, message.queue_id, queue_offset, position, message.size,
            message.sys_flag, now, message.tags, message.keys, message.unique_key,
            message.user_properties)))
        results.append(PutResult(message.topic, message.queue_id, queue_offset, position,
                                 message.size, now, store_host))
        return record

    @staticmethod
    def _write_pending(segment, pending: list[bytes]) -> None:
        if pending:
            segment.write(b"".join(pending) if len(pending) > 1 else pending[0])
            pending.clear()

    def _roll(self, record_size: int):
        segment_size = self.config.segment_size_bytes
        if record_size + END_FILE_MIN_BLANK_LENGTH > segment_size:
            raise InvalidMessageError(
                f"a {record_size}-byte record can never fit a {segment_size}-byte segment; "
                "raise commit_log.segment_size_bytes (broker.conf mappedFileSizeCommitLog)")
        last = self.segments.last
        if last is not None and not last.is_full:
            remaining = last.remaining_bytes
            last.write(encode_blank_record(remaining))
            last.written_position = segment_size
        try:
            return self.segments.create_next()
        except (StorageIOError, DiskFullError) as error:
            log.error("[append] cannot create a new commit-log segment after position=%d: %s",
                      self.max_position, error)
            raise

    def append_replicated(self, position: int, data: bytes | memoryview) -> int:
        """Slave: copy bytes received from the master to ``position``, the end of this log.

        The bytes are raw log content (records, parts of records, blank tails) and are written
        as they came, so every record keeps its master position; segments are created when the
        last one is full. An empty log starts at ``position``, which must be a segment start.
        Returns the new end of the log.

        Raises:
            ReplicationError: ``position`` is not where this log ends.
            StoreNotWritableError: the log failed earlier (fail-stop).
        """
        segment_size = self.config.segment_size_bytes
        with self._lock:
            if self.failure is not None:
                raise StoreNotWritableError(
                    f"commit log stopped accepting writes after an I/O error: {self.failure}")
            end = self.max_position
            if not self.segments.segments:
                if position % segment_size:
                    raise ReplicationError(
                        f"an empty log can only start at a segment start, not at "
                        f"position={position}", log_position=position)
            elif position != end:
                raise ReplicationError(f"data for position={position} but the log ends at {end}",
                                       log_position=position)
            view = memoryview(data)
            while view:
                segment = self.segments.last
                if segment is None:
                    segment = self.segments.create_next(position)
                elif segment.is_full:
                    segment = self.segments.create_next()
                chunk = view[:segment.remaining_bytes]
                segment.write(chunk)
                view = view[len(chunk):]
            return self.max_position

    def fail(self, error: BaseException) -> None:
        """Enter fail-stop: every later append raises ``StoreNotWritableError``."""
        if self.failure is None:
            self.failure = error
            log.error("[fail-stop] commit log refuses writes from now on: %s", error)

    # ---- read --------------------------------------------------------------------------------

    def read(self, position: int, *, check_crc: bool = True) -> MessageView:
        """Decode the record at ``position``.

        Raises:
            CorruptionError: no valid record starts there (bad magic, size, or CRC).
        """
        segment = self.segments.find(position)
        if segment is None or position >= self.max_position or position < 0:
            raise CorruptionError(
                f"no record at position={position}: the log holds "
                f"[{self.min_position}, {self.max_position})", log_position=position)
        offset = position - segment.base_position
        check = check_record(segment.buffer, offset, segment.written_position,
                             check_crc=check_crc)
        if check.kind != RecordKind.MESSAGE:
            reason = check.reason or f"{check.kind} record"
            raise CorruptionError(f"no valid record at position={position}: {reason}",
                                  log_position=position, path=str(segment.path))
        return MessageView.decode(segment.buffer, offset)

    def read_unchecked(self, position: int) -> MessageView:
        """Decode the record at ``position`` checking only magic and its own position field.

        For index lookups and the timer log's read-back, whose positions came from this
        store's own dispatch (or a timer log naming its records); anything that
        does not look like the right record falls back to :meth:`read` and its full checks.
        """
        segment = self.segments.find(position)
        if segment is not None and position < self.max_position:
            try:
                view = MessageView.decode(segment.buffer, position - segment.base_position)
            except struct.error:  # lengths run past the segment: let read() describe it
                view = None
            if view is not None and view.log_position == position and view.magic in (
                    MAGIC_V1, MAGIC_V2):
                return view
        return self.read(position, check_crc=False)

    def has_record_at(self, position: int) -> bool:
        """Whether a well-formed record (CRC not checked) starts at ``position``."""
        segment = self.segments.find(position)
        if segment is None:
            return False
        check = check_record(segment.buffer, position - segment.base_position,
                             segment.written_position, check_crc=False)
        return check.kind == RecordKind.MESSAGE

    def read_store_size(self, position: int) -> int:
        """Size of the record at ``position`` (0 when it cannot be read)."""
        try:
            return self.read(position, check_crc=False).store_size
        except CorruptionError:
            return 0

    def read_store_timestamp(self, position: int) -> int:
        """Store time of the record at ``position`` (0 when it cannot be read)."""
        try:
            return self.read(position, check_crc=False).store_timestamp_ms
        except CorruptionError:
            return 0
