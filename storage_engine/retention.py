"""``RetentionService``: expired-file cleaning and disk watermarks (reference §8).

Every ``CLEAN_INTERVAL_MS`` (10 s) one run:

1. measures disk usage of the partition(s) holding the store (an injectable probe):
   above ``disk_space_warning_level_ratio`` (90 %) the store is *disk full* — writes are refused
   with ``DiskFullError`` and files are deleted even if not expired; above
   ``disk_space_clean_forcibly_ratio`` (85 %) unexpired files are deleted too; above
   ``disk_max_used_space_ratio`` (75 %) expired files are deleted outside the delete hours; at or
   below the warning level the disk-full state clears and writes are accepted again;
2. when it is a deletion hour (``delete_when``, local time), the disk check asks for it, or an
   operator requested it (``request_deletion``), deletes commit-log segments oldest first:
   expired ones (file modified more than ``file_reserved_hours`` ago) or, in forced mode, any —
   never the segment being written, never one not yet flushed or dispatched, at most
   ``delete_file_batch_max`` a run, stopping at the first one that must stay (no holes);
3. deletes consume-queue and key-index files whose entries all point below the new minimum log
   position and moves every queue's ``min_offset`` to its first unit still in the log.

Deleted files are unlinked at once; their mappings are closed one run later (a grace period for
readers that looked a segment up just before). The clock, the hour-of-day function and the disk
probe are injectable, so tests need neither 72 hours nor a full disk. What survives a crash:
deletions are file unlinks followed by a directory fsync; a crash in between leaves files that
the next run deletes again.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

from .clock import Clock
from .commit_log import CommitLog
from .config import RetentionConfig
from .consume_queue_set import ConsumeQueueSet
from .key_index import KeyIndex
from .service import Service

log = logging.getLogger(__name__)

CLEAN_INTERVAL_MS = 10_000
MANUAL_DELETE_RUNS = 20
DiskUsageProbe = Callable[[Path], float]
"""Used fraction (0.0–1.0) of the partition holding a path."""


def disk_used_ratio(path: Path) -> float:
    """``ceil(used * 100 / (used + available)) / 100`` of the partition holding ``path``.

    ``used`` is the size minus the free blocks and ``available`` the blocks an unprivileged
    process may still take: RocketMQ 5's formula, and the figure ``df`` shows as ``Use%``. The
    blocks reserved for root (or hidden by a quota) count on neither side, so they never make a
    roomy disk look full.
    """
    stats = os.statvfs(path)
    used = (stats.f_blocks - stats.f_bfree) * stats.f_frsize
    available = stats.f_bavail * stats.f_frsize
    if used + available <= 0:
        return 0.0
    return math.ceil(used * 100 / (used + available)) / 100


def local_hour(now_ms: int) -> int:
    """Hour of the day (0–23) in the machine's local time zone."""
    return time.localtime(now_ms / 1000).tm_hour


class RetentionService(Service):
    """Deletes expired files and guards the disk."""

    name = "retention"
    interval_ms = CLEAN_INTERVAL_MS

    def __init__(self, commit_log: CommitLog, queues: ConsumeQueueSet, key_index: KeyIndex,
                 dispatched_position: Callable[[], int], config: RetentionConfig, clock: Clock,
                 *, root_dir: Path, disk_usage: DiskUsageProbe = disk_used_ratio,
                 hour_of_day: Callable[[int], int] = local_hour) -> None:
        super().__init__(clock)
        self._commit_log = commit_log
        self._queues = queues
        self._key_index = key_index
        self._dispatched_position = dispatched_position
        self.config = config
        self._root_dir = root_dir
        self._disk_usage = disk_usage
        self._hour_of_day = hour_of_day
        self._delete_hours = {int(hour) for hour in config.delete_when.split(";")}
        self._manual_runs = 0
        self._to_close: list = []  # detached files whose mappings close on the next run
        self.disk_full = False
        self.disk_used_ratio = 0.0
        self.deleted_segment_count = 0

    def request_deletion(self) -> None:
        """Operator request: delete expired files in the next runs regardless of the hour."""
        self._manual_runs = MANUAL_DELETE_RUNS
        self.wakeup()

    def run_once(self, now_ms: int) -> int:
        """One cleaning run; returns the number of commit-log segments deleted."""
        self._close_detached()
        forced, space_wants = self._check_space()
        deleted = 0
        if forced or space_wants or self._manual_runs or (
                self._hour_of_day(now_ms) in self._delete_hours):
            self._manual_runs = max(0, self._manual_runs - 1)
            deleted = self._delete_segments(now_ms, forced)
        self._clean_derived()
        return deleted  # non-zero: the loop runs again at once, until nothing is deletable

    def _check_space(self) -> tuple[bool, bool]:
        """(delete unexpired files too, delete expired files now) from the disk usage."""
        ratio = self._disk_usage(self._root_dir)
        self.disk_used_ratio = ratio
        config = self.config
        if ratio > config.disk_space_warning_level_ratio / 100:
            if not self.disk_full:
                log.error("[retention] disk %.0f%% used, above the %d%% warning level: writes "
                          "refused until space is freed", ratio * 100,
                          config.disk_space_warning_level_ratio)
            self.disk_full = True
            return True, True
        if self.disk_full:
            log.warning("[retention] disk %.0f%% used: writes accepted again", ratio * 100)
        self.disk_full = False
        if ratio > config.disk_space_clean_forcibly_ratio / 100:
            return True, True
        return False, ratio > config.disk_max_used_space_ratio / 100

    def _delete_segments(self, now_ms: int, forced: bool) -> int:
        reserved_ms = self.config.file_reserved_hours * 3_600_000
        dispatched = self._dispatched_position()
        segments = self._commit_log.segments.segments
        count = 0
        for segment in segments[:-1][:self.config.delete_file_batch_max]:
            end = segment.base_position + segment.size_bytes
            if segment.flushed_position < segment.size_bytes or dispatched < end:
                break  # not yet durable or not yet in the queues: never delete
            if not forced and _modified_ms(segment.path) + reserved_ms > now_ms:
                break  # the first file that must stay ends the run (no holes)
            count += 1
        removed = self._commit_log.segments.remove_front(count)
        for segment in removed:
            log.info("[retention] deleted commit-log segment %s%s", segment.path.name,
                     " (forced)" if forced else "")
        self._to_close.extend(removed)
        self.deleted_segment_count += len(removed)
        return len(removed)

    def _clean_derived(self) -> None:
        """Delete queue and index files that only point below the log's first position."""
        log_min = self._commit_log.min_position
        if log_min == 0:
            return
        for queue in list(self._queues.queues.values()):
            self._to_close.extend(queue.remove_before(log_min))
        self._to_close.extend(index_file.file for index_file in
                              self._key_index.remove_before(log_min))

    def _close_detached(self) -> None:
        detached, self._to_close = self._to_close, []
        for segment in detached:
            segment.close()

    def close(self) -> None:
        """Close every detached mapping now (the store is closing)."""
        self._close_detached()


def _modified_ms(path: Path) -> int:
    try:
        return int(path.stat().st_mtime * 1000)
    except FileNotFoundError:
        return 0
