"""``TimerService``: delivery at any moment (RocketMQ 5 timer messages) via ``rmq_sys_wheel_timer``.

Send path (``schedule_timer``, pure): a message with ``TIMER_DELIVER_MS`` (absolute epoch ms),
``TIMER_DELAY_SEC`` or ``TIMER_DELAY_MS`` (relative to the send) and no ``DELAY`` level (a level
takes precedence, as in RocketMQ) is diverted as Apache RocketMQ 5.3 diverts it
(``HookUtils.transformTimerMessage``): ``TIMER_OUT_MS`` = the deliver time, ``REAL_TOPIC`` /
``REAL_QID`` = where it was going, stored in ``rmq_sys_wheel_timer`` queue 0. A deliver time at
or before now stores the message normally (delivered at once); one more than
``delay.timer_max_delay_s`` ahead (``timerMaxDelaySec``, 3 days), a value Java's
``Long.parseLong`` refuses (spaces, ``_``, past the 64-bit range; a delay that overflows wraps
to the past, as in Java), or a delete marker whose time has passed is refused
(``InvalidMessageError``: RocketMQ's WHEEL_TIMER_MSG_ILLEGAL, remoting code 13), and so is
every timer message when ``delay.timer_enabled`` is off (``timerWheelEnable``).

Delivery (``TimerService.run_once``): the service reads the timer queue from its scan offset
into an in-memory schedule (a heap by deliver time; reading each record's ``TIMER_OUT_MS``), and
puts every message whose time has come into ``REAL_TOPIC`` / ``REAL_QID`` with those two
properties and the relative ``TIMER_DELAY_SEC`` / ``TIMER_DELAY_MS`` removed (a retry or
dead-letter copy of the delivered message must not wait again), ``TIMER_ENQUEUE_MS`` (the timer
record's store time) and ``TIMER_DEQUEUE_MS`` (now) added and ``WAIT=false``; ``TIMER_OUT_MS``
and ``TIMER_DELIVER_MS`` stay. The thread sleeps until the earliest deliver time (at most
``WAIT_MAX_MS``) and is woken when a timer record is dispatched.

Cancel (RocketMQ 5's delete by unique key): a message with ``TIMER_DEL_UNIQKEY`` = the
``UNIQ_KEY`` of a pending timer message of the same topic (or ``topic+UNIQ_KEY``, as RocketMQ
5.2 builds it) is a *delete marker*: always diverted to the timer queue (at its timer property's
time, or now without one), never delivered. Read into the schedule, it cancels the pending
timer with that key: neither is delivered. A marker read before its target (sent first, or met
in that order when the schedule is rebuilt) stays pending until its own deliver time and
cancels a target stored up to that time (by the target's store timestamp, so a rebuild reading
a backlog decides alike; a marker past its time is dropped only once the scan has caught up
with the queue); being pending, it holds the watermark, so a rebuild after a restart reads it
again before any target behind it. A timer delivered already is not recalled.

Difference from Apache RocketMQ: Apache also keeps a ``timerwheel`` file, a ``timerlog/``
and ``config/timercheck``; Postbox writes none of them. The timer records in the commit log and
the ``rmq_sys_wheel_timer`` consume queue are byte-compatible; the schedule is rebuilt from
them at start. Apache rounds deliver times down to ``timerPrecisionMs`` (1 s) and delivers
within that second; Postbox keeps the exact millisecond and is never early.

Progress: the *watermark* — the lowest timer-queue offset not yet delivered (or the scan
offset when nothing is pending) — is committed as the consumer offset of the system group
``TIMER_PROGRESS_GROUP`` on ``rmq_sys_wheel_timer`` queue 0, so it is persisted with the
consumer offsets and disk pressure never deletes an undelivered timer record. After a restart
(or a crash) the schedule is rebuilt from the watermark; a record found then whose message is
already in its real topic (same unique key and ``TIMER_OUT_MS``, through the key index) is not
delivered again, so duplicates are limited to messages without a unique key and puts the crash
caught before they reached the index (at least once). A put that
fails (disk full, store closed) is retried ``RETRY_DELAY_MS`` later; a record that cannot be
delivered (not a timer message, rejected as invalid by the store) is skipped with an error.

Limits: the schedule holds every pending timer message in memory (about 100 bytes each); a run
reads at most ``INGEST_BATCH_MAX`` records and delivers at most ``DELIVER_BATCH_MAX``.

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
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    MessageView,
)
from ..formats.topic_names import TIMER_TOPIC
from ..service import Service
from ..store.message_store import MessageStore
from .config_stores import ConsumerOffsetTable
from .delay_service import delay_level

log = logging.getLogger(__name__)

TIMER_PROGRESS_GROUP = "CID_RMQ_SYS_TIMER_PROGRESS"
"""The system group whose consumer offset on the timer queue is the delivery watermark."""
TIMER_PROPERTIES = (PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS)
INGEST_BATCH_MAX = 1024
DELIVER_BATCH_MAX = 256
WAIT_MAX_MS = 1000
RETRY_DELAY_MS = 100
LATENESS_SAMPLES_MAX = 100_000


def java_long(text: str) -> int:
    """``text`` read as Java's ``Long.parseLong`` reads it: an optional ``+``/``-`` then
    decimal digits (any script's), no spaces or ``_``, within the signed 64-bit range.

    Raises:
        ValueError: anything else.
    """
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not all(char.isdecimal() for char in digits):
        raise ValueError(f"{text!r} is not a Java long")
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{text!r} is out of a Java long's range")
    return value


def _wrapped(value: int) -> int:
    """``value`` wrapped to a signed 64-bit long, as Java's arithmetic wraps it."""
    return (value + 2**63) % 2**64 - 2**63


def timer_deliver_ms(properties: dict[str, str], now_ms: int) -> int | None:
    """The deliver time the timer properties ask for (None: there are none), computed as
    RocketMQ's ``HookUtils.transformTimerMessage`` does (Java longs: a delay that overflows
    wraps, to a time in the past).

    Raises:
        InvalidMessageError: a timer property is not a Java long.
    """
    for name, scale, base in ((PROPERTY_TIMER_DELAY_SEC, 1000, now_ms),
                              (PROPERTY_TIMER_DELAY_MS, 1, now_ms),
                              (PROPERTY_TIMER_DELIVER_MS, 1, 0)):
        raw = properties.get(name)
        if raw is None:
            continue
        try:
            return _wrapped(base + _wrapped(java_long(raw) * scale))
        except ValueError as error:
            raise InvalidMessageError(f"{name}={raw!r} is not an integer "
                                      "(WHEEL_TIMER_MSG_ILLEGAL)") from error
    return None


def schedule_timer(message: Message, queue_id: int, now_ms: int, *, enabled: bool,
                   max_delay_s: int, levels_ms: tuple[int, ...]) -> Message | None:
    """The ``rmq_sys_wheel_timer`` record of a timer message, or None when ``message`` is not
    one (or is due already, or has a ``DELAY`` level). The input is never modified.

    Raises:
        InvalidMessageError: unparsable, more than ``max_delay_s`` ahead, or timers are off.
    """
    properties = dict(message.properties or {})
    cancel = PROPERTY_TIMER_DEL_UNIQKEY in properties
    if not cancel and not any(name in properties for name in TIMER_PROPERTIES):
        return None
    if not cancel and delay_level(message, levels_ms):
        return None
    if not enabled:
        raise InvalidMessageError("timer messages are off on this broker (timerWheelEnable="
                                  "false, WHEEL_TIMER_NOT_ENABLE)", topic=message.topic)
    deliver_ms = timer_deliver_ms(properties, now_ms)
    if cancel and deliver_ms is not None and deliver_ms <= now_ms:
        raise InvalidMessageError("a timer delete marker's time has passed "
                                  "(WHEEL_TIMER_MSG_ILLEGAL)", topic=message.topic)
    if cancel:  # a delete marker is never stored as a message of its topic
        properties.pop(PROPERTY_DELAY, None)
        deliver_ms = max(deliver_ms or now_ms, now_ms)
    elif deliver_ms is None or deliver_ms <= now_ms:
        return None
    if deliver_ms - now_ms > max_delay_s * 1000:
        raise InvalidMessageError(
            f"timer delay of {deliver_ms - now_ms} ms exceeds timerMaxDelaySec={max_delay_s} "
            "(WHEEL_TIMER_MSG_ILLEGAL)", topic=message.topic)
    properties[PROPERTY_TIMER_OUT_MS] = str(deliver_ms)
    properties[PROPERTY_REAL_TOPIC] = message.topic
    properties[PROPERTY_REAL_QID] = str(queue_id)
    keys = message.keys if message.keys is None or isinstance(message.keys, str) else list(
        message.keys)
    return Message(
        TIMER_TOPIC, message.body, tags=message.tags, keys=keys, properties=properties,
        unique_key=message.unique_key, flag=message.flag,
        born_timestamp_ms=message.born_timestamp_ms, born_host=message.born_host,
        reconsume_count=message.reconsume_count, sys_flag=message.sys_flag)


def timer_delivery(view: MessageView, now_ms: int) -> tuple[Message, int]:
    """The message a stored timer record becomes, and its real queue id.

    Raises:
        InvalidMessageError: no or invalid ``REAL_TOPIC`` / ``REAL_QID``.
    """
    properties = dict(view.properties)
    real_topic = properties.pop(PROPERTY_REAL_TOPIC, None)
    real_qid = properties.pop(PROPERTY_REAL_QID, None)
    if not real_topic or real_qid is None or not real_qid.lstrip("-").isdigit():
        raise InvalidMessageError(f"timer record at position={view.log_position} has no valid "
                                  f"{PROPERTY_REAL_TOPIC}/{PROPERTY_REAL_QID}")
    for relative in (PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS):
        properties.pop(relative, None)  # a later resend (retry, DLQ) must not wait again
    properties[PROPERTY_TIMER_ENQUEUE_MS] = str(view.store_timestamp_ms)
    properties[PROPERTY_TIMER_DEQUEUE_MS] = str(now_ms)
    properties[PROPERTY_WAIT] = "false"
    keys = properties.pop(PROPERTY_KEYS, None)
    tags = properties.pop(PROPERTY_TAGS, None)
    unique_key = properties.pop(PROPERTY_UNIQ_KEY, None)
    born_ms = view.born_timestamp_ms
    message = Message(
        real_topic, view.body, tags=tags, keys=keys, properties=properties,
        unique_key=unique_key, flag=view.flag,
        born_timestamp_ms=born_ms if born_ms >= 0 else None, born_host=str(view.born_host),
        reconsume_count=max(0, view.reconsume_count), sys_flag=view.sys_flag)
    return message, int(real_qid)


def _timer_key(properties: dict[str, str], cancels: str | None = None
               ) -> tuple[str, str] | None:
    """(real topic, UNIQ_KEY) of a timer record, or of the timer its delete marker cancels
    (``cancels``: the UNIQ_KEY, or RocketMQ 5's ``realTopic+UNIQ_KEY``); None: no key."""
    topic = properties.get(PROPERTY_REAL_TOPIC, "")
    unique_key = properties.get(PROPERTY_UNIQ_KEY) if cancels is None else cancels
    if cancels is not None and cancels.startswith(topic + "+"):
        unique_key = cancels[len(topic) + 1:]
    return (topic, unique_key) if topic and unique_key else None


class TimerService(Service):
    """Delivers ``rmq_sys_wheel_timer`` records when their ``TIMER_OUT_MS`` comes."""

    name = "timer"
    interval_ms = WAIT_MAX_MS

    def __init__(self, store: MessageStore, offsets: ConsumerOffsetTable, clock: Clock) -> None:
        super().__init__(clock)
        self._store = store
        self._offsets = offsets
        self._run_lock = threading.Lock()
        self._schedule: list[tuple[int, int, int, int]] = []  # (deliver ms, offset, pos, size)
        self._pending: set[int] = set()
        self._targets: dict[tuple[str, str], int] = {}  # (real topic, UNIQ_KEY) -> offset
        self._key_of: dict[int, tuple[str, str]] = {}
        self._tombstones: dict[tuple[str, str], tuple[int, int]] = {}  # -> (offset, until ms)
        self._markers: dict[int, tuple[str, str]] = {}
        self._expired: list[int] = []  # markers past their time, dropped once caught up
        self._caught_up = True
        self._low: list[int] = []  # pending offsets (lazy deletion)
        self._scan: int | None = None
        self._recovered_below = 0  # records below were in the queue at start: maybe delivered
        self._lateness_ms: deque[int] = deque(maxlen=LATENESS_SAMPLES_MAX)
        self.delivered_count = 0
        self.skipped_count = 0
        self.cancelled_count = 0

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Dispatch listener: a new timer record wakes the thread."""
        if topic == TIMER_TOPIC:
            self.wakeup()

    def run_once(self, now_ms: int) -> int:
        """Read new timer records into the schedule and deliver what is due (bounded)."""
        try:
            with self._run_lock:
                work = self._ingest()
                work += self._deliver(now_ms)
                self._commit()
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
        return min(max(head - now_ms, 1), WAIT_MAX_MS)

    # ---- ingest: timer queue -> schedule -----------------------------------------------------

    def _ingest(self) -> int:
        queue = self._store.queues.get(TIMER_TOPIC, 0)
        if self._scan is None:  # the first run: what the queue holds may be delivered already
            saved = self._offsets.query(TIMER_TOPIC, TIMER_PROGRESS_GROUP, 0)
            self._scan = saved if saved is not None else queue.min_offset if queue else 0
            self._recovered_below = queue.max_offset if queue else 0
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
                self._schedule_unit(self._scan, position, size)
                self._scan += 1
                read += 1
        self._caught_up = self._scan >= queue.max_offset
        return read

    def _schedule_unit(self, offset: int, position: int, size: int) -> None:
        if size == FILLER_UNIT_SIZE and position == 0:
            return
        try:
            view = self._store.read_message(position)
            deliver_ms = int(view.properties[PROPERTY_TIMER_OUT_MS])
        except (CorruptionError, MessageNotFoundError, KeyError, ValueError) as error:
            log.error("[timer] %s offset %d (position %d): not a timer record, skipped: %r",
                      TIMER_TOPIC, offset, position, error)
            self.skipped_count += 1
            return
        key = _timer_key(view.properties)
        cancels = view.properties.get(PROPERTY_TIMER_DEL_UNIQKEY)
        if cancels is not None:
            key = _timer_key(view.properties, cancels)
            target = self._targets.pop(key, None) if key else None
            if target is not None or key is None:
                self._cancel(target, offset)
                return
            self._tombstones[key] = (offset, deliver_ms)  # its target may come later
            self._markers[offset] = key
        elif key is not None and key in self._tombstones \
                and view.store_timestamp_ms <= self._tombstones[key][1]:
            marker, _ = self._tombstones.pop(key)
            self._markers.pop(marker, None)
            self._cancel(offset, marker)
            return
        elif key is not None:
            self._targets[key] = offset
            self._key_of[offset] = key
        heapq.heappush(self._schedule, (deliver_ms, offset, position, size))
        self._pending.add(offset)
        heapq.heappush(self._low, offset)

    def _cancel(self, pending: int | None, marker: int) -> None:
        """A delete marker met its target: neither is delivered (their heap entries, if any,
        are dropped when they come up)."""
        for offset in (pending, marker):
            if offset is not None:
                self._pending.discard(offset)
                self._key_of.pop(offset, None)
        if pending is not None:
            self.cancelled_count += 1
            log.info("[timer] %s offset %d cancelled by the delete marker at offset %d",
                     TIMER_TOPIC, pending, marker)

    # ---- deliver: schedule -> real topic -----------------------------------------------------

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
        self._expired.clear()

    def _deliver(self, now_ms: int) -> int:
        self._expire_markers()
        delivered = 0
        while self._schedule and self._schedule[0][0] <= now_ms and delivered < DELIVER_BATCH_MAX:
            deliver_ms, offset, position, size = self._schedule[0]
            if offset not in self._pending or offset in self._markers:  # cancelled; marker
                heapq.heappop(self._schedule)
                if offset in self._markers:
                    self._expired.append(offset)
                continue
            if not self._deliver_one(offset, position, now_ms):
                heapq.heapreplace(self._schedule, (now_ms + RETRY_DELAY_MS, offset, position,
                                                   size))
                break
            heapq.heappop(self._schedule)
            self._pending.discard(offset)
            self._targets.pop(self._key_of.pop(offset, ("", "")), None)
            self._lateness_ms.append(now_ms - deliver_ms)
            delivered += 1
        return delivered

    def _deliver_one(self, offset: int, position: int, now_ms: int) -> bool:
        """Put one record's message to its real topic; False: retry later."""
        where = f"{TIMER_TOPIC} offset {offset} (position {position})"
        try:
            message, queue_id = timer_delivery(self._store.read_message(position), now_ms)
            if offset < self._recovered_below and self._delivered_before(message):
                return True
            self._store.put_message(message, queue_id)
        except (CorruptionError, MessageNotFoundError, InvalidMessageError) as error:
            log.error("[timer] %s: cannot be delivered, skipped: %s", where, error)
            self.skipped_count += 1
            return True
        except StoreClosedError:
            raise
        except Exception as error:  # disk full, fail-stop…: retried, nothing dropped
            log.error("[timer] %s: put failed, retrying in %d ms: %s", where, RETRY_DELAY_MS,
                      error)
            return False
        self.delivered_count += 1
        return True

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

    def _commit(self) -> None:
        if self._scan is None:
            return
        while self._low and self._low[0] not in self._pending:
            heapq.heappop(self._low)
        watermark = self._low[0] if self._low else self._scan
        saved = self._offsets.query(TIMER_TOPIC, TIMER_PROGRESS_GROUP, 0)
        if watermark != saved and (saved is not None or watermark > 0):  # no timer: no entry
            self._offsets.commit(TIMER_TOPIC, TIMER_PROGRESS_GROUP, 0, watermark)

    # ---- introspection -----------------------------------------------------------------------

    def next_deliver_ms(self) -> int | None:
        """The earliest pending deliver time (None: nothing pending read yet)."""
        with self._run_lock:
            return self._schedule[0][0] if self._schedule else None

    def pending_count(self) -> int:
        """Timer messages read and not yet delivered."""
        return len(self._pending)

    def lateness_ms_samples(self) -> list[int]:
        """``delivery run time - deliver time`` of the latest deliveries, oldest first."""
        with self._run_lock:
            return list(self._lateness_ms)


__all__ = ["TIMER_PROGRESS_GROUP", "TIMER_PROPERTIES", "TimerService", "schedule_timer",
           "timer_deliver_ms", "timer_delivery"]
