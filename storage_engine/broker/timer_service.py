"""``TimerService``: delivery at any moment (RocketMQ 5 timer messages) through
``rmq_sys_wheel_timer`` and the timer wheel's files, as Apache RocketMQ 5.x keeps them.

What a timer message becomes on its way (the send-path diversion, the delivered copy): see
``timer_messages``. The files (``timerwheel``, ``timerlog/``, ``config/timercheck``): see
``timer_files`` and ``formats.timer_layout``.

Enqueue (``TimerService.run_once``): the service reads the timer queue from its scan offset and
appends each record to the timer log, in the wheel slot of its ``TIMER_OUT_MS`` (Apache's
``TimerEnqueuePutService``: a record more than ``delay.timer_roll_window_slots`` ahead is parked
in the slot where that window ends, ``MAGIC_ROLL``, and put back to the timer topic then). The
pending records are also held in memory (a heap by deliver time, about 100 bytes each).

Dequeue: every record whose time has come is delivered together with the other due ones of
its run (one read each, one ``put_messages`` per real queue id): into ``REAL_TOPIC`` /
``REAL_QID`` (``timer_delivery``). Postbox keeps the exact millisecond and is never early;
Apache delivers a slot's records together once the slot is past. The thread sleeps until the
earliest deliver time (at most ``WAIT_MAX_MS``) and is woken when a timer record is dispatched.

Progress: ``config/timercheck`` says how far the queue was read into the timer log
(lastTimerQueueOffset) and that every slot before lastReadTimeMs was delivered (the slot of the
earliest pending record, or the current second). The files are flushed (log, wheel, then the
checkpoint) every ``FLUSH_INTERVAL_MS`` and at stop. The *watermark* — the lowest timer-queue
offset not yet delivered — is also committed as the consumer offset of the system group
``TIMER_PROGRESS_GROUP``, so disk pressure never deletes an undelivered timer record.

Start: with a ``config/timercheck`` (written by Postbox or by Apache) the pending records are
read back from the wheel — every slot from lastReadTimeMs on, its records chained through the
timer log — and the queue is read on from the record after the timer log's last one (or
lastTimerQueueOffset). A record read back costs its 52 bytes and an unchecked read of its
message (``CommitLog.read_unchecked``, for the queue offset); the message is read and checked
when it is due (on a slot's edge, where the slot's time may be Apache's rounding, its
properties' moment is taken then), and a delete marker finds a target read back through the
key index. Without one (a store of an older
Postbox, or of a broker with the wheel off) the queue is read again from the watermark.
Either way a record due before the start whose message is already in its real topic (same
unique key and ``TIMER_OUT_MS``, through the key index) is not delivered again: duplicates are
limited to messages without a unique key and puts the crash caught before they reached the
index (at least once). A put that fails (disk
full, store closed) is retried ``RETRY_DELAY_MS`` later; a record that cannot be delivered is
skipped with an error.

Cancel (RocketMQ 5's delete by unique key): a message with ``TIMER_DEL_UNIQKEY`` = the
``UNIQ_KEY`` of a pending timer message of the same topic (or ``topic+UNIQ_KEY``, as RocketMQ
5.2 builds it) is a *delete marker*: always diverted to the timer queue (at its timer property's
time, or now without one), never delivered, and written to the timer log with ``MAGIC_DELETE``.
Read, it cancels the pending timer with that key: neither is delivered, and the target's
timer-log record gets ``MAGIC_DELETE`` too (Apache skips it as well). A marker read before its
target stays pending until its own deliver time and cancels a target stored up to that time (by
the target's store timestamp). A timer delivered already is not recalled. Apache matches a
marker only with a target of the same slot.

Limits: a run reads at most ``INGEST_BATCH_MAX`` records and delivers at most
``DELIVER_BATCH_MAX``. A timer-log file is deleted once every record in it was delivered
(``TimerFiles.delete_delivered``, after each flush).

Thread-safety: every public method may be called from any thread; runs are serialised by a
lock. The owner stops this service before it closes the store.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections import deque

from ..clock import Clock
from ..contract.message import Message
from ..errors import CorruptionError, InvalidMessageError, MessageNotFoundError, StoreClosedError
from ..formats import (
    FILLER_UNIT_SIZE,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    MessageView,
)
from ..formats.engine import java_string_hashcode
from ..formats.timer_layout import (
    MAGIC_DEFAULT,
    MAGIC_DELETE,
    MAGIC_ROLL,
    WHEEL_BLANK_SLOTS,
    WHEEL_SLOTS_TOTAL,
    TimerUnit,
)
from ..formats.topic_names import TIMER_TOPIC
from ..rates import CounterRates
from ..service import Service
from ..store.message_store import MessageStore
from .config_stores import ConsumerOffsetTable
from .timer_files import FLUSH_INTERVAL_MS, TimerFiles
from .timer_messages import timer_delivery, timer_key, timer_moment, timer_roll_copy

log = logging.getLogger(__name__)

TIMER_PROGRESS_GROUP = "CID_RMQ_SYS_TIMER_PROGRESS"
"""The system group whose consumer offset on the timer queue is the delivery watermark."""
INGEST_BATCH_MAX = 1024
DELIVER_BATCH_MAX = 1024
WAIT_MAX_MS = 1000
RETRY_DELAY_MS = 100
LATENESS_SAMPLES_MAX = 100_000
RATE_WINDOW_MS = 10_000  # rates_per_second(): records a second over the last 10 s

Entry = tuple[int, int, int, int]  # (deliver ms, queue offset, log position, size)
"""A pending record in the heap."""


class TimerService(Service):
    """Delivers ``rmq_sys_wheel_timer`` records when their time comes, keeping the wheel's files."""

    name = "timer"
    interval_ms = WAIT_MAX_MS

    def __init__(self, store: MessageStore, offsets: ConsumerOffsetTable, clock: Clock) -> None:
        super().__init__(clock)
        self._store = store
        self._offsets = offsets
        delay = store.config.delay
        self._precision = delay.timer_precision_ms
        self._roll_slots = min(delay.timer_roll_window_slots,
                               WHEEL_SLOTS_TOTAL - WHEEL_BLANK_SLOTS)
        self._files = TimerFiles(store.root_dir, self._precision,
                                 delay.timer_log_segment_size_bytes)
        self._run_lock = threading.Lock()
        self._schedule: list[Entry] = []
        self._pending: set[int] = set()
        self._timer_pos: dict[int, int] = {}  # offset -> its timer-log position
        self._rolls: dict[int, int] = {}  # offset of a parked record -> its enqueue time
        self._targets: dict[tuple[str, str], int] = {}  # (real topic, UNIQ_KEY) -> offset
        self._key_of: dict[int, tuple[str, str]] = {}
        self._tombstones: dict[tuple[str, str], tuple[int, int]] = {}  # -> (offset, until ms)
        self._markers: dict[int, tuple[str, str]] = {}
        self._expired: list[int] = []  # markers past their time, dropped once caught up
        self._caught_up = True
        self._low: list[int] = []  # pending offsets (lazy deletion)
        self._unrefined: set[int] = set()  # read back on a slot's edge: moment read when due
        self._keys_unread = False  # records read back whose keys are not in _targets
        self._scan: int | None = None
        self._recovered_below = 0  # records below were in the queue at start: maybe delivered
        self._recovered_until_ms = 0  # ... if due before the start
        self._retry_after_ms = 0
        self._flushed_ms = 0
        self._lateness_ms: deque[int] = deque(maxlen=LATENESS_SAMPLES_MAX)
        self.enqueued_count = 0  # records appended to the timer log (rolls and markers too)
        self.delivered_count = 0
        self.skipped_count = 0
        self.cancelled_count = 0
        self._rates = CounterRates(clock.now_ms(), (0, 0), keep_ms=RATE_WINDOW_MS)

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Dispatch listener: a new timer record wakes the thread."""
        if topic == TIMER_TOPIC:
            self.wakeup()

    def run_once(self, now_ms: int) -> int:
        """Read new timer records into the wheel and deliver what is due (bounded)."""
        try:
            with self._run_lock:
                work = self._ingest(now_ms)
                work += self._deliver(now_ms)
                self._commit(now_ms)
                self._rates.sample(now_ms, (self.enqueued_count, self.delivered_count))
                return work
        except StoreClosedError:
            log.warning("[timer] store is closed: nothing delivered (stop the timer service "
                        "before closing the store)")
            return 0

    def idle_wait_ms(self, now_ms: int) -> int:
        """Until the earliest deliver time, at most ``WAIT_MAX_MS`` (a dispatch wakes it)."""
        head = self.next_deliver_ms()
        if head is None:
            return WAIT_MAX_MS
        return min(max(head - now_ms, self._retry_after_ms - now_ms, 1), WAIT_MAX_MS)

    def stop(self, timeout_ms: int = 10_000) -> None:
        """Stop the thread, then record the progress and flush the files."""
        super().stop(timeout_ms)
        with self._run_lock:
            if self._scan is not None:
                try:
                    self._commit(self.clock.now_ms())
                except StoreClosedError:
                    pass
            self._files.close()

    # ---- start: the files, else the queue from the watermark --------------------------------

    def _start(self, now_ms: int) -> None:
        queue = self._store.queues.get(TIMER_TOPIC, 0)
        self._recovered_below = queue.max_offset if queue else 0
        self._recovered_until_ms = now_ms
        check = self._files.load()
        if check is None:
            saved = self._offsets.query(TIMER_TOPIC, TIMER_PROGRESS_GROUP, 0)
            self._scan = saved if saved is not None else queue.min_offset if queue else 0
            return
        oldest = now_ms // self._precision * self._precision \
            - (WHEEL_SLOTS_TOTAL - WHEEL_BLANK_SLOTS) * self._precision
        self._read_back(self._files.pending_units(max(check.last_read_time_ms, oldest)), now_ms)
        scan = check.last_timer_queue_offset
        last = self._files.last_unit
        if last is not None:
            try:
                view = self._store.read_message(last.log_offset)
                if view.topic == TIMER_TOPIC:
                    scan = max(scan, view.queue_offset + 1)
            except (CorruptionError, MessageNotFoundError) as error:
                log.warning("[timer] the timer log's last record is not readable: %r", error)
        self._scan = scan
        log.info("[timer] %d pending timer records read back from the wheel (from %d); the "
                 "timer queue is read on from offset %d", len(self._pending),
                 check.last_read_time_ms, scan)

    def _read_back(self, found: list[tuple[int, int, TimerUnit]], now_ms: int) -> None:
        """Schedule the wheel's pending records (by log position) from the timer log alone:
        a record's queue offset is read from its message's header, the whole message when
        it is due (``_deliver``). Delete markers and cancelled targets are read now, after
        the others: a marker Apache kept beside its target finds it through the key index."""
        deleting = []
        for log_offset, position, unit in found:
            if unit.magic & MAGIC_DELETE:
                deleting.append((log_offset, position, unit))
                continue
            try:
                offset = self._store.commit_log.read_unchecked(log_offset).queue_offset
            except (CorruptionError, MessageNotFoundError) as error:
                log.error("[timer] timer-log record at %d: no message at position %d, "
                          "skipped: %s", position, log_offset, error)
                self.skipped_count += 1
                continue
            if unit.magic & MAGIC_ROLL:
                self._rolls[offset] = unit.write_time_ms
            elif unit.deliver_ms % self._precision == 0:
                self._unrefined.add(offset)  # maybe Apache's rounding of a later moment
            self._schedule.append((unit.deliver_ms, offset, log_offset, unit.log_size))
            self._pending.add(offset)
            self._timer_pos[offset] = position
            self._low.append(offset)
        heapq.heapify(self._schedule)
        heapq.heapify(self._low)
        self._keys_unread = bool(found)
        for log_offset, position, unit in deleting:
            self._schedule_unit(None, log_offset, unit.log_size, now_ms, (position, unit))

    # ---- ingest: timer queue -> timer log, wheel and schedule --------------------------------

    def _ingest(self, now_ms: int) -> int:
        if self._scan is None:
            self._start(now_ms)
        assert self._scan is not None
        queue = self._store.queues.get(TIMER_TOPIC, 0)
        if queue is None:
            self._caught_up = True
            return 0
        if not queue.min_offset <= self._scan <= queue.max_offset:
            corrected = min(max(self._scan, queue.min_offset), queue.max_offset)
            log.warning("[timer] offset %d outside the timer queue [%d, %d] (retention, "
                        "recovery): resuming at %d", self._scan, queue.min_offset,
                        queue.max_offset, corrected)
            self._scan = corrected
        end = min(queue.max_offset, self._scan + INGEST_BATCH_MAX)
        read = 0
        while self._scan < end:
            units = queue.read_units(self._scan, end - self._scan)
            if not units:
                break
            for position, size, _ in units:
                if not (size == FILLER_UNIT_SIZE and position == 0):
                    self._schedule_unit(self._scan, position, size, now_ms)
                self._scan += 1
                read += 1
        self._caught_up = self._scan >= queue.max_offset
        return read

    def _schedule_unit(self, offset: int | None, position: int, size: int, now_ms: int,
                       logged: tuple[int, TimerUnit] | None = None) -> None:
        """Schedule one record (``logged``: read back from the timer log, else appended)."""
        try:
            view = self._store.read_message(position)
            out_ms = int(view.properties[PROPERTY_TIMER_OUT_MS])
        except (CorruptionError, MessageNotFoundError, KeyError, ValueError) as error:
            log.error("[timer] %s offset %s (position %d): not a timer record, skipped: %r",
                      TIMER_TOPIC, offset, position, error)
            self.skipped_count += 1
            return
        offset = view.queue_offset if offset is None else offset
        cancels = view.properties.get(PROPERTY_TIMER_DEL_UNIQKEY)
        if logged is not None and logged[1].magic & MAGIC_ROLL:
            self._push(offset, logged[1].deliver_ms, position, size, logged[0])
            self._rolls[offset] = logged[1].write_time_ms
            return
        if logged is not None and logged[1].magic & MAGIC_DELETE and cancels is None:
            return  # a timer cancelled before the restart
        if self._cancelled(view, offset, cancels, out_ms, logged):
            return
        moment = timer_moment(view.properties, view.store_timestamp_ms, out_ms, self._precision)
        if logged is None:
            logged = self._append(view, out_ms, position, size, now_ms, cancels is not None)
            if logged[1].magic & MAGIC_ROLL:
                self._rolls[offset] = logged[1].write_time_ms
                moment = logged[1].deliver_ms
        self._push(offset, moment, position, size, logged[0])

    def _cancelled(self, view: MessageView, offset: int, cancels: str | None, out_ms: int,
                   logged: tuple[int, TimerUnit] | None) -> bool:
        """Match a delete marker and its target; True: nothing more to schedule."""
        key = timer_key(view.properties)
        if cancels is not None:
            key = timer_key(view.properties, cancels)
            target = self._targets.pop(key, None) if key else None
            if target is None and key is not None and self._keys_unread:
                target = self._read_back_target(key, view, out_ms)
            if target is not None or key is None:
                self._cancel(target, offset)
                return True
            self._tombstones[key] = (offset, out_ms)  # its target may come later
            self._markers[offset] = key
        elif key is not None and key in self._tombstones \
                and view.store_timestamp_ms <= self._tombstones[key][1]:
            marker, _ = self._tombstones.pop(key)
            self._markers.pop(marker, None)
            if logged is not None:
                self._files.mark_deleted(logged[0])
            self._cancel(offset, marker)
            return True
        elif key is not None:
            self._targets[key] = offset
            self._key_of[offset] = key
        return False

    def _read_back_target(self, key: tuple[str, str], marker: MessageView,
                          out_ms: int) -> int | None:
        """The pending record read back at start (its key unread) that ``key`` names, found
        through the key index (None: none): stored before ``marker``, or after it until the
        marker's time (``out_ms``), as a tombstone would have matched it."""
        for view in self._store.query_by_unique_key(TIMER_TOPIC, key[1]):
            offset = view.queue_offset
            if offset in self._pending and offset not in self._markers \
                    and offset not in self._key_of and timer_key(view.properties) == key \
                    and PROPERTY_TIMER_DEL_UNIQKEY not in view.properties \
                    and (view.log_position < marker.log_position
                         or view.store_timestamp_ms <= out_ms):
                return offset
        return None

    def _append(self, view: MessageView, out_ms: int, position: int, size: int, now_ms: int,
                marker: bool) -> tuple[int, TimerUnit]:
        """Append a record to the timer log (parked if past the roll window)."""
        write_ms = now_ms // self._precision * self._precision
        window_ms = self._roll_slots * self._precision
        magic, deliver_ms = MAGIC_DEFAULT, out_ms
        if deliver_ms - write_ms >= window_ms:
            magic |= MAGIC_ROLL
            short = deliver_ms - write_ms - window_ms < self._roll_slots // 3 * self._precision
            deliver_ms = write_ms + (self._roll_slots // 2 * self._precision if short
                                     else window_ms)
        if marker:
            magic |= MAGIC_DELETE
        unit = TimerUnit(-1, magic, write_ms, deliver_ms - write_ms, position, size,
                         java_string_hashcode(view.properties.get("REAL_TOPIC", "")))
        timer_pos = self._files.append(unit)
        self.enqueued_count += 1
        return timer_pos, unit

    def _push(self, offset: int, moment: int, position: int, size: int, timer_pos: int) -> None:
        heapq.heappush(self._schedule, (moment, offset, position, size))
        self._pending.add(offset)
        self._timer_pos[offset] = timer_pos
        heapq.heappush(self._low, offset)

    def _cancel(self, pending: int | None, marker: int) -> None:
        """A delete marker met its target: neither is delivered (their heap entries, if any,
        are dropped when they come up); the target's timer-log record is marked deleted."""
        for offset in (pending, marker):
            if offset is not None:
                self._pending.discard(offset)
                self._unrefined.discard(offset)
                self._key_of.pop(offset, None)
        if pending is not None:
            position = self._timer_pos.pop(pending, None)
            if position is not None:
                self._files.mark_deleted(position)
            self.cancelled_count += 1
            log.info("[timer] %s offset %d cancelled by the delete marker at offset %d",
                     TIMER_TOPIC, pending, marker)

    # ---- deliver: due records -> real topics, in batches -------------------------------------

    def _expire_markers(self) -> None:
        """Drop the markers past their time once every record stored before it was read (a
        rebuild reading a backlog in batches decides as the first reading did)."""
        if not self._caught_up:
            return
        for offset in self._expired:
            key = self._markers.pop(offset, None)
            if key is not None and self._tombstones.get(key, (None, 0))[0] == offset:
                del self._tombstones[key]
            self._pending.discard(offset)
            self._timer_pos.pop(offset, None)
        self._expired.clear()

    def _deliver(self, now_ms: int) -> int:
        self._expire_markers()
        if now_ms < self._retry_after_ms:
            return 0
        due: list[Entry] = []
        while self._schedule and self._schedule[0][0] <= now_ms and len(due) < DELIVER_BATCH_MAX:
            entry = heapq.heappop(self._schedule)
            offset = entry[1]
            if offset not in self._pending or offset in self._markers:  # cancelled; marker
                if offset in self._markers:
                    self._expired.append(offset)
                continue
            if offset in self._unrefined:
                self._unrefined.discard(offset)
                moment = self._refined_moment(entry)
                if moment > entry[0]:
                    heapq.heappush(self._schedule, (moment, *entry[1:]))
                    continue
            due.append(entry)
        return self._put_due(due, now_ms)

    def _refined_moment(self, entry: Entry) -> int:
        """A record read back on a slot's edge: the moment its properties ask for
        (``timer_moment``); its slot's time when they cannot be read (``_prepare`` says why)."""
        try:
            view = self._store.read_message(entry[2])
            out_ms = int(view.properties[PROPERTY_TIMER_OUT_MS])
        except (CorruptionError, MessageNotFoundError, KeyError, ValueError):
            return entry[0]
        return timer_moment(view.properties, view.store_timestamp_ms, out_ms, self._precision)

    def _put_due(self, due: list[Entry], now_ms: int) -> int:
        """Put the due records' messages, one ``put_messages`` per run of one queue id."""
        ready: list[tuple[Entry, Message | None, int]] = [self._prepare(entry, now_ms)
                                                          for entry in due]
        delivered, index = 0, 0
        while index < len(ready):
            end = index
            while end < len(ready) and ready[end][2] == ready[index][2]:
                end += 1
            batch = [message for _, message, _ in ready[index:end] if message is not None]
            try:
                if batch:
                    self._store.put_messages(batch, ready[index][2])
            except StoreClosedError:
                raise
            except Exception as error:  # disk full, fail-stop…: retried, nothing dropped
                log.error("[timer] %d deliveries failed, retrying in %d ms: %s",
                          len(ready) - index, RETRY_DELAY_MS, error)
                for entry, _, _ in ready[index:]:
                    heapq.heappush(self._schedule, entry)
                self._retry_after_ms = now_ms + RETRY_DELAY_MS
                break
            for entry, message, _ in ready[index:end]:
                self._done(entry, now_ms, message is not None)
                delivered += message is not None
            index = end
        return delivered

    def _prepare(self, entry: Entry, now_ms: int) -> tuple[Entry, Message | None, int]:
        """(entry, the message to put or None to skip, its queue id)."""
        _, offset, position, _ = entry
        try:
            view = self._store.read_message(position)
            if offset in self._rolls:
                return entry, timer_roll_copy(view, self._rolls[offset], now_ms), view.queue_id
            message, queue_id = timer_delivery(view, now_ms)
            if offset < self._recovered_below and entry[0] <= self._recovered_until_ms \
                    and self._delivered_before(message):
                return entry, None, queue_id
            return entry, message, queue_id
        except (CorruptionError, MessageNotFoundError, InvalidMessageError) as error:
            log.error("[timer] %s offset %d (position %d): cannot be delivered, skipped: %s",
                      TIMER_TOPIC, offset, position, error)
            self.skipped_count += 1
            return entry, None, -1

    def _done(self, entry: Entry, now_ms: int, put: bool) -> None:
        deliver_ms, offset, _, _ = entry
        self._pending.discard(offset)
        self._timer_pos.pop(offset, None)
        self._rolls.pop(offset, None)
        self._targets.pop(self._key_of.pop(offset, ("", "")), None)
        if put:
            self._lateness_ms.append(now_ms - deliver_ms)
            self.delivered_count += 1

    def _delivered_before(self, message: Message) -> bool:
        """Whether a record read back at start was delivered before the restart: its real
        topic holds a message with its unique key and deliver time, put by a timer."""
        if not message.unique_key:
            return False
        out_ms = (message.properties or {}).get(PROPERTY_TIMER_OUT_MS)
        return any(view.properties.get(PROPERTY_TIMER_OUT_MS) == out_ms
                   and PROPERTY_TIMER_DEQUEUE_MS in view.properties
                   for view in self._store.query_by_unique_key(message.topic,
                                                               message.unique_key))

    # ---- progress ----------------------------------------------------------------------------

    def _read_time_ms(self, now_ms: int) -> int:
        """Every slot before this was delivered: the current second's slot, or the slot of the
        earliest pending record (one slot earlier for a moment on a slot's edge, which may
        be the end of a slot Apache rounded down to)."""
        slot_ms = now_ms // self._precision * self._precision
        while self._schedule and self._schedule[0][1] not in self._pending:
            heapq.heappop(self._schedule)
        if self._schedule:
            head = self._schedule[0][0]
            edge = self._precision if head % self._precision == 0 else 0
            slot_ms = min(slot_ms, head // self._precision * self._precision - edge)
        return slot_ms

    def _commit(self, now_ms: int) -> None:
        if self._scan is None:
            return
        while self._low and self._low[0] not in self._pending:
            heapq.heappop(self._low)
        watermark = self._low[0] if self._low else self._scan
        saved = self._offsets.query(TIMER_TOPIC, TIMER_PROGRESS_GROUP, 0)
        if watermark != saved and (saved is not None or watermark > 0):  # no timer: no entry
            self._offsets.commit(TIMER_TOPIC, TIMER_PROGRESS_GROUP, 0, watermark)
        if self._files.active:
            self._files.write_check(self._read_time_ms(now_ms), self._scan, now_ms)
            if now_ms - self._flushed_ms >= FLUSH_INTERVAL_MS:
                self._files.flush()
                self._flushed_ms = now_ms
                for path in self._files.delete_delivered():
                    log.info("[timer] %s deleted: every record in it was delivered", path)

    # ---- introspection -----------------------------------------------------------------------

    def next_deliver_ms(self) -> int | None:
        """The earliest pending deliver time (None: nothing pending read yet)."""
        with self._run_lock:
            return self._schedule[0][0] if self._schedule else None

    def pending_count(self) -> int:
        """Timer messages read and not yet delivered."""
        return len(self._pending)

    def offset_behind(self) -> int:
        """Timer records stored and not yet read into the wheel (RocketMQ's
        ``timerOffsetBehind``)."""
        queue, scan = self._store.queues.get(TIMER_TOPIC, 0), self._scan
        return 0 if queue is None else max(queue.max_offset - (scan or 0), 0)

    def read_behind_ms(self, now_ms: int) -> int:
        """How long the earliest undelivered timer is overdue (RocketMQ's ``timerReadBehind``
        in seconds); 0 while nothing is due."""
        head = self.next_deliver_ms()
        return 0 if head is None else max(now_ms - head, 0)

    def rates_per_second(self, now_ms: int) -> tuple[float, float]:
        """Timer-log appends and deliveries a second over the last ``RATE_WINDOW_MS``
        (RocketMQ's ``timerEnqueueTps`` / ``timerDequeueTps``)."""
        enqueued, delivered = self._rates.per_second(
            now_ms, (self.enqueued_count, self.delivered_count), RATE_WINDOW_MS)
        return enqueued, delivered

    def lateness_ms_samples(self) -> list[int]:
        """``delivery run time - deliver time`` of the latest deliveries, oldest first."""
        with self._run_lock:
            return list(self._lateness_ms)


__all__ = ["TIMER_PROGRESS_GROUP", "TimerService"]
