"""Start-up recovery: bring the commit log and the derived files back into agreement.

Disk states and actions (issue 3 extends this with the checkpoint and flush watermarks):

| state at open                         | action                                              |
|---------------------------------------|-----------------------------------------------------|
| no commit-log segments                | nothing to recover                                  |
| torn or corrupt tail (any shutdown)   | scan from the 3rd-last segment, truncate after the  |
|                                       | last valid record (CRC checked), zero the tail      |
| empty trailing segments               | deleted by the truncation                           |
| queue units past the recovered end    | truncated                                           |
| key-index file reaching past the end  | deleted; re-dispatch from its first position        |
| clean shutdown (no ``abort``)         | re-dispatch from where the derived files stop: the  |
|                                       | furthest queue end or the key-index end, whichever  |
|                                       | is earlier (no queues: the whole log)               |
| unclean shutdown, checkpoint zero     | re-dispatch the whole log (nothing is known safe)   |
| unclean shutdown, checkpoint set      | re-dispatch from the scan start, or from the queue  |
|                                       | or key-index end if one lags further                |
| any re-dispatch                       | queue units and index entries already present are   |
|                                       | skipped (duplicates ignored)                        |

Runs on the opening thread before any service starts.
"""

from __future__ import annotations

import logging

from .commit_log import CommitLog
from .consume_queue_set import ConsumeQueueSet
from .formats import CheckpointState
from .key_index import KeyIndex

log = logging.getLogger(__name__)

SCAN_SEGMENTS_BACK = 3


def recover(commit_log: CommitLog, queues: ConsumeQueueSet, key_index: KeyIndex | None,
            clean_shutdown: bool, checkpoint: CheckpointState) -> int:
    """Truncate what is invalid; return the log position dispatch must resume from."""
    segments = commit_log.segments.segments
    if not segments:
        for queue in queues.queues.values():
            queue.truncate_from_log_position(0)
        if key_index is not None:
            key_index.truncate_from(0)
        return 0
    scan_start = segments[max(0, len(segments) - SCAN_SEGMENTS_BACK)].base_position
    end = commit_log.recover_end(scan_start)
    for queue in queues.queues.values():
        queue.truncate_from_log_position(end)
    start = _dispatch_start(commit_log, queues, key_index, clean_shutdown, checkpoint,
                            scan_start, end)
    if key_index is not None:
        rebuild_from = key_index.truncate_from(end)
        if rebuild_from is not None:
            start = min(start, rebuild_from)
    start = min(max(start, commit_log.min_position), end)
    if start < end:
        level = logging.INFO if clean_shutdown else logging.WARNING
        log.log(level, "[recovery] re-dispatching log positions %d..%d (clean shutdown: %s)",
                start, end, clean_shutdown)
    return start


def _dispatch_start(commit_log: CommitLog, queues: ConsumeQueueSet, key_index: KeyIndex | None,
                    clean_shutdown: bool, checkpoint: CheckpointState, scan_start: int,
                    end: int) -> int:
    queue_end = queues.max_log_end()
    has_index = key_index is not None and bool(key_index.files)
    index_end = key_index.end_position if has_index else end
    if clean_shutdown:
        return min(queue_end, index_end)  # no queue at all: rebuild everything from the log
    if checkpoint.log_flushed_timestamp_ms == 0:
        return commit_log.min_position
    return min(scan_start, queue_end, index_end)
