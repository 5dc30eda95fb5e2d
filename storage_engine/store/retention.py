"""``RetentionService``: expired-file cleaning and cleaning under disk pressure (reference §8).

Every ``CLEAN_INTERVAL_MS`` (10 s) one run:

1. measures disk usage of the partition holding the store through the ``DiskGuard`` (which puts
   also consult, far more often, to refuse writes at ``disk_space_warning_level_ratio``): above
   ``disk_space_clean_forcibly_ratio`` (85 %) or the warning level (90 %) the run cleans
   *immediately*; above ``disk_max_used_space_ratio`` (75 %) expired files are deleted outside
   the delete hours;
2. when it is a deletion hour (``delete_when``, local time), the disk check asks for it, or an
   operator requested it (``request_deletion``), deletes commit-log segments oldest first:
   expired ones (file modified more than ``file_reserved_hours`` ago) and, when cleaning
   immediately, unexpired ones that every subscribed group has consumed past (their end is at
   or below the *consumption floor*, a callable the store's owner provides — the broker knows
   the groups and their offsets; without one nothing unexpired is deleted) — or any unexpired
   one when ``clean_file_forcibly_enable`` (RocketMQ's forced clean, off by default: it deletes
   messages nobody has read). Never the segment being written, never one not yet flushed or
   dispatched, at most ``delete_file_batch_max`` a run, stopping at the first one that must stay
   (no holes);
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
import time
from collections.abc import Callable
from pathlib import Path

from ..clock import Clock
from ..config import RetentionConfig
from ..service import Service
from .commit_log import CommitLog
from .consume_queue_set import ConsumeQueueSet
from .disk_guard import DiskGuard, disk_usage
from .key_index import KeyIndex

log = logging.getLogger(__name__)

CLEAN_INTERVAL_MS = 10_000
MANUAL_DELETE_RUNS = 20
ConsumptionFloor = Callable[[], int]
"""Lowest log position some subscribed group still has to consume (segments ending at or below
it have been consumed past by every group)."""


def disk_used_ratio(path: Path) -> float:
    """``ceil(used * 100 / (used + available)) / 100`` of the partition holding ``path``.

    ``used`` is the size minus the free blocks and ``available`` the blocks an unprivileged
    process may still take: RocketMQ 5's formula, and the figure ``df`` shows as ``Use%``. The
    blocks reserved for root (or hidden by a quota) count on neither side, so they never make a
    roomy disk look full.
    """
    return disk_usage(path).ratio


def local_hour(now_ms: int) -> int:
    """Hour of the day (0–23) in the machine's local time zone."""
    return time.localtime(now_ms / 1000).tm_hour


class RetentionService(Service):
    """Deletes expired files and guards the disk."""

    name = "retention"
    interval_ms = CLEAN_INTERVAL_MS

    def __init__(self, commit_log: CommitLog, queues: ConsumeQueueSet, key_index: KeyIndex,
                 dispatched_position: Callable[[], int], config: RetentionConfig, clock: Clock,
                 *, guard: DiskGuard, hour_of_day: Callable[[int], int] = local_hour) -> None:
        super().__init__(clock)
        self._commit_log = commit_log
        self._queues = queues
        self._key_index = key_index
        self._dispatched_position = dispatched_position
        self.config = config
        self.guard = guard
        self._hour_of_day = hour_of_day
        self._delete_hours = {int(hour) for hour in config.delete_when.split(";")}
        self._manual_runs = 0
        self._to_close: list = []  # detached files whose mappings close on the next run
        self.consumption_floor: ConsumptionFloor | None = None
        """Set by the store's owner (``MessageStore.set_consumption_floor``)."""
        self.deleted_segment_count = 0
        self.kept_unconsumed = False
        """The last immediate cleaning stopped at a segment some group has not consumed."""

    @property
    def disk_full(self) -> bool:
        """Whether writes are refused for disk usage (the guard's state)."""
        return self.guard.full

    @property
    def disk_used_ratio(self) -> float:
        """Used fraction of the store's partition at the last measurement."""
        return self.guard.used_ratio

    def request_deletion(self) -> None:
        """Operator request: delete expired files in the next runs regardless of the hour."""
        self._manual_runs = MANUAL_DELETE_RUNS
        self.wakeup()

    def run_once(self, now_ms: int) -> int:
        """One cleaning run; returns the number of commit-log segments deleted."""
        self._close_detached()
        immediate, space_wants = self._check_space(now_ms)
        deleted = 0
        if immediate or space_wants or self._manual_runs or (
                self._hour_of_day(now_ms) in self._delete_hours):
            self._manual_runs = max(0, self._manual_runs - 1)
            deleted = self._delete_segments(now_ms, immediate)
        self._clean_derived()
        return deleted  # non-zero: the loop runs again at once, until nothing is deletable

    def _check_space(self, now_ms: int) -> tuple[bool, bool]:
        """(clean immediately, delete expired files now) from the disk usage."""
        ratio = self.guard.check(now_ms)
        config = self.config
        if self.guard.full or ratio > config.disk_space_clean_forcibly_ratio / 100:
            return True, True
        return False, ratio > config.disk_max_used_space_ratio / 100

    def _delete_segments(self, now_ms: int, immediate: bool) -> int:
        reserved_ms = self.config.file_reserved_hours * 3_600_000
        dispatched = self._dispatched_position()
        forcibly = immediate and self.config.clean_file_forcibly_enable
        floor = self._floor() if immediate and not forcibly else None
        segments = self._commit_log.segments.segments
        count = 0
        self.kept_unconsumed = False
        for segment in segments[:-1][:self.config.delete_file_batch_max]:
            end = segment.base_position + segment.size_bytes
            if segment.flushed_position < segment.size_bytes or dispatched < end:
                break  # not yet durable or not yet in the queues: never delete
            if _modified_ms(segment.path) + reserved_ms <= now_ms or forcibly:
                count += 1
                continue
            if floor is None or end > floor:
                self.kept_unconsumed = floor is not None
                break  # the first file that must stay ends the run (no holes)
            count += 1  # unexpired, but every subscribed group has consumed past it
        removed = self._commit_log.segments.remove_front(count)
        for segment in removed:
            log.info("[retention] deleted commit-log segment %s%s", segment.path.name,
                     " (forced: cleanFileForciblyEnable)" if forcibly else "")
        if self.kept_unconsumed:
            log.warning("[retention] disk %.0f%% used: segment at position=%d holds messages "
                        "a subscribed group has not consumed yet; kept (writes are refused at "
                        "%d%% instead; retention.clean_file_forcibly_enable deletes them)",
                        self.guard.used_ratio * 100, segments[count].base_position,
                        self.config.disk_space_warning_level_ratio)
        self._to_close.extend(removed)
        self.deleted_segment_count += len(removed)
        return len(removed)

    def _floor(self) -> int:
        """The consumption floor (the log's first position, deleting nothing, without one)."""
        provider = self.consumption_floor
        return self._commit_log.min_position if provider is None else provider()

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
