"""``DelayService``: level-based scheduled delivery via ``SCHEDULE_TOPIC_XXXX`` (§11.1).

Send path (``schedule_delayed``, pure): a NOT/COMMIT message whose ``DELAY`` property parses to
a level >= 1 is diverted: its level is clamped to the number of configured levels, ``REAL_TOPIC``
and ``REAL_QID`` record where it was going, and it is stored in ``SCHEDULE_TOPIC_XXXX`` queue
``level - 1``. Dispatch stores the deliver time (store time + delay of the level) as the tag code
of that queue's units (§3.3), so this service reads deliver times from the consume queue without
touching the commit log.

Delivery (``DelayService.run_once``, RocketMQ 5.x synchronous deliver): per level, from its
cursor, each unit whose deliver time has come (a deliver time beyond ``now + delay(level)`` is
clock skew and counts as now) is read back, rebuilt for ``REAL_TOPIC``/``REAL_QID`` with ``DELAY``
and the timer properties removed and ``WAIT=false`` (``REAL_TOPIC``/``REAL_QID`` stay, reference
pitfall 17), and put into the store. The first unit not yet due ends the level's run.

Invariants:
  * Order within a level is the consume-queue order; a cursor only moves past a unit once that
    unit was delivered or deliberately skipped, and ``delay_offsets.set(level, cursor)`` follows
    every move.
  * A failed put (disk full, fail-stop, store closed, any error that is not "this message is
    invalid") skips nothing: the cursor stays on the unit and a later run retries it.
  * Skipped, with an error logged: a record that cannot be read back or is not a valid delay
    message (missing/invalid ``REAL_TOPIC``/``REAL_QID``, corrupt record, size mismatch), one
    the store rejects as invalid (``InvalidMessageError``: it can never be stored, and retrying
    it would block the whole level), one aimed at the transaction half topic (RocketMQ discards
    those), and units whose record retention already deleted. Consume-queue filler units are
    skipped silently.
  * Work per run is bounded: at most ``DELIVER_BATCH_MAX`` units per level.
  * Cursors are clamped into the level queue's ``[min_offset, max_offset]`` on construction
    (``correctDelayOffset``) and before every run (retention moved the minimum, recovery
    truncated the queue).
  * Only levels ``1..len(levels_ms)`` are served; queues of levels beyond a shortened level list
    are left alone.

Wait: the thread sleeps until the earliest moment something may become due — the head unit's
deliver time of a level that has one pending, else ``now + delay(level)`` (nothing stored from
now on can be due sooner) — bounded to ``WAIT_MIN_MS..WAIT_MAX_MS``; ``RETRY_DELAY_MS`` after a
failed put.

Thread-safety: every public method may be called from any thread. Runs are serialised by a
lock, so a caller driving ``run_once`` itself (an inline test runner) while the thread is also
running never delivers a unit twice. The owner must stop this service before it closes the
store.

Crash behaviour: this service writes no file. Cursors live in ``DelayOffsetTable``, which the
owner persists (periodically and at close). After a crash delivery resumes from the last
persisted cursor, so messages delivered since then are delivered again (at-least-once,
duplicates possible). Delivered messages are put with ``WAIT=false``: a crash can lose one that
was not yet flushed only if the table was persisted between its put and the log flush.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections import deque
from collections.abc import Iterator
from typing import Protocol

from ..clock import Clock
from ..contract.message import Message
from ..contract.topics import validate_topic
from ..errors import (
    ConfigError,
    CorruptionError,
    InvalidMessageError,
    MessageNotFoundError,
    StoreClosedError,
)
from ..formats import (
    FILLER_UNIT_SIZE,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_NOT,
    MessageView,
)
from ..formats.topic_names import DELAY_TOPIC, TRANSACTION_HALF_TOPIC
from ..service import Service
from ..store.message_store import MessageStore
from .config_stores import DelayOffsetTable

log = logging.getLogger(__name__)

DELIVER_BATCH_MAX = 256
"""Units handled per level per run (delivered or skipped)."""
WAIT_MIN_MS = 1
WAIT_MAX_MS = 100
"""The thread's wait between idle runs is the time to the next due unit, within these bounds."""
RETRY_DELAY_MS = 100
"""Wait before retrying a failed put (RocketMQ 5.x retries the same unit after 100 ms)."""
LATENESS_SAMPLES_MAX = 100_000
"""How many of the latest ``now - deliver time`` values ``lateness_ms_samples`` keeps."""
"""A delayed message aimed here is discarded (RocketMQ ``ScheduleMessageService``)."""

_CLEARED_ON_DELIVERY = (PROPERTY_DELAY, PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC,
                        PROPERTY_TIMER_DELAY_MS)
