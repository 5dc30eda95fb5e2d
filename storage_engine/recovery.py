"""Start-up recovery: bring the commit log and the derived files back into agreement.

Disk states and actions (issue 3 extends this with the checkpoint and flush watermarks):

| state at open                        | action                                               |
|--------------------------------------|------------------------------------------------------|
| no commit-log segments               | nothing to recover                                   |
| torn or corrupt tail (any shutdown)  | scan from the 3rd-last segment, truncate after the   |
|                                      | last valid record (CRC checked), zero the tail       |
| empty trailing segments              | deleted by the truncation                            |
| queue units past the recovered end   | truncated                                            |
| clean shutdown (no ``abort``)        | re-dispatch from the furthest end any queue reached  |
| unclean shutdown (``abort`` present) | re-dispatch from the scan start (earlier if a queue  |
|                                      | lags further); queue and index ignore duplicates     |

Runs on the opening thread before any service starts.
"""

from __future__ import annotations

import logging

from .commit_log import CommitLog
from .consume_queue_set import ConsumeQueueSet

log = logging.getLogger(__name__)

SCAN_SEGMENTS_BACK = 3


def recover(commit_log: CommitLog, queues: ConsumeQueueSet, clean_shutdown: bool) -> int:
    """Truncate what is invalid; return the log position dispatch must resume from."""
    segments = commit_log.segments.segments
    if not segments:
        for queue in queues.queues.values():
            queue.truncate_from_log_position(0)
        return 0
    scan_start = segments[max(0, len(segments) - SCAN_SEGMENTS_BACK)].base_position
    end = commit_log.recover_end(scan_start)
    for queue in queues.queues.values():
        queue.truncate_from_log_position(end)
    queue_end = queues.max_log_end()
    if clean_shutdown:
        start = queue_end
    else:
        start = min(scan_start, queue_end)
        log.warning("[recovery] unclean shutdown: re-dispatching from position=%d to %d",
                    start, end)
    return min(max(start, commit_log.min_position), end)
