"""``DispatchService``: tails the commit log and feeds the derived structures (RocketMQ's reput).

It hands the records after ``position`` to the dispatchers in runs of up to
``decode_size_max`` consecutive records (from the append feed, or decoded from the log): the
consume-queue dispatcher (normal and committed-transaction records; each queue's units of a run
in one ``append_run``, then the arrival listeners, long polling, once per queue that grew) and
the key-index dispatcher (all but rolled-back records). Records decoded from the log are
validated again on the way (lengths, without the body CRC); a blank record moves to the next
segment; a corrupt record stops dispatch and is recorded as the service failure.

Thread-safety: the service thread is the only writer of consume queues and the key index; it
publishes progress through ``position`` and wakes ``wait_until`` callers. ``drain`` runs the
same loop on the caller's thread (open, close, tests) when the thread is not running.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

from ..clock import Clock
from ..errors import CorruptionError
from ..formats import (
    PROPERTY_DELAY,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_ROLLBACK,
    DispatchRecord,
    RecordKind,
    decode_for_dispatch,
    split_keys,
    tag_hash,
    takes_queue_offset,
)
from ..formats.engine import decode_run
from ..formats.topic_names import DELAY_TOPIC
from ..service import Service
from .commit_log import CommitLog
from .consume_queue_set import ConsumeQueueSet
from .key_index import KeyIndex

log = logging.getLogger(__name__)

ArrivalListener = Callable[[str, int, int], None]  # (topic, queue_id, new max offset)


class Dispatcher(Protocol):
    """Consumer of dispatched records."""

    def dispatch_run(self, records: Sequence[DispatchRecord]) -> None:
        """Apply records that follow each other in the log, in log order."""

    def batch_done(self) -> None:
        """Called after every dispatch batch (publish buffered state)."""


class ConsumeQueueDispatcher:
    """Appends a consume-queue unit for every normal or committed record."""

    def __init__(self, queues: ConsumeQueueSet, delay_levels_ms: tuple[int, ...],
                 listeners: list[ArrivalListener]) -> None:
        self._queues = queues
        self._delay_levels_ms = delay_levels_ms
        self._listeners = listeners
        self._tag_hashes: dict[str, int] = {}

    def dispatch_run(self, records: Sequence[DispatchRecord]) -> None:
        """Append the units of ``records``, each queue's in one ``append_run``; then tell the
        listeners once per queue that grew."""
        runs: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
        for record in records:
            if not takes_queue_offset(record.sys_flag):
                continue
            unit = (record.log_position, record.size, self._tag_code(record),
                    record.queue_offset)
            run = runs.get((record.topic, record.queue_id))
            if run is None:
                runs[(record.topic, record.queue_id)] = [unit]
            else:
                run.append(unit)
        for (topic, queue_id), units in runs.items():
            max_offset = self._queues.get_or_create(topic, queue_id).append_run(units)
            if max_offset:
                for listener in self._listeners:
                    listener(topic, queue_id, max_offset)

    def batch_done(self) -> None:
        """Nothing is buffered."""

    def _tag_code(self, record: DispatchRecord) -> int:
        if record.topic == DELAY_TOPIC and PROPERTY_DELAY in record.properties:
            return self._deliver_time_ms(record)
        tags = record.tags
        if not tags:
            return 0
        code = self._tag_hashes.get(tags)
        if code is None:
            if len(self._tag_hashes) > 65_536:
                self._tag_hashes.clear()
            code = self._tag_hashes[tags] = tag_hash(tags)
        return code

    def _deliver_time_ms(self, record: DispatchRecord) -> int:
        """Delay-topic tag code = deliver time (§3.3): store time + delay of the level."""
        try:
            level = int(record.properties[PROPERTY_DELAY])
        except ValueError:
            return record.store_timestamp_ms + 1000
        if level < 1:
            return record.store_timestamp_ms + 1000
        level = min(level, len(self._delay_levels_ms))
        return record.store_timestamp_ms + self._delay_levels_ms[level - 1]


class KeyIndexDispatcher:
    """Indexes UNIQ_KEY and every KEYS token of each record except rolled-back ones."""

    def __init__(self, key_index: KeyIndex) -> None:
        self._key_index = key_index

    def dispatch_run(self, records: Sequence[DispatchRecord]) -> None:
        """Index the keys of ``records``."""
        add = self._key_index.add
        for record in records:
            if record.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_ROLLBACK:
                continue
            keys = split_keys(record.keys)
            if record.unique_key:
                keys.insert(0, record.unique_key)
            if keys:
                add(record.topic, keys, record.log_position, record.store_timestamp_ms)

    def batch_done(self) -> None:
        """Write the current index file's header once per batch."""
        self._key_index.sync_header()


