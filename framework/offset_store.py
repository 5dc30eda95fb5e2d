"""Consumer-side offset stores (reference §12.4).

``BrokerOffsetStore`` (clustering): offsets live in memory, only ever increase, and are pushed
to the broker by ``persist`` (periodically and when a queue is handed to another consumer); a
queue never seen is read from the broker. ``LocalFileOffsetStore`` (broadcasting): every
consumer keeps its own offsets in a JSON file, replaced atomically (temp file, fsync, rename,
fsync of the directory), so a restarted consumer resumes where it left off.

Thread-safe: one lock per store. What survives a crash: the broker's (or the file's) last
persisted value; messages consumed after it are delivered again (at-least-once).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from postbox.storage_engine.contract import BrokerClient

from .allocation import MessageQueue

log = logging.getLogger(__name__)


class OffsetStore(Protocol):
    """Where a consumer keeps "next offset to consume" per message queue."""

    def read(self, queue: MessageQueue) -> int | None:
        """The next offset to consume from ``queue``, or None when unknown."""

    def update(self, queue: MessageQueue, offset: int) -> None:
        """Raise the offset of ``queue`` (never lowers it)."""

    def reset(self, queue: MessageQueue, offset: int) -> None:
        """Set the offset of ``queue`` unconditionally (an illegal offset was corrected)."""

    def persist(self, queues: Iterable[MessageQueue]) -> None:
        """Make the offsets of ``queues`` durable."""

    def forget(self, queue: MessageQueue) -> None:
        """Drop what is kept in memory for ``queue``."""


class _InMemoryOffsets:
    """The in-memory table both stores keep: ``_offsets`` guarded by ``_lock``."""

    _offsets: dict[MessageQueue, int]
    _lock: threading.Lock

    def update(self, queue: MessageQueue, offset: int) -> None:
        """Raise the offset (never lowers it: completions arrive out of order)."""
        with self._lock:
            if offset > self._offsets.get(queue, -1):
                self._offsets[queue] = offset

    def reset(self, queue: MessageQueue, offset: int) -> None:
        """Set the offset unconditionally (an illegal offset corrected by the broker)."""
        with self._lock:
            self._offsets[queue] = offset


class BrokerOffsetStore(_InMemoryOffsets):
    """Clustering: offsets committed to the broker (``consumerOffset.json``)."""

    def __init__(self, client: BrokerClient, consumer_group: str) -> None:
        self._client = client
        self._group = consumer_group
        self._offsets: dict[MessageQueue, int] = {}
        self._persisted: dict[MessageQueue, int] = {}
        self._lock = threading.Lock()

    def read(self, queue: MessageQueue) -> int | None:
        """The in-memory offset, else the broker's committed one (None if never committed)."""
        with self._lock:
            offset = self._offsets.get(queue)
        if offset is not None:
            return offset
        stored = self._client.query_offset(self._group, queue.topic, queue.queue_id)
        if stored is not None:
            with self._lock:
                self._offsets.setdefault(queue, stored)
                self._persisted.setdefault(queue, stored)
        return stored

    def persist(self, queues: Iterable[MessageQueue]) -> None:
        """Commit changed offsets of ``queues`` to the broker."""
        with self._lock:
            changed = [(q, self._offsets[q]) for q in queues
                       if q in self._offsets and self._persisted.get(q) != self._offsets[q]]
        for queue, offset in changed:
            self._client.commit_offset(self._group, queue.topic, queue.queue_id, offset)
            with self._lock:
                self._persisted[queue] = offset

    def forget(self, queue: MessageQueue) -> None:
        """Drop the in-memory value (the queue moved to another consumer)."""
        with self._lock:
            self._offsets.pop(queue, None)
            self._persisted.pop(queue, None)


class LocalFileOffsetStore(_InMemoryOffsets):
    """Broadcasting: offsets in ``<directory>/<group>/offsets.json`` for this consumer only."""

    def __init__(self, directory: str | os.PathLike[str], consumer_group: str) -> None:
        self.path = Path(directory) / consumer_group / "offsets.json"
        self._offsets: dict[MessageQueue, int] = self._load()
        self._lock = threading.Lock()

    def _load(self) -> dict[MessageQueue, int]:
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as error:
            log.error("[offsets] %s unreadable (%s): starting from the consume-from rule",
                      self.path, error)
            return {}
        offsets = {}
        for entry in document.get("offsetTable", []):
            queue = MessageQueue(entry["topic"], int(entry["queueId"]))
            offsets[queue] = int(entry["offset"])
        return offsets

    def read(self, queue: MessageQueue) -> int | None:
        """The next offset to consume from ``queue``, or None when unknown."""
        with self._lock:
            return self._offsets.get(queue)

    def persist(self, queues: Iterable[MessageQueue]) -> None:
        """Write every known offset (the file is small: one entry per queue)."""
        del queues  # the file always holds the whole table
        with self._lock:
            table = [{"topic": q.topic, "queueId": q.queue_id, "offset": offset}
                     for q, offset in sorted(self._offsets.items())]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".json.tmp")
        with open(temporary, "w", encoding="utf-8") as file:
            json.dump({"offsetTable": table}, file, indent=1)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.path)
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def forget(self, queue: MessageQueue) -> None:
        """Broadcast consumers keep every queue: nothing to forget."""
