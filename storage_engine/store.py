"""``MessageStore``: the facade that owns the files, the services and the public API.

Open: take the ``lock`` file, load commit-log segments, consume queues and key-index files,
recover (truncate the commit log after its last valid record, truncate queues that point past
it, re-dispatch what the derived files miss), create the ``abort`` marker and start the dispatch
service. Close: stop the service, dispatch the remainder, flush everything, write the checkpoint,
remove ``abort`` (only when all of that succeeded) and release the lock. A store left with
``abort`` present was not closed cleanly; the next open recovers from further back.

Thread-safety: every public method may be called from any thread. Appends are serialised by the
commit log's put lock; reads take no lock.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from .checkpoint import Checkpoint
from .clock import Clock, SystemClock
from .commit_log import CommitLog
from .config import StoreConfig
from .consume_queue_set import ConsumeQueueSet
from .dispatch import (
    ArrivalListener,
    ConsumeQueueDispatcher,
    Dispatcher,
    DispatchService,
    KeyIndexDispatcher,
)
from .errors import StoreClosedError
from .formats import CheckpointState, MessageView, encode_host
from .fsutil import StoreLock, fsync_dir
from .key_index import KeyIndex
from .message import GetResult, Message, PutResult
from .message_encoder import MessageEncoder
from .reader import MessageReader, TagFilter
from .recovery import recover
from .store_layout import write_layout

log = logging.getLogger(__name__)

ABORT_FILE_NAME = "abort"


class MessageStore:
    """An open store. Create with ``MessageStore.open(config)``."""

    def __init__(self, config: StoreConfig, clock: Clock) -> None:
        root = config.root_dir
        self.config = config
        self.clock = clock
        self._lock = StoreLock(root)
        self._store_host = encode_host(*config.store_host_address)
        self.commit_log = CommitLog(root / "commitlog", config.commit_log, self._store_host,
                                    clock)
        self.queues = ConsumeQueueSet(root / "consumequeue", config.consume_queue.units_per_file)
        self.key_index = KeyIndex(root / "index", config.key_index, clock)
        self.checkpoint = Checkpoint(root)
        self._listeners: list[ArrivalListener] = []
        dispatchers: list[Dispatcher] = [
            ConsumeQueueDispatcher(self.queues, config.delay.levels_ms, self._listeners)]
        if config.key_index.enabled:
            dispatchers.append(KeyIndexDispatcher(self.key_index))
        self.dispatch = DispatchService(self.commit_log, dispatchers, clock, 0)
        self._encoder = MessageEncoder(config, self._store_host)
        self._reader = MessageReader(self.commit_log, self.queues, self.key_index)
        self._closed = True

    # ---- lifecycle ---------------------------------------------------------------------------

    @classmethod
    def open(cls, config: StoreConfig, *, clock: Clock | None = None) -> MessageStore:
        """Open (creating if needed), recover and start a store."""
        store = cls(config, clock or SystemClock())
        store._open()
        return store

    def _open(self) -> None:
        root = self.config.root_dir
        root.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        try:
            abort_path = root / ABORT_FILE_NAME
            clean = not abort_path.exists()
            self.commit_log.load()
            self.queues.load()
            self.key_index.load()
            self.checkpoint.load()
            self.dispatch.position = recover(
                self.commit_log, self.queues,
                self.key_index if self.config.key_index.enabled else None, clean,
                self.checkpoint.state)
            self.dispatch.drain()
            for (topic, queue_id), queue in self.queues.queues.items():
                self.commit_log.queue_offsets[(topic, queue_id)] = queue.max_offset
            write_layout(self.config)
            abort_path.write_bytes(str(os.getpid()).encode())
            fsync_dir(root)
            self.dispatch.start()
        except BaseException:
            self._release_files()
            raise
        self._closed = False
        log.info("[open] store %s: log [%d, %d), %d queues, clean=%s", root,
                 self.commit_log.min_position, self.commit_log.max_position,
                 len(self.queues.queues), clean)

    def close(self) -> None:
        """Clean shutdown: dispatch the rest, flush, checkpoint, remove ``abort``, unlock."""
        if self._closed:
            return
        self._closed = True
        self.dispatch.stop()
        healthy = self.dispatch.failure is None and self.commit_log.failure is None
        try:
            if healthy:
                self.dispatch.drain()
                self.queues.flush()
                self.key_index.flush()
                self.commit_log.segments.flush()
                stamp = self.commit_log.last_store_timestamp_ms
                self.checkpoint.write(CheckpointState(stamp, stamp, stamp, 0,
                                                      self.commit_log.max_position))
                (self.config.root_dir / ABORT_FILE_NAME).unlink(missing_ok=True)
                fsync_dir(self.config.root_dir)
        finally:
            self._release_files()

    def _release_files(self) -> None:
        self.dispatch.stop()
        self.commit_log.close()
        self.queues.close()
        self.key_index.close()
        self._lock.release()

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"store {self.config.root_dir} is closed")

    # ---- write -------------------------------------------------------------------------------

    def put_message(self, message: Message, queue_id: int = 0) -> PutResult:
        """Append one message to ``queue_id`` of its topic."""
        return self.put_messages((message,), queue_id)[0]

    def put_messages(self, messages: Sequence[Message], queue_id: int = 0) -> list[PutResult]:
        """Append several messages in order under one lock; all or none are validated first."""
        self._check_open()
        prepare = self._encoder.prepare
        batch = [prepare(message, queue_id) for message in messages]
        appended = self.commit_log.append(batch)
        host = self._store_host
        return [PutResult(p.topic, p.queue_id, a.queue_offset, a.log_position, p.size,
                          a.store_timestamp_ms, host)
                for p, a in zip(batch, appended, strict=True)]

    # ---- read --------------------------------------------------------------------------------

    def get_message(self, consumer_group: str, topic: str, queue_id: int, offset: int,
                    max_count: int = 32, *, tags: str | None = None) -> GetResult:
        """Pull up to ``max_count`` messages from a queue, optionally filtered by tags."""
        self._check_open()
        return self._reader.get_message(topic, queue_id, offset, max_count,
                                        TagFilter.parse(tags))

    def read_message(self, log_position: int) -> MessageView:
        """The record at a log position (raises ``CorruptionError`` if none is valid there)."""
        self._check_open()
        return self._reader.read_message(log_position)

    def view_message_by_id(self, msg_id: str) -> MessageView:
        """The record an offsetMsgId names."""
        self._check_open()
        return self._reader.view_message_by_id(msg_id)

    def query_by_key(self, topic: str, key: str, max_count: int = 64, begin_ms: int = 0,
                     end_ms: int | None = None) -> list[MessageView]:
        """Messages of ``topic`` with ``key`` among their KEYS (at most 64, oldest first)."""
        self._check_open()
        return self._reader.query_by_key(topic, key, max_count, begin_ms,
                                         (1 << 62) if end_ms is None else end_ms)

    def query_by_unique_key(self, topic: str, unique_key: str) -> list[MessageView]:
        """Messages of ``topic`` whose UNIQ_KEY is ``unique_key``."""
        self._check_open()
        return self._reader.query_by_unique_key(topic, unique_key)

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """First queue offset stored at or after ``timestamp_ms``."""
        self._check_open()
        return self._reader.offset_by_time(topic, queue_id, timestamp_ms)

    def min_offset(self, topic: str, queue_id: int) -> int:
        """First readable offset of a queue (0 for an unknown queue)."""
        self._check_open()
        queue = self.queues.get(topic, queue_id)
        return queue.min_offset if queue else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        """One past the last offset of a queue (0 for an unknown queue)."""
        self._check_open()
        queue = self.queues.get(topic, queue_id)
        return queue.max_offset if queue else 0

    def iter_messages(self, start_position: int = 0) -> Iterator[MessageView]:
        """Every stored message in log order."""
        self._check_open()
        return self._reader.iter_messages(start_position)

    # ---- introspection and coordination ------------------------------------------------------

    def wait_dispatched(self, timeout_ms: int = 10_000) -> bool:
        """Block until consume queues and key index cover everything appended so far."""
        self._check_open()
        return self.dispatch.wait_until(self.commit_log.max_position, timeout_ms)

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        """Call ``listener(topic, queue_id, max_offset)`` whenever dispatch grows a queue."""
        self._listeners.append(listener)

    def topics(self) -> dict[str, list[int]]:
        """Topic → queue ids that hold (or held) messages."""
        return self.queues.topics()

    def stats(self) -> dict:
        """A JSON-able summary of the store."""
        queues = [{"topic": t, "queue_id": q, "min_offset": cq.min_offset,
                   "max_offset": cq.max_offset}
                  for (t, q), cq in sorted(self.queues.queues.items())]
        return {
            "root_dir": str(self.config.root_dir),
            "commit_log": {
                "min_position": self.commit_log.min_position,
                "max_position": self.commit_log.max_position,
                "segment_count": len(self.commit_log.segments.segments),
                "segment_size_bytes": self.config.commit_log.segment_size_bytes,
            },
            "dispatch_position": self.dispatch.position,
            "flush_mode": self.config.flush.mode.value,
            "queue_count": len(queues),
            "queues": queues,
            "key_index": {"file_count": len(self.key_index.files),
                          "entry_count": self.key_index.entry_count},
        }

    @property
    def root_dir(self) -> Path:
        """The store directory."""
        return self.config.root_dir
