"""The store's metric families: puts per topic, flush latency, disk use, log end, dispatch lag.

Read at scrape time from what the store keeps anyway (``MessageStore.put_tally``, the commit-log
flusher's ``flush_latency``, positions, the disk guard's last measurement of its file system's
used fraction against the write watermark) plus two file-system reads: the blocks the store
directory occupies (a walk over its files: sparse queue files count what they really use) and
the space free on its file system (``statvfs``). Nothing here runs on the put path. Reading is
thread-safe; a store closed under a scrape yields no families rather than an error.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from .families import Metric, counter, gauge, histogram

log = logging.getLogger(__name__)

BLOCK_BYTES = 512  # st_blocks unit (POSIX)


def store_families(store: Any) -> list[Metric]:
    """The families of one open ``MessageStore``."""
    if getattr(store, "_closed", False):
        return []
    puts = store.put_tally.snapshot()
    log_end = store.commit_log.max_position
    used_bytes, free_bytes = disk_use_bytes(store.root_dir)
    return [
        counter("postbox_store_put_messages", "Messages stored, per topic, since the store "
                "opened.", ["topic"], (((t,), p.messages) for t, p in sorted(puts.items()))),
        counter("postbox_store_put_bytes", "Bytes (whole commit-log records) stored, per "
                "topic, since the store opened.", ["topic"],
                (((t,), p.bytes) for t, p in sorted(puts.items()))),
        histogram("postbox_store_flush_seconds", "Duration of the commit-log flushes "
                  "(fdatasync) that made bytes durable.", [],
                  [((), store.log_flusher.flush_latency.snapshot())]),
        gauge("postbox_store_disk_used_bytes", "Bytes the store directory occupies on disk.",
              [], [((), used_bytes)]),
        gauge("postbox_store_disk_free_bytes", "Bytes free (for unprivileged writers) on the "
              "store's file system.", [], [((), free_bytes)]),
        gauge("postbox_store_disk_used_ratio", "Used fraction of the store's file system at the "
              "store's last measurement (df's Use%; puts and the 10 s retention run measure "
              "it).", [], [((), store.retention.disk_used_ratio)]),
        gauge("postbox_store_disk_warning_level_ratio", "The used fraction at which the store "
              "refuses writes (retention.disk_space_warning_level_ratio).", [],
              [((), store.config.retention.disk_space_warning_level_ratio / 100)]),
        gauge("postbox_store_disk_full", "1 while writes are refused because the disk reached "
              "the warning level (or was full at open), else 0.", [],
              [((), int(store.retention.disk_full or store.guard.read_only_reason is not None))]),
        gauge("postbox_store_commit_log_max_position_bytes", "End of the commit log: one past "
              "its last written byte.", [], [((), log_end)]),
        gauge("postbox_store_dispatch_lag_bytes", "Commit-log bytes written and not yet "
              "dispatched to the consume queues and key index.", [],
              [((), store.dispatch.behind_bytes)]),
    ]


def disk_use_bytes(root: Path) -> tuple[int, int]:
    """(bytes the files under ``root`` occupy, bytes free on its file system)."""
    used = 0
    for directory, _, files in os.walk(root):
        for name in files:
            try:
                used += os.lstat(os.path.join(directory, name)).st_blocks * BLOCK_BYTES
            except OSError:  # deleted by retention while we walk
                continue
    try:
        stats = os.statvfs(root)
    except OSError as error:
        log.warning("[metrics] cannot stat the file system of %s: %s", root, error)
        return used, 0
    return used, stats.f_bavail * stats.f_frsize


__all__ = ["disk_use_bytes", "store_families"]