_DELIVERABLE_TRANSACTION_TYPES = (SYSFLAG_TRANSACTION_NOT, SYSFLAG_TRANSACTION_COMMIT)


# --------------------------------------------------------------------------------------------
# Pure helpers: divert on send, rebuild on delivery
# --------------------------------------------------------------------------------------------

def delay_level(message: Message, levels_ms: tuple[int, ...]) -> int:
    """The level (clamped to ``levels_ms``) a send of ``message`` is delayed by, 0 when it is
    not delayed: no ``DELAY`` property, a value that is not an integer >= 1, or a
    prepared/rollback transaction message."""
    if not levels_ms:
        raise ConfigError("delay.levels_ms is empty: no level to schedule a DELAY message on")
    raw_level = (message.properties or {}).get(PROPERTY_DELAY)
    if raw_level is None:
        return 0
    try:
        level = int(raw_level)
    except (TypeError, ValueError):
        return 0
    if level < 1:
        return 0
    if message.sys_flag & SYSFLAG_TRANSACTION_MASK not in _DELIVERABLE_TRANSACTION_TYPES:
        return 0
    return min(level, len(levels_ms))


def schedule_delayed(message: Message, queue_id: int, levels_ms: tuple[int, ...]
                     ) -> tuple[Message, int, int] | None:
    """Divert a delayed message to ``SCHEDULE_TOPIC_XXXX``.

    Returns ``(schedule message, schedule queue id = level - 1, clamped level)``, or None when
    the message is not delayed (``delay_level`` 0). The input is never modified; the copy
    carries all fields (tags, keys and unique key stay attributes) and properties extended by
    ``REAL_TOPIC``, ``REAL_QID`` and the clamped ``DELAY``.
    """
    level = delay_level(message, levels_ms)
    if not level:
        return None
    properties = dict(message.properties or {})
    properties[PROPERTY_REAL_TOPIC] = message.topic
    properties[PROPERTY_REAL_QID] = str(queue_id)
    properties[PROPERTY_DELAY] = str(level)
    keys = message.keys if message.keys is None or isinstance(message.keys, str) else list(
        message.keys)
    diverted = Message(
        DELAY_TOPIC, message.body, tags=message.tags, keys=keys, properties=properties,
        unique_key=message.unique_key, flag=message.flag,
        born_timestamp_ms=message.born_timestamp_ms, born_host=message.born_host,
        reconsume_count=message.reconsume_count, sys_flag=message.sys_flag)
    return diverted, level - 1, level


def delivery_for(view: MessageView) -> tuple[Message, int]:
    """The message a stored delay record becomes, and its real queue id.

    Raises:
        InvalidMessageError: the record is not a deliverable delay message (no or invalid
            ``REAL_TOPIC``/``REAL_QID``, or aimed at the transaction half topic).
    """
    properties = dict(view.properties)
    real_topic = properties.get(PROPERTY_REAL_TOPIC)
    real_qid = properties.get(PROPERTY_REAL_QID)
    where = f"delay record at position={view.log_position}"
    if not real_topic or real_qid is None:
        raise InvalidMessageError(f"{where} has no {PROPERTY_REAL_TOPIC}/{PROPERTY_REAL_QID}")
    if real_topic == TRANSACTION_HALF_TOPIC:
        raise InvalidMessageError(f"{where} targets the transaction half topic: discarded",
                                  topic=real_topic)
    validate_topic(real_topic)
    try:
        queue_id = int(real_qid)
    except ValueError as error:
        raise InvalidMessageError(f"{where} has {PROPERTY_REAL_QID}={real_qid!r}, not an "
                                  "integer", topic=real_topic) from error
    for name in _CLEARED_ON_DELIVERY:
        properties.pop(name, None)
    keys = properties.pop(PROPERTY_KEYS, None)
    tags = properties.pop(PROPERTY_TAGS, None)
    unique_key = properties.pop(PROPERTY_UNIQ_KEY, None)
    properties[PROPERTY_WAIT] = "false"
    born_ms = view.born_timestamp_ms
    message = Message(
        real_topic, view.body, tags=tags, keys=keys, properties=properties,
        unique_key=unique_key, flag=view.flag,
        born_timestamp_ms=born_ms if born_ms >= 0 else None, born_host=str(view.born_host),
        reconsume_count=max(0, view.reconsume_count), sys_flag=view.sys_flag)
    return message, queue_id


class _Units(Protocol):
    """The part of a ``ConsumeQueue`` this service reads."""

    @property
    def min_offset(self) -> int: ...

    @property
    def max_offset(self) -> int: ...

    def read_units(self, offset: int, max_count: int) -> list[tuple[int, int, int]]: ...


