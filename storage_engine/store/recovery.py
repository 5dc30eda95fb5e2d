"""Start-up recovery: bring the commit log and the derived files back into agreement.

The commit log is the source of truth; consume queues and the key index are derived from it and
are truncated or rebuilt to match. ``abort`` present at open means the last run did not close
cleanly (reference §5). Disk states and the action each one gets:

| state at open                                  | action                                     |
|------------------------------------------------|--------------------------------------------|
| no commit-log segments                         | derived files emptied; start at 0          |
| clean shutdown                                 | scan from the 3rd-last segment             |
| unclean, checkpoint plausible                  | scan from the newest segment whose first   |
|                                                | record was stored at or before             |
|                                                | min(log, queue flush time) - 3 s           |
| unclean, checkpoint zero or implausible        | scan from the first segment                |
| torn log tail (CRC checked): nothing valid     | truncate after the last valid record, zero |
| after the first bad byte, or (unclean stop)    | the rest of that segment                   |
| only records past the checkpoint's confirm     |                                            |
| position (never known durable)                 |                                            |
| damaged record followed by valid records       | refuse to open (``MidLogCorruptionError``: |
| (clean stop, or below the confirm position)    | segment, position, reason, records after); |
|                                                | nothing changed; ``postbox store repair``  |
| empty trailing segments                        | deleted (the first segment always stays)   |
| queue units pointing past the recovered end    | truncated                                  |
| queue units damaged (found by load)            | truncated at the first bad unit; re-       |
|                                                | dispatch from that queue's new end         |
| key-index file damaged (found by load)         | deleted with newer files; re-dispatch from |
|                                                | the previous file's end                    |
| key-index file reaching past the recovered end | deleted; re-dispatch from its first entry  |
| unclean: key-index file newer than the         | deleted (may be torn); re-dispatch from    |
| checkpoint's index time                        | its first entry                            |
| key index gone though the checkpoint says      | re-dispatch the whole log                  |
| keys were indexed                              |                                            |
| unclean shutdown                               | re-dispatch every record from the scan     |
|                                                | start                                      |
| clean shutdown                                 | re-dispatch from where queues or index     |
|                                                | stop, if behind the log                    |
| any re-dispatch                                | units and index entries already present    |
|                                                | are skipped                                |

After recovery the store drains dispatch and sets every queue's next offset from its consume
queue. Runs on the opening thread before any service starts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..formats import CheckpointState
from .checkpoint import plausible
from .commit_log import CommitLog
from .consume_queue_set import ConsumeQueueSet
from .key_index import KeyIndex

log = logging.getLogger(__name__)

SCAN_SEGMENTS_BACK = 3
CHECKPOINT_MARGIN_MS = 3000
"""Recovery starts this long before the checkpoint's times: appends in flight when a flush
captured its time may carry the same or a slightly older store time."""


@dataclass
class RecoveryReport:
    """What recovery found and did (logged, and kept in ``MessageStore.stats()``)."""

    clean_shutdown: bool
    checkpoint_trusted: bool = True
    scan_start: int = 0
    log_end: int = 0
    truncated_bytes: int = 0
    """Bytes that were not zero cut from the log's tail (a torn record; 0 for a clean log)."""
    dispatch_start: int = 0
    actions: list[str] = field(default_factory=list)

    @property
    def redispatched_bytes(self) -> int:
        """Log bytes re-dispatched to rebuild queues and index."""
        return max(0, self.log_end - self.dispatch_start)

    def as_dict(self) -> dict:
        """JSON-able form."""
        return {"clean_shutdown": self.clean_shutdown,
                "checkpoint_trusted": self.checkpoint_trusted, "scan_start": self.scan_start,
                "log_end": self.log_end, "truncated_bytes": self.truncated_bytes,
                "dispatch_start": self.dispatch_start,
                "redispatched_bytes": self.redispatched_bytes, "actions": list(self.actions)}