class DispatchService(Service):
    """Tails the commit log from ``position``."""

    name = "dispatch"
    interval_ms = 1
    batch_size_max = 65_536
    decode_size_max = 512
    """Records dispatched at a time (a run from the append feed or decoded from the log): a
    run this short is dispatched and dropped before the garbage collector's young generation
    fills, so the records decoded for it never reach the older generations (65 536-record runs
    made decoding about 3x slower in collections)."""

    def __init__(self, commit_log: CommitLog, dispatchers: list[Dispatcher], clock: Clock,
                 start_position: int) -> None:
        super().__init__(clock)
        self._commit_log = commit_log
        self._dispatchers = dispatchers
        self.position = start_position
        self.dispatched_timestamp_ms = 0  # store time of the newest record dispatched
        self.end_position: Callable[[], int] = lambda: commit_log.max_position
        """Where dispatch stops: the log end, or (SYNC flush) the flushed position, so
        consumers never see a record a power loss could take back."""
        self._progress = threading.Condition()

    def run_once(self, now_ms: int) -> int:
        """Dispatch up to ``batch_size_max`` records; returns how many."""
        commit_log = self._commit_log
        end = self.end_position()
        position = max(self.position, commit_log.min_position)
        feed = commit_log.dispatch_feed
        processed = 0
        while position < end and processed < self.batch_size_max:
            count_max = min(self.decode_size_max, self.batch_size_max - processed)
            record = feed[0] if feed else None
            if record is not None and record.log_position <= position:
                records = _take_from_feed(feed, position, end, count_max)
                if not records:
                    continue  # dispatched already (from the log before the feed caught up)
            else:  # from the log, up to the feed's first record
                stop = end if record is None else min(end, record.log_position)
                records = self._decode_from(position, stop, count_max)
                if not records:  # a blank record: continue in the next segment
                    position = self._next_segment_start(position)
                    continue
            for dispatcher in self._dispatchers:
                dispatcher.dispatch_run(records)
            last = records[-1]
            position = last.log_position + last.size
            processed += len(records)
            timestamp_ms = last.store_timestamp_ms
        if processed:
            for dispatcher in self._dispatchers:
                dispatcher.batch_done()
            self.dispatched_timestamp_ms = timestamp_ms
        if processed or position != self.position:
            with self._progress:
                self.position = position
                self._progress.notify_all()
        return processed

    def _decode_from(self, position: int, stop: int, count_max: int) -> list[DispatchRecord]:
        """Records from ``position`` in its segment, ending by ``stop`` (empty: a blank)."""
        segment = self._commit_log.segments.find(position)
        assert segment is not None  # position < stop <= the log end
        base = segment.base_position
        records = decode_run(segment.buffer, position - base,
                             min(segment.written_position, stop - base), count_max)
        if records:
            return records
        record = self._decode_at(position)  # another layout, a blank, or corruption
        return [record] if record is not None else []

    def _decode_at(self, position: int) -> DispatchRecord | None:
        segment = self._commit_log.segments.find(position)
        assert segment is not None  # position < the log end
        kind, _size, record = decode_for_dispatch(segment.buffer,
                                                  position - segment.base_position,
                                                  segment.written_position)
        if kind == RecordKind.MESSAGE:
            return record
        if kind == RecordKind.BLANK:
            return None
        self.position = position
        raise CorruptionError(f"dispatch found an invalid record at position={position}",
                              log_position=position, path=str(segment.path))

    def _next_segment_start(self, position: int) -> int:
        segment_size = self._commit_log.config.segment_size_bytes
        return position - position % segment_size + segment_size

    @property
    def behind_bytes(self) -> int:
        """Log bytes not yet dispatched."""
        return max(0, self.end_position() - self.position)

    def drain(self) -> None:
        """Dispatch everything now on the calling thread (the service thread must be stopped)."""
        while self.run_once(self.clock.now_ms()):
            pass

    def wait_until(self, position: int, timeout_ms: int) -> bool:
        """Block until ``position`` is dispatched; False on timeout or service failure."""
        with self._progress:
            return self._progress.wait_for(
                lambda: self.position >= position or self.failure is not None,
                timeout_ms / 1000) and self.failure is None

    def on_failure(self, error: BaseException) -> None:
        """Wake waiters so they see the failure."""
        with self._progress:
            self._progress.notify_all()


def _take_from_feed(feed: deque[DispatchRecord], position: int, end: int,
                    count_max: int) -> list[DispatchRecord]:
    """Up to ``count_max`` records of the append feed that follow each other from ``position``
    (below ``end``); records before ``position`` are dropped (dispatched from the log)."""
    records: list[DispatchRecord] = []
    while feed and len(records) < count_max and position < end:
        record = feed[0]
        if record.log_position > position:
            break
        feed.popleft()
        if record.log_position == position:
            records.append(record)
            position += record.size
    return records
