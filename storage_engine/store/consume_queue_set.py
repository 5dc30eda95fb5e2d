"""``ConsumeQueueSet``: every consume queue of a store, by (topic, queue id).

Directory layout ``consumequeue/{topic}/{queue_id}/``. Files are opened on demand through one
``OpenFiles`` (at most ``consume_queue.open_files_max`` open at a time), so the number of queues
is not bounded by the process's open-file limit. Loading skips (and logs) directories whose
names are not legal topics or queue ids rather than letting them reach the file system API.
Thread-safety: queues are created by the dispatch thread; lookups from other threads read a dict
that is only ever added to (atomic under the GIL).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ..contract.topics import validate_topic
from ..errors import InvalidTopicError
from .consume_queue import ConsumeQueue
from .open_files import OpenFiles

log = logging.getLogger(__name__)


class ConsumeQueueSet:
    """All consume queues."""

    def __init__(self, directory: Path, units_per_file: int,
                 files: OpenFiles | None = None) -> None:
        self.directory = directory
        self.units_per_file = units_per_file
        self.files = files
        """Opens the queues' files on demand, a bounded number at a time (None: every file
        stays open while loaded)."""
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}

    def load(self) -> None:
        """Open every queue found on disk."""
        if not self.directory.is_dir():
            return
        for topic in sorted(os.listdir(self.directory)):
            try:
                validate_topic(topic)
            except InvalidTopicError:
                log.warning("[load] ignoring consumequeue/%s: not a legal topic name", topic)
                continue
            for queue_name in sorted(os.listdir(self.directory / topic)):
                if not queue_name.isdigit():
                    log.warning("[load] ignoring consumequeue/%s/%s", topic, queue_name)
                    continue
                queue = self._new_queue(topic, int(queue_name))
                queue.load()

    def _new_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = ConsumeQueue(self.directory / topic / str(queue_id), topic, queue_id,
                             self.units_per_file, self.files)
        self.queues[(topic, queue_id)] = queue
        return queue

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue, or None if nothing was ever dispatched to it."""
        return self.queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue, created (in memory; files appear on first append) when missing."""
        queue = self.queues.get((topic, queue_id))
        return queue if queue is not None else self._new_queue(topic, queue_id)

    def topics(self) -> dict[str, list[int]]:
        """Topic → sorted queue ids."""
        result: dict[str, list[int]] = {}
        for topic, queue_id in sorted(self.queues):
            result.setdefault(topic, []).append(queue_id)
        return result

    def max_log_end(self) -> int:
        """Largest log end position any queue has dispatched (0 when none)."""
        return max((queue.max_log_end for queue in self.queues.values()), default=0)

    def flush(self, least_pages: int = 0) -> None:
        """Flush every queue (page rule of ``ConsumeQueue.flush``)."""
        for queue in list(self.queues.values()):
            queue.flush(least_pages)

    def close(self) -> None:
        """Unmap every queue."""
        for queue in self.queues.values():
            queue.close()