def recover(commit_log: CommitLog, queues: ConsumeQueueSet, key_index: KeyIndex | None,
            clean_shutdown: bool, checkpoint: CheckpointState, now_ms: int) -> RecoveryReport:
    """Truncate what is invalid and decide where dispatch resumes (``dispatch_start``)."""
    report = RecoveryReport(clean_shutdown)
    if not plausible(checkpoint, now_ms + 86_400_000):
        log.warning("[recovery] checkpoint %s is implausible: ignored", checkpoint)
        report.checkpoint_trusted = False
        report.actions.append("checkpoint implausible: ignored")
        checkpoint = CheckpointState()
    segments = commit_log.segments.segments
    if not segments:
        for queue in queues.queues.values():
            queue.truncate_from_log_position(0)
        if key_index is not None:
            key_index.truncate_from(0)
        return report
    report.scan_start = _scan_start(commit_log, clean_shutdown, checkpoint, report)
    durable_end = None if clean_shutdown else checkpoint.confirm_position
    report.log_end = end = commit_log.recover_end(report.scan_start, durable_end)
    report.truncated_bytes = commit_log.truncated_bytes
    for queue in queues.queues.values():
        queue.truncate_from_log_position(end)
    start = (report.scan_start if not clean_shutdown
             else _derived_end(commit_log, queues, key_index, end))
    for reason, position in _rebuild_points(queues, key_index, clean_shutdown, checkpoint, end):
        report.actions.append(f"{reason}: re-dispatch from {position}")
        start = min(start, position)
    report.dispatch_start = min(max(start, commit_log.min_position), end)
    if report.dispatch_start < end:
        level = logging.INFO if clean_shutdown else logging.WARNING
        log.log(level, "[recovery] re-dispatching log positions %d..%d (clean shutdown: %s)",
                report.dispatch_start, end, clean_shutdown)
    return report


def _scan_start(commit_log: CommitLog, clean_shutdown: bool, checkpoint: CheckpointState,
                report: RecoveryReport) -> int:
    segments = commit_log.segments.segments
    if clean_shutdown:
        return segments[max(0, len(segments) - SCAN_SEGMENTS_BACK)].base_position
    safe_ms = min(checkpoint.log_flushed_timestamp_ms,
                  checkpoint.queue_flushed_timestamp_ms) - CHECKPOINT_MARGIN_MS
    if safe_ms <= 0:
        report.actions.append("unclean stop, no checkpoint: scan the whole log")
        return segments[0].base_position
    for segment in reversed(segments):
        stored_ms = commit_log.read_store_timestamp(segment.base_position)
        if 0 < stored_ms <= safe_ms:
            report.actions.append(f"unclean stop: scan from segment {segment.path.name} "
                                  f"(first record stored {stored_ms} <= {safe_ms})")
            return segment.base_position
    report.actions.append("unclean stop, no segment starts before the checkpoint: scan all")
    return segments[0].base_position


def _derived_end(commit_log: CommitLog, queues: ConsumeQueueSet, key_index: KeyIndex | None,
                 end: int) -> int:
    """After a clean stop: where queues and index stop (the log end when both are current)."""
    queue_end = queues.max_log_end() if queues.queues else 0  # no queue: rebuild everything
    index_end = end
    if key_index is not None and key_index.files and key_index.entry_count:
        newest = key_index.end_position  # where the newest indexed record starts
        index_end = newest + commit_log.read_store_size(newest) if newest < end else end
    return min(queue_end, index_end)


def _rebuild_points(queues: ConsumeQueueSet, key_index: KeyIndex | None, clean_shutdown: bool,
                    checkpoint: CheckpointState, end: int) -> list[tuple[str, int]]:
    """(reason, position) for every derived structure that must be rebuilt from a position."""
    points = [(f"consume queue {q.topic}/{q.queue_id} damaged", q.max_log_end)
              for q in queues.queues.values() if q.damaged]
    if key_index is None:
        return points
    if key_index.rebuild_from is not None:
        points.append(("key-index file damaged", key_index.rebuild_from))
    if not clean_shutdown:
        dropped = key_index.drop_not_durable((checkpoint.key_index_flushed_timestamp_ms,
                                              checkpoint.key_index_entry_count))
        if dropped is not None:
            points.append(("key-index file not known durable", dropped))
    beyond = key_index.truncate_from(end)
    if beyond is not None:
        points.append(("key-index file past the log end", beyond))
    if not key_index.files and checkpoint.key_index_flushed_timestamp_ms > 0:
        points.append(("key index missing", 0))
    return points
