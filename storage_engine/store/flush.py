"""Flush services: what makes written bytes durable, and when (reference §6).

- ``GroupFlushService`` (``FlushMode.SYNC``): appenders call ``wait_flushed(position)``; one
  of them at a time *leads*: it fdatasyncs everything written so far, releases every waiter the
  sync covered and hands leadership to the lowest one still waiting (``PositionWaiters``). While
  it syncs (fdatasync releases the GIL) the others write and park, so one disk sync serves a
  whole group of appends, with no flusher thread to wake in between. The service's own thread
  only syncs what nobody waits for (``WAIT=false`` puts, replicated bytes) every
  ``interval_ms``. A wait longer than ``flush.sync_timeout_ms`` returns False: the caller
  reports "stored, not confirmed durable" (``PutStatus.FLUSH_DISK_TIMEOUT``), never a silent
  success.
- ``PeriodicFlushService`` (``FlushMode.ASYNC``): every ``flush.interval_ms`` flush the commit log
  when at least ``flush.least_pages`` pages are dirty, and regardless of pages every
  ``flush.thorough_interval_ms``.
- ``QueueFlushService``: every ``flush.consume_queue_interval_ms`` flush consume queues with the
  ``consume_queue_least_pages`` rule, thoroughly every ``consume_queue_thorough_interval_ms``,
  then persist the checkpoint (5.x persists it every second). Out of file descriptors, a pass
  is retried on the next interval (``Service.retries_out_of_descriptors``), never fail-stop.

Both commit-log services publish ``flushed_position`` and ``flushed_timestamp_ms`` (the store time
of the newest record known durable). An fdatasync that fails raises out of ``run_once``; the
``Service`` loop then ends and the owner goes fail-stop (a leading appender's failed sync does
the same through ``fail``). A failed fsync is never retried: after
one, the kernel may have dropped the dirty pages and a later "successful" sync proves nothing.

Thread-safety: ``wait_flushed`` may be called from any number of threads; each waiter parks on
its own lock (``PositionWaiters``), released by the flush that covers it or by the hand-over
that makes it the next leader.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..clock import Clock
from ..config import FlushConfig
from ..group_commit import PositionWaiters
from ..service import Service
from .checkpoint import Checkpoint
from .commit_log import CommitLog
from .consume_queue_set import ConsumeQueueSet
from .store_tally import LatencyTally

log = logging.getLogger(__name__)

TimestampSource = Callable[[], int]
IndexStateSource = Callable[[], tuple[int, int]]  # (end timestamp, entry count)


class CommitLogFlushService(Service):
    """Common part of the two commit-log flush services."""

    def __init__(self, commit_log: CommitLog, config: FlushConfig, clock: Clock) -> None:
        super().__init__(clock)
        self._commit_log = commit_log
        self.config = config
        self._durable = PositionWaiters(commit_log.segments.flushed_position)
        self.flushed_timestamp_ms = 0
        self.flush_count = 0
        self.flush_latency = LatencyTally()
        """Durations of the flushes that made bytes durable."""

    @property
    def flushed_position(self) -> int:
        """One past the last byte known durable."""
        return self._durable.position

    def flush(self, least_pages: int = 0) -> int:
        """Flush the log now on the calling thread; returns the bytes newly made durable."""
        # Capture the store time, then the end: records stored before that time (recovery keeps
        # a 3 s margin for appends in flight at the capture) lie below the end.
        timestamp_ms = self._commit_log.last_store_timestamp_ms
        end = self._commit_log.max_position
        started_s = time.monotonic()
        flushed = self._commit_log.segments.flush(least_pages)
        moved = flushed - self.flushed_position
        if moved <= 0:
            return 0
        self.flush_latency.observe(time.monotonic() - started_s)
        self.flush_count += 1
        if flushed >= end:
            self.flushed_timestamp_ms = timestamp_ms
        self._durable.advance(flushed)
        return moved

    def on_failure(self, error: BaseException) -> None:
        """Wake waiters, and any later ones, so they see the failure."""
        self._durable.release_all(final=True)


class GroupFlushService(CommitLogFlushService):
    """SYNC mode: the waiting appenders sync in turn, each sync covering everything written."""

    name = "group-flush"
    interval_ms = 10

    def wait_flushed(self, position: int, timeout_ms: int) -> bool:
        """Block until ``position`` is durable, leading syncs when it is this thread's turn;
        False on timeout or after a failed sync."""
        durable = self._durable
        deadline = time.monotonic() + max(0, timeout_ms) / 1000
        while True:
            covered = durable.wait_or_lead(position, deadline)
            if covered is not None:
                return covered and self.failure is None
            self._lead()

    def _lead(self) -> None:
        """One group sync as the leader, then hand leadership on."""
        try:
            self.flush(0)
        except Exception as error:  # fail-stop; waiters see ``failure``
            log.exception("[%s] commit-log sync failed: the store stops accepting writes",
                          self.name)
            self.fail(error)
        finally:
            self._durable.end_lead()

    def run_once(self, now_ms: int) -> int:
        """Sync bytes nobody waits for, unless an appender leads; returns 1 if it synced."""
        if self.failure is not None or not self._durable.try_lead():
            return 0
        try:
            return 1 if self.flush(0) else 0
        finally:
            self._durable.end_lead()


class PeriodicFlushService(CommitLogFlushService):
    """ASYNC mode: flush on a timer with the least-pages rule."""

    name = "periodic-flush"

    def __init__(self, commit_log: CommitLog, config: FlushConfig, clock: Clock) -> None:
        super().__init__(commit_log, config, clock)
        self.interval_ms = config.interval_ms
        self._last_thorough_ms = clock.now_ms()

    def run_once(self, now_ms: int) -> int:
        """One timed flush. Always returns 0 so the loop sleeps ``interval_ms``."""
        least_pages = self.config.least_pages
        if now_ms - self._last_thorough_ms >= self.config.thorough_interval_ms:
            least_pages = 0
            self._last_thorough_ms = now_ms
        self.flush(least_pages)
        return 0


class QueueFlushService(Service):
    """Flushes consume queues and persists the checkpoint."""

    name = "queue-flush"
    retries_out_of_descriptors = True  # a queue flush is repeatable; a checkpoint write that
    # cannot open the file writes nothing, and the old checkpoint is what recovery reads

    def __init__(self, queues: ConsumeQueueSet, config: FlushConfig, clock: Clock,
                 checkpoint: Checkpoint, log_flusher: CommitLogFlushService,
                 dispatched_timestamp: TimestampSource, key_index_state: IndexStateSource
                 ) -> None:
        super().__init__(clock)
        self._queues = queues
        self.config = config
        self.interval_ms = config.consume_queue_interval_ms
        self._checkpoint = checkpoint
        self._log_flusher = log_flusher
        self._dispatched_timestamp = dispatched_timestamp
        self._key_index_state = key_index_state
        self._last_thorough_ms = clock.now_ms()
        self.queue_flushed_timestamp_ms = checkpoint.state.queue_flushed_timestamp_ms

    def run_once(self, now_ms: int) -> int:
        """One timed flush of the queues, then the checkpoint. Returns 0 (timer driven)."""
        thorough = now_ms - self._last_thorough_ms >= self.config.consume_queue_thorough_interval_ms
        self.flush(thorough)
        if thorough:
            self._last_thorough_ms = now_ms
        return 0

    def flush(self, thorough: bool) -> None:
        """Flush queues (thoroughly: every dirty unit) and persist the checkpoint."""
        dispatched_ms = self._dispatched_timestamp()  # before the flush, as for the log
        self._queues.flush(0 if thorough else self.config.consume_queue_least_pages)
        if thorough:
            self.queue_flushed_timestamp_ms = dispatched_ms
        self.persist_checkpoint()

    def persist_checkpoint(self) -> None:
        """Write the newest durable timestamps to the checkpoint (if they changed)."""
        index_timestamp_ms, index_entry_count = self._key_index_state()
        self._checkpoint.update(
            log_flushed_timestamp_ms=self._log_flusher.flushed_timestamp_ms,
            queue_flushed_timestamp_ms=self.queue_flushed_timestamp_ms,
            key_index_flushed_timestamp_ms=index_timestamp_ms,
            key_index_entry_count=index_entry_count,
            confirm_position=self._log_flusher.flushed_position)
        self._checkpoint.persist()
