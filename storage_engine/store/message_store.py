"""``MessageStore``: the facade that owns the files, the services and the public API.

Open: take the ``lock`` file, call the opener's ``on_locked`` hook (the broker loads its config
tables there, so a garbled table refuses the open before anything is recovered), load the
commit-log segments, consume queues, key-index files and the checkpoint, recover
(``recovery.py``: truncate what is invalid, rebuild what the derived files miss), make the result
durable and checkpoint it, create the ``abort`` marker and start the services in order:
commit-log flusher (group flush in SYNC mode, periodic in ASYNC), dispatch, consume-queue flusher
(which persists the checkpoint), retention. Close: stop them in reverse, flush the log, dispatch
the remainder, flush queues and index, write the checkpoint, remove ``abort`` (only when all of
that succeeded) and release the lock. A store left with ``abort`` present was not closed
cleanly; the next open recovers from the checkpoint.

Read-only open (``MessageStore.open(config, read_only=True)``, ``read_only.py``): for inspecting a
store, also one a running broker or application is writing. No lock is taken, nothing is
recovered, no service runs and no file is written; the log ends at its last complete record (at
the last dispatched one while a writer holds the store). It is a snapshot of the moment of
opening; puts raise ``StoreNotWritableError``.

Replication (``ha/``, docs/replication.md) follows ``config.broker_role``: a master with
``ha.ha_listen`` runs the HA service last (so it starts after, and stops before, the others) and
a SYNC_MASTER put also waits for a slave's acknowledgement (``PutStatus.FLUSH_SLAVE_TIMEOUT``
after ``ha.slave_timeout_ms``, ``SLAVE_NOT_AVAILABLE`` without a usable slave); a SLAVE refuses
puts (``NotMasterError``), copies the master's log through its HA client and dispatches only
whole records; at a clean close it trims a partial last record, which the master resends.

The store knows nothing of the broker: the config tables in ``config/`` (topics, groups,
consumer and delay offsets) belong to ``storage_engine.broker``, which also gives retention its
consumption floor (``set_consumption_floor``). A store opened alone never reads or writes them.

Fail-stop: when any service fails (an fdatasync error, a corrupt record under dispatch) the
commit log refuses appends from then on; reads keep working and ``close`` writes nothing more.

Thread-safety: every public method may be called from any thread. Appends are serialised by the
commit log's put lock; reads take no lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..clock import Clock, SystemClock
from ..config import BrokerRole, FlushMode, StoreConfig
from ..contract.message import GetResult, Message, PutResult, PutStatus
from ..errors import (
    DiskFullError,
    NotMasterError,
    StorageIOError,
    StoreClosedError,
    StoreNotWritableError,
)
from ..formats import END_FILE_MIN_BLANK_LENGTH, PROPERTY_WAIT, MessageView, TagFilter, encode_host
from ..ha import HAMasterService, HASlaveClient, LogTimestampDispatcher, RecordBoundary
from ..service import Service
from . import read_only
from .checkpoint import Checkpoint
from .commit_log import CommitLog, PreparedMessage
from .consume_queue_set import ConsumeQueueSet
from .disk_guard import DiskGuard, DiskUsageProbe
from .disk_guard import disk_usage as measure_disk_usage
from .dispatch import (
    ArrivalListener,
    ConsumeQueueDispatcher,
    Dispatcher,
    DispatchService,
    KeyIndexDispatcher,
)
from .flush import (
    CommitLogFlushService,
    GroupFlushService,
    PeriodicFlushService,
    QueueFlushService,
)
from .fsutil import StoreLock, fsync_dir
from .key_index import KeyIndex
from .message_encoder import MessageEncoder
from .open_files import OpenFiles, fit_files_max
from .reader import MessageReader
from .recovery import RecoveryReport, recover
from .retention import ConsumptionFloor, RetentionService, local_hour
from .store_layout import require_store, write_open_markers
from .store_tally import PutTally

log = logging.getLogger(__name__)

ABORT_FILE_NAME = "abort"


class MessageStore:
    """An open store. Create with ``MessageStore.open(config)``."""

    def __init__(self, config: StoreConfig, clock: Clock, *,
                 disk_usage: DiskUsageProbe = measure_disk_usage,
                 hour_of_day: Callable[[int], int] = local_hour) -> None:
        root = config.root_dir
        self.config = config
        self.clock = clock
        self._lock = StoreLock(root)
        self._store_host = encode_host(*config.store_host_address)
        self.commit_log = CommitLog(root / "commitlog", config.commit_log, self._store_host,
                                    clock)
        self.open_files = OpenFiles(config.consume_queue.open_files_max)
        """The consume-queue files open now, at most ``files_max`` (fitted at open to the
        process's open-file limit: ``open_files.fit_files_max``)."""
        self.queues = ConsumeQueueSet(root / "consumequeue", config.consume_queue.units_per_file,
                                      self.open_files)
        self.key_index = KeyIndex(root / "index", config.key_index, clock)
        self.checkpoint = Checkpoint(root)
        self._listeners: list[ArrivalListener] = []
        self.put_tally = PutTally()
        """Messages and bytes stored per topic since open (``store_tally``)."""
        dispatchers: list[Dispatcher] = [
            ConsumeQueueDispatcher(self.queues, config.delay.levels_ms, self._listeners),
            self.put_tally]
        if config.key_index.enabled:
            dispatchers.append(KeyIndexDispatcher(self.key_index))
        self.role = config.broker_role
        self._is_slave = self.role is BrokerRole.SLAVE
        self._sync_master = self.role is BrokerRole.SYNC_MASTER
        if self._is_slave:
            dispatchers.append(LogTimestampDispatcher(self.commit_log))
        self.dispatch = DispatchService(self.commit_log, dispatchers, clock, 0)
        self._sync_flush = config.flush.mode is FlushMode.SYNC
        flusher_class = GroupFlushService if self._sync_flush else PeriodicFlushService
        self.log_flusher: CommitLogFlushService = flusher_class(self.commit_log, config.flush,
                                                                clock)
        if self._sync_flush:  # consumers see only durable records
            self.dispatch.end_position = lambda: self.log_flusher.flushed_position
        self._replica_boundary: RecordBoundary | None = None
        if self._is_slave:  # replicated bytes may end inside a record: dispatch whole ones
            self._replica_boundary = boundary = RecordBoundary(
                self.commit_log, lambda: self.dispatch.position)
            log_end = self.dispatch.end_position
            self.dispatch.end_position = lambda: boundary.advance(log_end())
        self.queue_flusher = QueueFlushService(
            self.queues, config.flush, clock, self.checkpoint, self.log_flusher,
            lambda: self.dispatch.dispatched_timestamp_ms,
            lambda: self.key_index.durable_state)
        self.guard = DiskGuard(root, config.retention, clock, disk_usage)
        self.retention = RetentionService(
            self.commit_log, self.queues, self.key_index, lambda: self.dispatch.position,
            config.retention, clock, guard=self.guard, hour_of_day=hour_of_day)
        self._services: list[Service] = [self.log_flusher, self.dispatch, self.queue_flusher,
                                         self.retention]
        for service in self._services:
            service.failure_listeners.append(self._fail)
        self._ha_master: HAMasterService | None = None
        self._ha_slave: HASlaveClient | None = None
        self._add_ha_service()  # last, and not fail-stop: replication is not a durability path
        self._encoder = MessageEncoder(config, self._store_host)
        self._reader = MessageReader(self.commit_log, self.queues, self.key_index)
        self.recovery: RecoveryReport | None = None
        self.read_only = False
        """Opened with ``read_only=True``: a view that writes nothing (``read_only.py``)."""
        self.writer_live = False
        """Read-only: another process held the store when the view was opened."""
        self.tail_mark: read_only.TailMark | None = None  # read-only: where the log ends
        self._closed = True

    def _add_ha_service(self) -> None:
        """The HA master service or slave client that ``broker_role`` and ``ha`` ask for."""
        ha = self.config.ha
        if self._is_slave:
            if ha.master_address is None:
                log.warning("[ha] role SLAVE without ha.master_address: this store serves "
                            "reads and replicates nothing")
                return
            self._ha_slave = HASlaveClient(self.commit_log, ha, self.clock,
                                           self._replica_applied)
            self._services.append(self._ha_slave)
        elif ha.ha_listen is not None:
            self._ha_master = HAMasterService(self.commit_log, ha, self.clock)
            self._services.append(self._ha_master)
        elif self._sync_master:
            log.warning("[ha] role SYNC_MASTER without ha.ha_listen: no slave can connect, "
                        "every put reports SLAVE_NOT_AVAILABLE")

    def _replica_applied(self) -> None:
        """Slave: bytes arrived from the master (wake dispatch and, in SYNC mode, the flush)."""
        self.dispatch.wakeup()
        if self._sync_flush:
            self.log_flusher.wakeup()

    # ---- lifecycle ---------------------------------------------------------------------------

    @classmethod
    def open(cls, config: StoreConfig, *, clock: Clock | None = None,
             disk_usage: DiskUsageProbe = measure_disk_usage,
             hour_of_day: Callable[[int], int] = local_hour,
             on_locked: Callable[[], None] | None = None, read_only: bool = False,
             tail_mark: read_only.TailMark | None = None) -> MessageStore:
        """Open (creating if needed), recover and start a store.

        ``read_only``: open an existing store as a view that takes no lock, recovers nothing,
        runs no service and writes no file, safe while another process writes the store (see
        the module docstring); ``on_locked`` is not called. A directory without a store raises
        ``NotAStoreError``. ``tail_mark``: an earlier view's; the tail scan starts at its end
        when the bytes before it are unchanged (the same view, less to scan).

        ``clock``, ``disk_usage`` (usage of the store's partition) and ``hour_of_day`` are
        injectable so tests can drive retention without waiting or filling a disk.
        ``on_locked`` runs once the ``lock`` file is held and before any store file is read;
        what it raises refuses the open with nothing loaded or changed (``Broker.open`` loads
        its config tables there: one process at a time, and before recovery).

        A disk too full to write the ``abort`` marker does not stop the open: the store opens
        read-only (reads work, puts raise ``DiskFullError`` saying why) and becomes writable
        once the marker can be written.
        """
        store = cls(config, clock or SystemClock(), disk_usage=disk_usage, hour_of_day=hour_of_day)
        if read_only:
            store._open_read_only(tail_mark)
        else:
            store._open(on_locked)
        return store

    def _open_read_only(self, after: read_only.TailMark | None) -> None:
        """Open the files read-only and find where their complete data ends."""
        root = require_store(self.config.root_dir)
        self.read_only = True
        self.writer_live = read_only.writer_holds(root)
        try:
            read_only.load_commit_log(self.commit_log, self.writer_live, after)
            log_end = self.commit_log.max_position
            read_only.load_queues(self.queues, log_end)
            if self.writer_live:  # records past the last dispatched one may be half-copied
                log_end = min(log_end, max(read_only.dispatched_end(self.queues),
                                           self.commit_log.min_position))
                read_only.load_commit_log_end(self.commit_log, log_end)
            read_only.load_key_index(self.key_index, self.clock.now_ms())
            self.checkpoint.load()
            self.tail_mark = read_only.mark_tail(self.commit_log, self.commit_log.max_position)
        except BaseException:
            read_only.close_all(self.commit_log, self.queues, self.key_index)
            raise
        self.dispatch.position = self.commit_log.max_position
        self._closed = False
        log.info("[open] store %s read-only: log [%d, %d), %d queues, writer live=%s", root,
                 self.commit_log.min_position, self.commit_log.max_position,
                 len(self.queues.queues), self.writer_live)

    def _open(self, on_locked: Callable[[], None] | None) -> None:
        root = self.config.root_dir
        root.mkdir(parents=True, exist_ok=True)
        self._lock.acquire()
        try:
            if on_locked is not None:
                on_locked()
            abort_path = root / ABORT_FILE_NAME
            clean = not abort_path.exists()
            self._load_and_recover(clean)
            self.guard.check()
            self._write_abort_marker(at_open=True)
            self.put_tally.start_position = self.commit_log.max_position
            for service in self._services:
                service.start()
        except BaseException:
            self._release_files()
            raise
        self._closed = False
        log.info("[open] store %s: log [%d, %d), %d queues, clean=%s, re-dispatched %d bytes",
                 root, self.commit_log.min_position, self.commit_log.max_position,
                 len(self.queues.queues), clean,
                 self.recovery.redispatched_bytes if self.recovery is not None else 0)

    def _write_abort_marker(self, *, at_open: bool = False) -> None:
        """Write the layout file and the ``abort`` marker (the store is now being written).

        A full disk at open makes the store read-only (``guard.read_only_reason``); later calls
        (before a put) retry and clear it, or raise ``DiskFullError``.
        """
        full = write_open_markers(self.config, self.config.root_dir / ABORT_FILE_NAME)
        if full is None:
            self.guard.clear_read_only()
            return
        reason = (f"store {self.config.root_dir}: the disk is full ({full.strerror}): not even "
                  "the abort marker fits, so the store is read-only; reads work, writes resume "
                  f"once space is freed (disk {self.guard.used_ratio:.0%} used)")
        if not at_open:
            raise DiskFullError(reason, path=str(self.config.root_dir)) from full
        self.guard.set_read_only(reason)

    def _load_and_recover(self, clean: bool) -> None:
        """Load every file, recover (``recovery.py``), rebuild, and make the result durable."""
        self.commit_log.load()
        self.key_index.load()
        self.open_files.files_max = fit_files_max(
            self.config.consume_queue.open_files_max,
            len(self.commit_log.segments.segments) + len(self.key_index.files))
        self.queues.load()
        self.checkpoint.load()
        key_index = self.key_index if self.config.key_index.enabled else None
        self.recovery = recover(self.commit_log, self.queues, key_index, clean,
                                self.checkpoint.state, self.clock.now_ms())
        self.dispatch.position = self.recovery.dispatch_start
        self._flush_all()
        for (topic, queue_id), queue in self.queues.queues.items():
            self.commit_log.queue_offsets[(topic, queue_id)] = queue.max_offset

    def _flush_all(self) -> None:
        """Flush the log, dispatch the rest, flush queues and index, persist the checkpoint."""
        self.log_flusher.flush(0)
        self.dispatch.drain()
        self.queues.flush()
        self.key_index.flush()
        stamp = self.commit_log.last_store_timestamp_ms  # everything up to it is durable now
        self.log_flusher.flushed_timestamp_ms = stamp
        self.queue_flusher.queue_flushed_timestamp_ms = stamp
        self.queue_flusher.persist_checkpoint()

    def release_pages(self) -> None:
        """Read-only: drop the process's mapped pages of the view's files (not the cache's)."""
        if self.read_only:
            read_only.release_all(self.commit_log, self.key_index)

    def close(self) -> None:
        """Clean shutdown: flush, dispatch the rest, checkpoint, remove ``abort``, unlock.

        When a service failed (fail-stop) nothing more is written: ``abort`` stays and the next
        open recovers.
        """
        if self._closed:
            return
        self._closed = True
        if self.read_only:
            read_only.close_all(self.commit_log, self.queues, self.key_index)
            return
        for service in reversed(self._services):
            service.stop()
        try:
            if self.failure is None:
                if self._replica_boundary is not None:
                    self._replica_boundary.trim_tail()
                self._flush_all()
                (self.config.root_dir / ABORT_FILE_NAME).unlink(missing_ok=True)
                fsync_dir(self.config.root_dir)
            else:
                log.error("[close] store %s failed earlier (%s): left for recovery",
                          self.config.root_dir, self.failure)
        finally:
            self._release_files()

    @property
    def failure(self) -> BaseException | None:
        """The error that put the store into fail-stop (None while healthy)."""
        return self.commit_log.failure

    def _fail(self, error: BaseException) -> None:
        """Fail-stop: refuse writes from now on; reads keep working."""
        self.commit_log.fail(error)

    def _release_files(self) -> None:
        for service in reversed(self._services):
            service.stop()
        self.retention.close()
        self.commit_log.close()
        self.queues.close()
        self.key_index.close()
        self._lock.release()

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"store {self.config.root_dir} is closed")

    # ---- write -------------------------------------------------------------------------------

    def put_message(self, message: Message, queue_id: int = 0) -> PutResult:
        """Append one message to ``queue_id`` of its topic."""
        return self.put_messages((message,), queue_id)[0]

    def put_messages(self, messages: Sequence[Message], queue_id: int = 0) -> list[PutResult]:
        """Append several messages in order under one lock; all or none are validated first.

        In SYNC flush mode this returns once a group flush made the batch durable; after
        ``flush.sync_timeout_ms`` the results say ``PutStatus.FLUSH_DISK_TIMEOUT`` (stored, not
        confirmed durable). A SYNC_MASTER also waits until a slave acknowledged the batch:
        ``FLUSH_SLAVE_TIMEOUT`` after ``ha.slave_timeout_ms``, ``SLAVE_NOT_AVAILABLE`` at once
        without a connected slave within ``ha.slave_fall_behind_max_bytes``; a replication
        status wins over a flush status. A message whose ``WAIT`` property is ``"false"`` does
        not wait.

        Raises:
            NotMasterError: this store is a SLAVE.
            DiskFullError: the disk is at ``retention.disk_space_warning_level_ratio`` (or this
                batch would take it past), or full: nothing of the batch was stored.
            StoreNotWritableError: the store is in fail-stop after an I/O error.
            StorageIOError: the batch was stored but its flush failed (the store is now in
                fail-stop; the messages may or may not survive a power loss).
        """
        self._check_open()
        if self.read_only:
            raise StoreNotWritableError(f"store {self.config.root_dir} is open read-only "
                                        "(an inspection view): it refuses writes")
        if self._is_slave:
            raise NotMasterError(
                f"store {self.config.root_dir} is a SLAVE of {self.config.ha.master_address}: "
                "it refuses producer writes (send to the master, or promote this store)")
        prepare = self._encoder.prepare
        batch = [prepare(message, queue_id) for message in messages]
        self._admit(batch)
        appended = self.commit_log.append(batch)
        if self._ha_master is not None:
            self._ha_master.notify_appended(push=self._sync_master)
        status = PutStatus.PUT_OK
        if (self._sync_flush or self._sync_master) and appended and self._wants_wait(batch):
            end = appended[-1].log_position + batch[-1].size
            started_ms = self.clock.now_ms()
            if self._sync_flush:
                assert isinstance(self.log_flusher, GroupFlushService)  # SYNC mode's flusher
                if not self.log_flusher.wait_flushed(end, self.config.flush.sync_timeout_ms):
                    status = self._flush_wait_failed(end)
            if self._sync_master:
                replicated = self._wait_replicated(end, started_ms)
                if replicated is not PutStatus.PUT_OK:
                    status = replicated
        if status is not PutStatus.PUT_OK:  # the commit log's results say PUT_OK
            for result in appended:
                result.status = status
        return appended

    def _admit(self, batch: Sequence[PreparedMessage]) -> None:
        """Back-pressure (``DiskGuard``): raise ``DiskFullError`` before the disk passes the
        warning level; counts the commit-log segment this batch may have to create."""
        if self.guard.read_only_reason is not None:
            self._write_abort_marker()
        size = sum(prepared.size for prepared in batch)
        last = self.commit_log.segments.last
        rolls = last is None or last.remaining_bytes < size + END_FILE_MIN_BLANK_LENGTH
        self.guard.admit(size, self.config.commit_log.segment_size_bytes if rolls else 0)

    def set_consumption_floor(self, floor: ConsumptionFloor | None) -> None:
        """Tell retention the lowest log position some subscribed group still has to consume.

        Disk pressure then deletes unexpired segments only below it (the broker, which owns the
        groups and offsets, provides it; ``None``: nothing unexpired is deleted by pressure).
        """
        self.retention.consumption_floor = floor

    @staticmethod
    def _wants_wait(batch: Sequence[PreparedMessage]) -> bool:
        return any(p.user_properties.get(PROPERTY_WAIT) != "false" for p in batch)

    def _flush_wait_failed(self, end: int) -> PutStatus:
        failure = self.log_flusher.failure or self.failure
        if failure is not None:
            raise StorageIOError(
                f"messages stored up to position={end} but the flush failed ({failure}); the "
                "store refuses writes from now on") from failure
        log.warning("[flush] group flush did not reach position=%d within %d ms", end,
                    self.config.flush.sync_timeout_ms)
        return PutStatus.FLUSH_DISK_TIMEOUT

    def _wait_replicated(self, end: int, started_ms: int) -> PutStatus:
        """SYNC_MASTER: wait (from ``started_ms``) until a slave acknowledged ``end``."""
        ha = self._ha_master
        if ha is None or not ha.slave_available(end):
            return PutStatus.SLAVE_NOT_AVAILABLE
        timeout_ms = self.config.ha.slave_timeout_ms - (self.clock.now_ms() - started_ms)
        if ha.wait_acked(end, timeout_ms):
            return PutStatus.PUT_OK
        log.warning("[ha] no slave acknowledged position=%d within %d ms", end,
                    self.config.ha.slave_timeout_ms)
        return PutStatus.FLUSH_SLAVE_TIMEOUT

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

    @property
    def ha_listen_address(self) -> tuple[str, int] | None:
        """(host, port) the HA service listens on (the real port for ``ha_listen`` port 0)."""
        return None if self._ha_master is None else self._ha_master.listen_address

    def ha_status(self) -> dict[str, Any]:
        """JSON-able replication state: role, and the master's slaves (acknowledged positions,
        bytes behind) or the slave's master connection; ``max_position`` is this log's end."""
        status: dict[str, Any] = {"role": self.role.value,
                                  "max_position": self.commit_log.max_position}
        if self._ha_master is not None:
            status.update(self._ha_master.status())
        if self._ha_slave is not None:
            status.update(self._ha_slave.status())
        elif self._is_slave:
            status.update({"master_address": None, "connected": False})
        return status

    def topics(self) -> dict[str, list[int]]:
        """Topic → queue ids that hold (or held) messages."""
        return self.queues.topics()

    def stats(self) -> dict[str, Any]:
        """A JSON-able summary of the store."""
        queues = [{"topic": t, "queue_id": q, "min_offset": cq.min_offset,
                   "max_offset": cq.max_offset}
                  for (t, q), cq in sorted(self.queues.queues.items())]
        return {
            "root_dir": str(self.config.root_dir),
            "read_only": self.read_only,
            "commit_log": {
                "min_position": self.commit_log.min_position,
                "max_position": self.commit_log.max_position,
                "segment_count": len(self.commit_log.segments.segments),
                "segment_size_bytes": self.config.commit_log.segment_size_bytes,
                "damaged_units_skipped": self._reader.skipped_damaged,
            },
            "dispatch_position": self.dispatch.position,
            "flush_mode": self.config.flush.mode.value,
            "ha": self.ha_status(),
            "flush": {"flushed_position": self.log_flusher.flushed_position,
                      "flush_count": self.log_flusher.flush_count,
                      "checkpoint": self.checkpoint.state._asdict()},
            "failure": None if self.failure is None else str(self.failure),
            "retention": {"disk_used_ratio": self.retention.disk_used_ratio,
                          "disk_full": self.retention.disk_full,
                          "read_only_reason": self.guard.read_only_reason,
                          "writes_refused": self.guard.refused_count,
                          "last_refusal": self.guard.last_refusal,
                          "kept_unconsumed": self.retention.kept_unconsumed,
                          "deleted_segment_count": self.retention.deleted_segment_count},
            "recovery": self.recovery.as_dict() if self.recovery else None,
            "queue_count": len(queues),
            "open_queue_files": self.open_files.as_dict(),
            "queues": queues,
            "key_index": {"file_count": len(self.key_index.files),
                          "entry_count": self.key_index.entry_count},
        }

    @property
    def root_dir(self) -> Path:
        """The store directory."""
        return self.config.root_dir
