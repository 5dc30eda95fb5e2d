"""What a slave's store needs around its replicated commit log, besides the client.

Frames carry raw bytes cut at ``ha.transfer_batch_bytes``, so a slave's log may end inside a
record until the next frame. ``RecordBoundary`` tells dispatch where the last *complete* record
ends (reading only 8-byte record heads), so dispatch never meets half a record, and trims such
a tail at a clean close so the directory verifies and the master resends it. The master's log
end is always a record boundary, so a master never needs this.

``LogTimestampDispatcher`` keeps the commit log's newest store time current on a slave (where no
append sets it); the flush services write it to the checkpoint, so recovery after an unclean
stop starts from a recent segment (RocketMQ: "on slaves by CQ dispatch", reference §5.1).

Thread-safety: ``RecordBoundary.advance`` runs on the dispatch thread (and at open/close, with
services stopped); the dispatcher on the dispatch thread.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence

from ..formats import (
    BLANK_MAGIC,
    END_FILE_MIN_BLANK_LENGTH,
    MAGIC_V1,
    MAGIC_V2,
    RECORD_FIXED_OVERHEAD_BYTES,
    DispatchRecord,
)
from .log_port import ReplicatedLog

log = logging.getLogger(__name__)

_RECORD_HEAD = struct.Struct(">ii")  # TOTALSIZE, MAGIC
assert _RECORD_HEAD.size == END_FILE_MIN_BLANK_LENGTH


class RecordBoundary:
    """The end of the last complete record of a log that grows by raw byte ranges.

    ``floor`` gives a known boundary to start from (dispatch's position: every record below it
    was dispatched whole).
    """

    def __init__(self, commit_log: ReplicatedLog, floor: Callable[[], int]) -> None:
        self._commit_log = commit_log
        self._floor = floor
        self._position = 0

    def advance(self, limit: int) -> int:
        """Walk record heads up to ``limit``; return the last boundary at or below it."""
        commit_log = self._commit_log
        segment_size = commit_log.config.segment_size_bytes
        position = max(self._position, self._floor(), commit_log.min_position)
        while position + END_FILE_MIN_BLANK_LENGTH <= limit:
            segment = commit_log.segments.find(position)
            if segment is None:
                break
            offset = position - segment.base_position
            if segment_size - offset < END_FILE_MIN_BLANK_LENGTH:
                break  # no room for a record head: not a boundary the master writes
            size, magic = _RECORD_HEAD.unpack_from(segment.buffer, offset)
            if magic == BLANK_MAGIC:
                end = segment.base_position + segment_size
            elif magic in (MAGIC_V1, MAGIC_V2) and size >= RECORD_FIXED_OVERHEAD_BYTES:
                end = position + size
            else:
                end = limit  # not a record: dispatch reads it and reports the corruption
            if end > limit:
                break
            position = end
        self._position = position
        return position

    def trim_tail(self) -> int:
        """Cut a partial last record (services stopped); returns the bytes removed."""
        commit_log = self._commit_log
        end = commit_log.max_position
        boundary = self.advance(end)
        if boundary >= end:
            return 0
        log.info("[ha] slave log ends inside a record: trimming positions %d..%d (the master "
                 "sends them again)", boundary, end)
        commit_log.segments.truncate(boundary)
        return end - boundary


class LogTimestampDispatcher:
    """Sets the commit log's newest store time from dispatched records (slaves only)."""

    def __init__(self, commit_log: ReplicatedLog) -> None:
        self._commit_log = commit_log
        self._newest_ms = 0

    def dispatch_run(self, records: Sequence[DispatchRecord]) -> None:
        """Remember the newest store time of the run."""
        self._newest_ms = records[-1].store_timestamp_ms

    def batch_done(self) -> None:
        """Publish the newest store time of the batch."""
        if self._newest_ms > self._commit_log.last_store_timestamp_ms:
            self._commit_log.last_store_timestamp_ms = self._newest_ms