def _due_units(queue: _Units, offset: int, count: int
               ) -> Iterator[tuple[int, tuple[int, int, int]]]:
    """``(offset, (log position, size, tag code))`` for up to ``count`` units from ``offset``."""
    end = min(queue.max_offset, offset + count)
    while offset < end:
        units = queue.read_units(offset, end - offset)
        if not units:
            return
        for unit in units:
            yield offset, unit
            offset += 1


class _Outcome(enum.Enum):
    DELIVERED = "delivered"
    SKIPPED = "skipped"
    FAILED = "failed"


# --------------------------------------------------------------------------------------------
# The service
# --------------------------------------------------------------------------------------------

class DelayService(Service):
    """Delivers due messages of every delay level to their real topic."""

    name = "delay"
    interval_ms = WAIT_MAX_MS

    def __init__(self, store: MessageStore, delay_offsets: DelayOffsetTable,
                 levels_ms: tuple[int, ...], clock: Clock) -> None:
        super().__init__(clock)
        if not levels_ms or any(type(delay) is not int or delay < 0 for delay in levels_ms):
            raise ConfigError(f"delay.levels_ms must be non-negative integers, got {levels_ms!r}")
        self._store = store
        self._offsets = delay_offsets
        self.levels_ms = tuple(levels_ms)
        self._cursors: dict[int, int] = {}
        self._failing: set[int] = set()  # levels whose last put failed (logged once)
        self._lateness_ms: deque[int] = deque(maxlen=LATENESS_SAMPLES_MAX)
        self._lateness_lock = threading.Lock()
        self._run_lock = threading.Lock()
        self.delivered_count = 0
        self.skipped_count = 0
        self.load()

    def load(self) -> None:
        """Set every level's cursor from the table, clamped into its queue (correctDelayOffset).

        A level never saved starts at its queue's min offset (0 for a queue not created yet).
        A corrected offset is written back to the table.
        """
        for level in range(1, len(self.levels_ms) + 1):
            queue = self._store.queues.get(DELAY_TOPIC, level - 1)
            low, high = (queue.min_offset, queue.max_offset) if queue else (0, 0)
            saved = self._offsets.get(level)
            if saved is None:
                self._cursors[level] = low
                continue
            cursor = min(max(saved, low), high)
            if cursor != saved:
                log.warning("[delay] level=%d: saved offset %d outside %s/%d [%d, %d], "
                            "corrected to %d", level, saved, DELAY_TOPIC, level - 1, low, high,
                            cursor)
                self._offsets.set(level, cursor)
            self._cursors[level] = cursor

    # ---- the run -----------------------------------------------------------------------------

    def run_once(self, now_ms: int) -> int:
        """Deliver what is due on every level (bounded); return how many were delivered.

        Also sets the thread's next wait to the time until the earliest possible due unit.
        """
        delivered = 0
        next_due_ms = now_ms + WAIT_MAX_MS
        try:
            with self._run_lock:
                for level in range(1, len(self.levels_ms) + 1):
                    count, due_ms = self._run_level(level, now_ms)
                    delivered += count
                    next_due_ms = min(next_due_ms, due_ms)
        except StoreClosedError:
            log.warning("[delay] store is closed: nothing delivered (stop the delay service "
                        "before closing the store)")
            next_due_ms = now_ms + WAIT_MAX_MS
        self.interval_ms = min(max(next_due_ms - now_ms, WAIT_MIN_MS), WAIT_MAX_MS)
        return delivered

    def _run_level(self, level: int, now_ms: int) -> tuple[int, int]:
        """Deliver due units of one level; returns (delivered, when the level may next be due)."""
        delay_ms = self.levels_ms[level - 1]
        queue = self._store.queues.get(DELAY_TOPIC, level - 1)
        if queue is None:
            return 0, now_ms + delay_ms
        cursor = self._correct_cursor(level, queue)
        delivered = 0
        for offset, (position, size, tag_code) in _due_units(queue, cursor, DELIVER_BATCH_MAX):
            deliver_ms = tag_code if tag_code <= now_ms + delay_ms else now_ms  # clock skew
            if deliver_ms > now_ms:
                return delivered, deliver_ms
            outcome = self._deliver_unit(level, offset, position, size)
            if outcome is _Outcome.FAILED:
                return delivered, now_ms + RETRY_DELAY_MS
            self._advance(level, offset + 1)
            if outcome is _Outcome.DELIVERED:
                delivered += 1
                with self._lateness_lock:
                    self._lateness_ms.append(now_ms - deliver_ms)
        if self._cursors[level] < queue.max_offset:
            return delivered, now_ms  # the batch limit stopped us: come back at once
        return delivered, now_ms + delay_ms

    def _correct_cursor(self, level: int, queue: _Units) -> int:
        cursor = self._cursors[level]
        low, high = queue.min_offset, queue.max_offset
        if low <= cursor <= high:
            return cursor
        corrected = min(max(cursor, low), high)
        log.warning("[delay] level=%d: offset %d outside %s/%d [%d, %d], reset to %d", level,
                    cursor, DELAY_TOPIC, level - 1, low, high, corrected)
        self._advance(level, corrected)
        return corrected

    def _advance(self, level: int, offset: int) -> None:
        self._cursors[level] = offset
        self._offsets.set(level, offset)

    def _deliver_unit(self, level: int, offset: int, position: int, size: int) -> _Outcome:
        """Read, rebuild and put one due unit's message."""
        if size == FILLER_UNIT_SIZE and position == 0:
            return _Outcome.SKIPPED
        where = f"level={level} offset={offset} position={position}"
        if position < self._store.commit_log.min_position:
            log.warning("[delay] %s: record already deleted by retention, skipped", where)
            self.skipped_count += 1
            return _Outcome.SKIPPED
        try:
            view = self._store.read_message(position)
            if view.store_size != size or view.topic != DELAY_TOPIC:
                raise CorruptionError(f"record is {view.store_size} bytes of {view.topic!r}, "
                                      f"the unit says {size} bytes of {DELAY_TOPIC}",
                                      log_position=position)
            message, queue_id = delivery_for(view)
        except (CorruptionError, MessageNotFoundError, InvalidMessageError) as error:
            log.error("[delay] %s: not a deliverable delay message, skipped: %s", where, error)
            self.skipped_count += 1
            return _Outcome.SKIPPED
        return self._put(level, where, message, queue_id)

    def _put(self, level: int, where: str, message: Message, queue_id: int) -> _Outcome:
        target = f"{message.topic}/{queue_id}"
        try:
            self._store.put_message(message, queue_id)
        except InvalidMessageError as error:  # nothing written; can never succeed
            log.error("[delay] %s: %s rejected the message, skipped: %s", where, target, error)
            self.skipped_count += 1
            return _Outcome.SKIPPED
        except Exception as error:  # any other put failure is retried: nothing is dropped
            if level not in self._failing:
                self._failing.add(level)
                log.error("[delay] %s: put to %s failed, retrying every %d ms: %s", where,
                          target, RETRY_DELAY_MS, error)
            return _Outcome.FAILED
        if level in self._failing:
            self._failing.discard(level)
            log.warning("[delay] level=%d: delivering again (%s to %s)", level, where, target)
        self.delivered_count += 1
        return _Outcome.DELIVERED

    # ---- introspection -----------------------------------------------------------------------

    def cursor(self, level: int) -> int:
        """The next ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1`` offset to deliver."""
        return self._cursors[level]

    def cursors(self) -> dict[int, int]:
        """A copy of ``{level: next offset}``."""
        return dict(self._cursors)

    def pending_count(self) -> int:
        """Units not yet delivered, across levels (due or not)."""
        total = 0
        for level, cursor in list(self._cursors.items()):
            queue = self._store.queues.get(DELAY_TOPIC, level - 1)
            if queue is not None:
                total += max(0, queue.max_offset - cursor)
        return total

    def next_deliver_ms(self) -> int | None:
        """When the earliest undelivered unit across levels is due (None when none is pending).

        The same clock-skew rule as ``run_once`` applies against ``clock.now_ms()``; a value at
        or before now means a run would deliver (or retry) something at once.
        """
        now_ms = self.clock.now_ms()
        earliest: int | None = None
        for level, cursor in list(self._cursors.items()):
            queue = self._store.queues.get(DELAY_TOPIC, level - 1)
            if queue is None:
                continue
            head = max(cursor, queue.min_offset)
            units = queue.read_units(head, 1) if head < queue.max_offset else []
            if not units:
                continue
            position, size, tag_code = units[0]
            due_ms = tag_code
            if (size == FILLER_UNIT_SIZE and position == 0) or (
                    tag_code > now_ms + self.levels_ms[level - 1]):
                due_ms = now_ms
            earliest = due_ms if earliest is None else min(earliest, due_ms)
        return earliest

    def lateness_ms_samples(self) -> list[int]:
        """``now - deliver time`` of the latest delivered messages (at most
        ``LATENESS_SAMPLES_MAX``), oldest first."""
        with self._lateness_lock:
            return list(self._lateness_ms)


__all__ = ["DelayService", "delay_level", "delivery_for", "schedule_delayed"]
