"""``HalfMessages``: transactional (half) messages as RocketMQ 5 keeps them in its store.

A half message is stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 (consumers never read it) with
the topic and queue it was sent to in ``REAL_TOPIC``/``REAL_QID``, ``TRAN_MSG=true``, ``PGROUP``
(the producer group) and ``__transactionId__`` (its ``UNIQ_KEY``); its SYSFLAG transaction bits
are cleared, as RocketMQ's ``TransactionalMessageBridge`` does, so the half topic's consume queue
indexes it. Ending its transaction (``end``):

* commit: the message is written to its real topic and queue (through the delay topic when it
  carries ``DELAY``) with SYSFLAG type COMMIT (0x8), PREPARED TRANSACTION OFFSET = the half's
  commit-log position, and ``REAL_TOPIC``, ``REAL_QID`` and ``TRAN_MSG`` removed (RocketMQ
  removes the first two from the message but serializes the properties before it does, so its
  record keeps them; a committed message is not a half, so Postbox stores it without them);
* commit and rollback alike: an op record in ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0, tag ``d``,
  whose body lists the half's queue offsets, each followed by a comma (RocketMQ 5's op body,
  ``"12,"``; RocketMQ 4 wrote ``"12"``, which the reader here accepts too). A rollback's (and a
  discard's) is written at once. Commits' are gathered, as RocketMQ 5 gathers all of them
  (``transactionOpBatchInterval``, 3 s there): one op record lists the commits of up to
  ``broker.transaction_op_batch_interval_ms`` (100 ms) or ``OP_BODY_MAX`` bytes of offsets,
  written by the check service (``write_gathered_ops``) and when it stops. A crash loses the
  gathered list, never a commit's effect: at recovery a half found pending whose committed
  message is stored (a record of its ``UNIQ_KEY`` in its real topic, or the delay or timer
  topic it asked for, after the half) is ended by an op record written then, so it is neither
  checked nor committed twice. A rollback leaves nothing to find, hence its op at once.

A check (``transaction_check``) writes a copy of the half at the end of the half queue with
``TRANSACTION_CHECK_TIMES`` one higher (RocketMQ's ``putBackHalfMsgQueue``); the copy replaces
the original, and an end naming either copy ends the transaction (the op lists both offsets), so
a late answer to an earlier copy never commits twice. An end naming no pending half, one of
another producer group or queue offset, or one already ended raises ``TransactionStateError``
(RocketMQ answers SYSTEM_ERROR; it commits an already-committed half again, Postbox refuses).

Recovery (``recover``, at open): the ops from the op progress offset on name the ended halves;
the halves from the half progress offset on, less those, are pending again, each the latest copy
of its transaction. Both offsets are consumer offsets of ``CID_RMQ_SYS_TRANS`` (as RocketMQ),
advanced by ``progress`` past what no later recovery needs and persisted with the other offsets.

Thread-safety: every method may be called from any thread (one lock over the pending table;
stores are written outside it except a check's copy).
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable, Iterator, Mapping

from ..config import BrokerConfig
from ..contract.message import Message, PutResult
from ..contract.model import SendResult
from ..contract.transactions import HalfReceipt, TransactionState
from ..errors import (
    CorruptionError,
    MessageNotFoundError,
    StorageError,
    TransactionEndedError,
    TransactionStateError,
)
from ..formats import PROPERTY_REAL_QID, PROPERTY_REAL_TOPIC, MessageView
from ..formats.constants import (
    PROPERTY_DELAY,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_MASK,
)
from ..formats.topic_names import (
    DELAY_TOPIC,
    TIMER_TOPIC,
    TRANSACTION_GROUP,
    TRANSACTION_HALF_TOPIC,
    TRANSACTION_OP_TOPIC,
)
from ..store.message_store import MessageStore
from .config_stores import ConsumerOffsetTable
from .pending_halves import PendingHalf, PendingHalves

log = logging.getLogger(__name__)

PROPERTY_TRAN_MSG = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
OP_REMOVE_TAG = "d"
HALF_ONLY_PROPERTIES = (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QID, PROPERTY_TRAN_MSG)
"""Removed from a committed message."""
_READ_BATCH = 32
OP_BODY_MAX = 4096
"""Bytes of offsets one gathered op record lists at most (``transactionOpMsgMaxSize``)."""
_FIELD_PROPERTIES = frozenset({"KEYS", "TAGS", "UNIQ_KEY"})

Put = Callable[[Message, int], SendResult]
"""Stores a message in a queue of its topic (the broker's put: delay levels apply)."""


def transaction_key(view: MessageView) -> str:
    """What identifies a half's transaction across its copies: its transaction id, else its
    ``UNIQ_KEY``, else the position of this copy."""
    properties = view.properties
    return (properties.get(PROPERTY_TRANSACTION_ID) or properties.get("UNIQ_KEY")
            or f"@{view.log_position}")


def half_message(message: Message, queue_id: int, producer_group: str) -> Message:
    """The half a transactional send of ``message`` to ``queue_id`` stores."""
    properties = dict(message.properties or {})
    properties[PROPERTY_TRAN_MSG] = "true"
    properties[PROPERTY_PRODUCER_GROUP] = producer_group
    if message.unique_key:
        properties[PROPERTY_TRANSACTION_ID] = message.unique_key
    properties[PROPERTY_REAL_TOPIC] = message.topic
    properties[PROPERTY_REAL_QID] = str(queue_id)
    return Message(TRANSACTION_HALF_TOPIC, message.body, tags=message.tags, keys=message.keys,
                   properties=properties, unique_key=message.unique_key, flag=message.flag,
                   born_timestamp_ms=message.born_timestamp_ms, born_host=message.born_host,
                   reconsume_count=message.reconsume_count,
                   sys_flag=message.sys_flag & ~SYSFLAG_TRANSACTION_MASK)


def stored_copy(view: MessageView, topic: str, properties: dict[str, str], *,
                sys_flag: int | None = None, prepared_position: int = 0) -> Message:
    """A new record of the stored ``view`` in ``topic`` (same body, tags, keys, ``UNIQ_KEY``,
    flag, born time and host, reconsume count) with ``properties`` (those of ``view``, changed;
    ``KEYS``, ``TAGS`` and ``UNIQ_KEY`` among them are ignored: the fields say them)."""
    kept = {name: value for name, value in properties.items() if name not in _FIELD_PROPERTIES}
    return Message(topic, view.body, tags=view.tags, keys=view.keys or None, properties=kept,
                   unique_key=view.unique_key, flag=view.flag,
                   born_timestamp_ms=view.born_timestamp_ms, born_host=str(view.born_host),
                   reconsume_count=view.reconsume_count,
                   sys_flag=(view.sys_flag if sys_flag is None else sys_flag) & ~0x30,
                   prepared_transaction_position=prepared_position)


def committed_message(view: MessageView) -> tuple[Message, int]:
    """The message a commit of the half ``view`` writes, and its real queue id."""
    properties = dict(view.properties)
    topic = properties.get(PROPERTY_REAL_TOPIC)
    queue = properties.get(PROPERTY_REAL_QID, "")
    if not topic or not queue.isdigit():
        raise TransactionStateError(f"half message at {view.log_position} has no "
                                    f"{PROPERTY_REAL_TOPIC}/{PROPERTY_REAL_QID}")
    for name in HALF_ONLY_PROPERTIES:
        properties.pop(name, None)
    sys_flag = (view.sys_flag & ~SYSFLAG_TRANSACTION_MASK) | SYSFLAG_TRANSACTION_COMMIT
    return (stored_copy(view, topic, properties, sys_flag=sys_flag,
                        prepared_position=view.log_position), int(queue))


def _op_body_bytes(offsets: list[int]) -> int:
    """The bytes ``offsets`` take in an op record's body (``"12,"`` each)."""
    return sum(len(str(offset)) + 1 for offset in offsets)


def op_offsets(body: bytes) -> list[int]:
    """The half queue offsets an op record's body lists (``"12,13,"`` or ``"12"``)."""
    offsets = []
    for part in body.decode("utf-8", "replace").split(","):
        part = part.strip()
        if part.isdigit():
            offsets.append(int(part))
    return offsets


class HalfMessages:
    """The half and op topics of one store, and the pending halves."""

    def __init__(self, store: MessageStore, offsets: ConsumerOffsetTable,
                 config: BrokerConfig, put: Put) -> None:
        self._store = store
        self._offsets = offsets
        self._config = config
        self._put = put
        self._lock = threading.Lock()
        self._pending = PendingHalves()
        self._ops: list[tuple[int, int]] = []  # (op queue offset, highest half offset listed)
        self._op_start = 0
        self._committed: tuple[int, int] = (0, 0)  # the progress offsets last committed
        self._gathered: list[int] = []  # half offsets of commits whose op is not written yet
        self._gathered_bytes = 0
        self._gathered_since_ms = 0
        self._op_write_lock = threading.Lock()  # one gathered op record written at a time
        self.on_gathering: Callable[[], object] = lambda: None
        """Called when a commit starts a new gathered op record (the check service's wakeup)."""

    # ---- reading the topics ------------------------------------------------------------------

    def _read(self, topic: str, start: int) -> Iterator[MessageView]:
        offset = max(start, self._store.min_offset(topic, 0))
        while True:
            result = self._store.get_message(TRANSACTION_GROUP, topic, 0, offset, _READ_BATCH)
            if not result.messages:
                return
            yield from result.messages
            offset = result.next_offset

    def recover(self) -> int:
        """Find the pending halves again from the half and op topics; return how many."""
        self._store.wait_dispatched()
        half_start = self._offsets.query(TRANSACTION_HALF_TOPIC, TRANSACTION_GROUP, 0) or 0
        self._op_start = self._offsets.query(TRANSACTION_OP_TOPIC, TRANSACTION_GROUP, 0) or 0
        self._committed = (half_start, self._op_start)
        ended: set[int] = set()
        ops = []
        for view in self._read(TRANSACTION_OP_TOPIC, self._op_start):
            listed = op_offsets(view.body)
            ended.update(listed)
            ops.append((view.queue_offset, max(listed, default=-1)))
        latest: dict[str, MessageView] = {}
        ended_keys: set[str] = set()
        for view in self._read(TRANSACTION_HALF_TOPIC, half_start):
            key = transaction_key(view)
            if view.queue_offset in ended:
                ended_keys.add(key)
            latest[key] = view
        found = [view for key, view in latest.items() if key not in ended_keys]
        committed = [view for view in found if self._committed_before(view)]
        ended_now = {view.log_position for view in committed}
        with self._lock:
            self._ops = sorted(ops)
            for view in found:
                if view.log_position not in ended_now:
                    self._add(view)
            count = len(self._pending)
        if committed:
            self._write_op(sorted(view.queue_offset for view in committed))
            log.info("[transactions] %d half messages committed before the restart, their op "
                     "records not yet written: ended now", len(committed))
        if count:
            log.info("[transactions] %d pending half messages recovered", count)
        return count

    def _committed_before(self, half: MessageView) -> bool:
        """Whether the committed message of ``half`` is stored (its op record, gathered, was
        lost): a record of its ``UNIQ_KEY`` after it in its real topic, or in the delay or
        timer topic when it asked for a delay."""
        key, properties = half.unique_key, half.properties
        if not key:
            return False
        topics = [properties.get(PROPERTY_REAL_TOPIC, "")]
        if PROPERTY_DELAY in properties or any(name.startswith("TIMER_") for name in properties):
            topics += [DELAY_TOPIC, TIMER_TOPIC]
        return any(view.log_position > half.log_position
                   for topic in topics if topic
                   for view in self._store.query_by_unique_key(topic, key))

    def _first_due_ms(self, born_ms: int, properties: Mapping[str, str]) -> int:
        immunity_ms = self._config.transaction_timeout_ms
        text = properties.get(PROPERTY_CHECK_IMMUNITY, "")
        if text.strip().isdigit():
            immunity_ms = max(immunity_ms, int(text) * 1000)
        return born_ms + immunity_ms

    def _add(self, view: MessageView) -> PendingHalf:
        """Record ``view`` as the latest copy of its transaction (under the lock)."""
        text = view.properties.get(PROPERTY_CHECK_TIMES, "0")
        times = int(text) if text.isdigit() else 0
        due_ms = (view.store_timestamp_ms + self._config.transaction_check_interval_ms if times
                  else self._first_due_ms(view.born_timestamp_ms, view.properties))
        return self._add_half(PendingHalf(view.queue_offset, view.log_position,
                                          transaction_key(view),
                                          view.properties.get(PROPERTY_PRODUCER_GROUP, ""),
                                          due_ms, times))

    def _add_half(self, half: PendingHalf) -> PendingHalf:
        """Record ``half`` as the latest copy of its transaction (under the lock)."""
        self._pending.put(half)
        return half

    # ---- half send and end -------------------------------------------------------------------

    def prepare(self, message: Message, queue_id: int, producer_group: str) -> PutResult:
        """Store the half of ``message`` (sent to ``queue_id``); it is pending from now on."""
        result = self._store.put_message(half_message(message, queue_id, producer_group), 0)
        born_ms = (result.store_timestamp_ms if message.born_timestamp_ms is None
                   else message.born_timestamp_ms)
        half = PendingHalf(result.queue_offset, result.log_position,
                           message.unique_key or f"@{result.log_position}", producer_group,
                           self._first_due_ms(born_ms, message.properties or {}), 0)
        with self._lock:
            self._add_half(half)
        return result

    def end(self, receipt: HalfReceipt, state: TransactionState) -> SendResult | None:
        """Commit or roll back the half ``receipt`` names; the committed message's result
        (None for a rollback, or for ``UNKNOWN``, which changes nothing).

        Raises:
            TransactionStateError: no pending half matches ``receipt`` (nothing written).
        """
        if state is TransactionState.UNKNOWN:
            return None
        view, half, listed = self._take(receipt)
        try:
            result = None
            if state is TransactionState.COMMIT:
                message, queue_id = committed_message(view)
                result = self._put(message, queue_id)
            else:
                self._write_op(listed)
        except BaseException:
            with self._lock:  # nothing ended: the half stays pending
                if self._pending.of_key(half.key) is None:
                    self._pending.put(half)
            raise
        if result is not None:
            self._gather_op(listed)
        # DEBUG: a line per message (as a normal send has none) cost more than the end itself
        log.debug("[transactions] %s %s of group %s (half %d)", state.name.lower(),
                 view.unique_key or half.key, half.producer_group, half.queue_offset)
        return result

    def _take(self, receipt: HalfReceipt) -> tuple[MessageView, PendingHalf, list[int]]:
        """Remove the pending half ``receipt`` names; its record, entry and the op offsets."""
        view = self._half_record(receipt.log_position)
        group = view.properties.get(PROPERTY_PRODUCER_GROUP)
        if group != receipt.producer_group:
            raise TransactionStateError(f"The producer group wrong: the half message at "
                                        f"{receipt.log_position} is of group {group!r}")
        if view.queue_offset != receipt.queue_offset:
            raise TransactionStateError(f"The transaction state table offset wrong: the half "
                                        f"message at {receipt.log_position} has queue offset "
                                        f"{view.queue_offset}, not {receipt.queue_offset}")
        with self._lock:
            half = self._pending.of_key(transaction_key(view))
            if half is None:
                raise TransactionEndedError(
                    f"the transaction of the half message at {receipt.log_position} "
                    f"({view.unique_key}) already ended: nothing to commit or roll back")
            self._pending.remove(half)
        if half.log_position != view.log_position:
            view = self._half_record(half.log_position)
        return view, half, sorted({receipt.queue_offset, half.queue_offset})

    def _half_record(self, position: int) -> MessageView:
        try:
            view = self._store.read_message(position)
        except (MessageNotFoundError, CorruptionError) as error:
            raise TransactionStateError(f"Find prepared transaction message failed: "
                                        f"{error}") from error
        if view.topic != TRANSACTION_HALF_TOPIC:
            raise TransactionStateError(f"Find prepared transaction message failed: the "
                                        f"record at {position} is in {view.topic}, not a half")
        return view

    def _write_op(self, offsets: list[int]) -> None:
        """One op record (tag ``d``) listing ``offsets`` of the half queue."""
        body = "".join(f"{offset}," for offset in offsets).encode("ascii")
        result = self._store.put_message(Message(TRANSACTION_OP_TOPIC, body,
                                                 tags=OP_REMOVE_TAG), 0)
        with self._lock:  # in op-queue order, which ``progress`` relies on
            bisect.insort(self._ops, (result.queue_offset, max(offsets)))

    def _gather_op(self, offsets: list[int]) -> None:
        """Add a commit's half offsets to the next gathered op record; write it when full."""
        with self._lock:
            first = not self._gathered
            if first:
                self._gathered_since_ms = self._store.clock.now_ms()
            self._gathered += offsets
            self._gathered_bytes += _op_body_bytes(offsets)
            full = self._gathered_bytes >= OP_BODY_MAX
        if first:
            self.on_gathering()
        if full:
            try:
                self.write_gathered_ops()
            except StorageError as error:  # the check service tries again: nothing is lost
                log.warning("[transactions] gathered op record not written: %s", error)

    def gathered_due_ms(self) -> int | None:
        """When the gathered op record is to be written (None: nothing gathered)."""
        with self._lock:
            if not self._gathered:
                return None
            return self._gathered_since_ms + self._config.transaction_op_batch_interval_ms

    def write_gathered_ops(self) -> int:
        """Write the op record of the commits gathered so far; how many offsets it lists.

        Raises:
            StorageError: the record could not be stored (the offsets stay gathered).
        """
        with self._op_write_lock:
            with self._lock:
                offsets, self._gathered, self._gathered_bytes = self._gathered, [], 0
                since_ms = self._gathered_since_ms
            if not offsets:
                return 0
            try:
                self._write_op(offsets)
            except BaseException:
                with self._lock:  # back in front, due as they were
                    self._gathered[:0] = offsets
                    self._gathered_bytes += _op_body_bytes(offsets)
                    self._gathered_since_ms = since_ms
                raise
            return len(offsets)

    # ---- for the check service ---------------------------------------------------------------

    def due(self, now_ms: int, limit: int) -> list[PendingHalf]:
        """Up to ``limit`` pending halves whose check time has come, earliest first."""
        with self._lock:
            return self._pending.due(now_ms, limit)

    def next_due_ms(self) -> int | None:
        """When the next pending half is due, or None when none is pending."""
        with self._lock:
            return self._pending.next_due_ms()

    def pending(self) -> list[PendingHalf]:
        """Every pending half (copies), by queue offset."""
        with self._lock:
            return sorted(self._pending, key=lambda half: half.queue_offset)

    def replace(self, half: PendingHalf, copy: Callable[[MessageView], Message | None]
                ) -> tuple[MessageView, PendingHalf | None] | None:
        """Replace the pending ``half`` by what ``copy`` makes of its record: a new half copy
        (stored in the half queue, pending in its place) or None (a discard: an op record ends
        it). None when ``half`` ended meanwhile; else the new copy's record (the old one's for
        a discard) and its entry."""
        with self._lock:
            if self._pending.at(half.log_position) is not half:
                return None
            view = self._store.read_message(half.log_position)
            replacement = copy(view)
            if replacement is None:
                self._pending.remove(half)
                new = None
            else:
                result = self._store.put_message(replacement, 0)
                view = self._store.read_message(result.log_position)
                new = self._add(view)
        if new is None:
            self._write_op([half.queue_offset])
        return view, new

    def progress(self) -> None:
        """Commit the half and op progress offsets past what recovery no longer needs."""
        with self._lock:
            lowest = self._pending.lowest_queue_offset()
            half_start = (self._store.max_offset(TRANSACTION_HALF_TOPIC, 0) if lowest is None
                          else lowest)
            skip = 0
            for _, highest in self._ops:
                if highest >= half_start:
                    break
                skip += 1
            if skip:
                self._op_start = self._ops[skip - 1][0] + 1
                del self._ops[:skip]
            op_start = self._op_start
            if (half_start, op_start) == self._committed:
                return  # nothing new (a broker without transactions commits nothing)
            self._committed = (half_start, op_start)
        self._offsets.commit(TRANSACTION_HALF_TOPIC, TRANSACTION_GROUP, 0, half_start)
        self._offsets.commit(TRANSACTION_OP_TOPIC, TRANSACTION_GROUP, 0, op_start)


__all__ = ["HalfMessages", "PendingHalf", "committed_message", "half_message", "op_offsets",
           "transaction_key"]
