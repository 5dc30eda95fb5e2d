"""The broker's transactions: ``Transactions`` (half messages, their ends and their checks),
``TransactionCheckService`` (RocketMQ's check-back) and ``TransactionalSends``, the part of
``Broker`` that serves them.

Check-back, as RocketMQ 5's ``TransactionalMessageCheckService``: a pending half message is
first checked ``broker.transaction_timeout_ms`` (``transactionTimeOut``, 6 s) after it was born —
later when its ``CHECK_IMMUNITY_TIME_IN_SECONDS`` asks for more — then every
``broker.transaction_check_interval_ms`` (``transactionCheckInterval``, 30 s). Each check
stores a copy of the half with ``TRANSACTION_CHECK_TIMES`` one higher and asks a producer of its
group (``PGROUP``) about that copy: a checker registered in this process for the group, else a
route of a network server (``add_route``: a remoting connection of the group gets
CHECK_TRANSACTION_STATE, a gRPC client a RecoverOrphanedTransactionCommand). The producer answers
by ending the transaction. A check nobody receives still counts, as in RocketMQ. A half already
checked ``broker.transaction_check_max`` times (``transactionCheckMax``, 15) is discarded when
its next check falls due: a copy goes to ``TRANS_CHECK_MAX_TIME_TOPIC`` queue 0 (properties
kept, ``REAL_TOPIC``/``REAL_QID`` included) and an op record ends it. ``resend_discarded``
commits such a copy to its real topic when an operator knows the transaction committed.

RocketMQ checks on a fixed 30 s pass; this service wakes when the earliest half falls due (at
least every second), so first checks come ``transactionTimeOut`` after birth, not up to a pass
later. Checkers run on the service thread: a slow one delays the other checks.

Thread-safety: as ``HalfMessages``; checkers may be added and removed from any thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..clock import Clock
from ..config import BrokerConfig
from ..contract.message import Message
from ..contract.model import PERM_READ_WRITE, SendResult
from ..contract.transactions import HalfReceipt, TransactionCheck, TransactionState
from ..errors import InvalidMessageError, MessageNotFoundError, StorageError
from ..formats import PROPERTY_REAL_QID, PROPERTY_REAL_TOPIC, MessageView
from ..formats.properties import encode_properties
from ..formats.record import encode_record_parts, uses_v2
from ..formats.topic_names import (
    TRANSACTION_CHECK_MAX_TIME_TOPIC,
    TRANSACTION_GROUP,
    TRANSACTION_HALF_TOPIC,
    TRANSACTION_OP_TOPIC,
)
from ..service import Service
from ..store.message_store import MessageStore
from .config_stores import ConsumerOffsetTable
from .transactions import (
    PROPERTY_CHECK_TIMES,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_ID,
    HalfMessages,
    PendingHalf,
    Put,
    committed_message,
    stored_copy,
)

log = logging.getLogger(__name__)

Checker = Callable[[TransactionCheck], object]
"""Asks a producer about one check (its answer comes later, as an end of the transaction)."""
Route = Callable[[TransactionCheck], bool]
"""Hands a check to a producer connected over a network; False when none of the group is."""
CHECK_BATCH = 64
IDLE_WAIT_MAX_MS = 1000


def restored_check(view: MessageView) -> TransactionCheck:
    """The check of the half copy ``view``: the record with its real topic and queue (and
    without the store's property CRC, which covered the stored topic and queue)."""
    properties = view.properties
    topic = properties.get(PROPERTY_REAL_TOPIC, view.topic)
    queue = properties.get(PROPERTY_REAL_QID, "0")
    topic_bytes = topic.encode("utf-8")
    record = encode_record_parts(
        topic_bytes, uses_v2(topic, topic_bytes), view.body, encode_properties(properties),
        int(queue) if queue.isdigit() else 0, view.flag, view.queue_offset, view.log_position,
        view.sys_flag, view.born_timestamp_ms, view.raw_born_host, view.store_timestamp_ms,
        view.raw_store_host, view.reconsume_count, view.prepared_transaction_position,
        view.body_crc)
    receipt = HalfReceipt(properties.get(PROPERTY_PRODUCER_GROUP, ""), view.queue_offset,
                          view.log_position, view.msg_id,
                          properties.get(PROPERTY_TRANSACTION_ID) or view.unique_key)
    return TransactionCheck(receipt, MessageView.decode(record, 0), record)


class TransactionCheckService(Service):
    """Checks the pending halves that fall due; discards those checked too often."""

    name = "transaction-check"

    def __init__(self, transactions: Transactions, clock: Clock) -> None:
        super().__init__(clock)
        self._transactions = transactions
        self.check_count = 0
        self.discard_count = 0
        self._backing_off = False

    def run_once(self, now_ms: int) -> int:
        """Write the gathered op record when its time came; check (or discard) up to
        ``CHECK_BATCH`` due halves; commit the progress offsets."""
        transactions = self._transactions
        gathered_due = transactions.halves.gathered_due_ms()
        if gathered_due is not None and gathered_due <= now_ms:
            try:
                transactions.halves.write_gathered_ops()
            except StorageError as error:  # kept gathered, written on a later pass
                log.warning("[transactions] gathered op record not written: %s", error)
                self._backing_off = True
                return 0
        due = transactions.halves.due(now_ms, CHECK_BATCH)
        for half in due:
            try:
                self._check(half)
            except StorageError as error:  # e.g. a full disk: the half stays due, tried again
                log.warning("[transactions] check of the half at %d failed: %s",
                            half.log_position, error)
                self._backing_off = True  # the loop waits IDLE_WAIT_MAX_MS before the next pass
                return 0
        transactions.halves.progress()
        return len(due)

    def _check(self, half: PendingHalf) -> None:
        transactions = self._transactions
        if half.check_times >= transactions.config.transaction_check_max:
            if transactions.halves.replace(half, transactions.discard) is not None:
                self.discard_count += 1
            return
        replaced = transactions.halves.replace(half, _next_copy)
        if replaced is None:  # ended meanwhile
            return
        self.check_count += 1
        transactions.deliver(restored_check(replaced[0]))

    def idle_wait_ms(self, now_ms: int) -> int:
        """Until the earliest half falls due or the gathered op record is to be written, at
        most ``IDLE_WAIT_MAX_MS``."""
        halves = self._transactions.halves
        moments = [m for m in (halves.next_due_ms(), halves.gathered_due_ms()) if m is not None]
        if not moments or self._backing_off:
            self._backing_off = False
            return IDLE_WAIT_MAX_MS
        return max(1, min(min(moments) - now_ms, IDLE_WAIT_MAX_MS))

    def stop(self, timeout_ms: int = 10_000) -> None:
        """Stop the thread, then write the gathered op record (a store already closed or
        failing keeps it unwritten: the next recovery finds those commits)."""
        super().stop(timeout_ms)
        try:
            self._transactions.halves.write_gathered_ops()
        except StorageError as error:
            log.warning("[transactions] gathered op record not written at stop: %s", error)


def _next_copy(view: MessageView) -> Message:
    """The copy a check stores: ``TRANSACTION_CHECK_TIMES`` one higher."""
    properties = dict(view.properties)
    text = properties.get(PROPERTY_CHECK_TIMES, "0")
    properties[PROPERTY_CHECK_TIMES] = str((int(text) if text.isdigit() else 0) + 1)
    return stored_copy(view, TRANSACTION_HALF_TOPIC, properties)


class Transactions:
    """Half messages, their ends, their checks and the checkers of one broker."""

    def __init__(self, store: MessageStore, offsets: ConsumerOffsetTable,
                 config: BrokerConfig, clock: Clock, put: Put,
                 ensure_topic: Callable[[str, int, int], object]) -> None:
        self.config = config
        self._store = store
        self._put = put
        self._ensure_topic = ensure_topic
        self.halves = HalfMessages(store, offsets, config, put)
        self.check_service = TransactionCheckService(self, clock)
        self.halves.on_gathering = self.check_service.wakeup
        self._lock = threading.Lock()
        self._checkers: dict[str, list[Checker]] = {}
        self._routes: list[Route] = []

    def send_half(self, message: Message, queue_id: int, producer_group: str) -> SendResult:
        """Store the half of ``message`` (for ``queue_id`` of its topic)."""
        if not producer_group:
            raise InvalidMessageError("a transactional message needs its producer group",
                                      topic=message.topic)
        self._ensure_topic(TRANSACTION_HALF_TOPIC, 1, PERM_READ_WRITE)
        # the op topic too (Apache creates it with its first op record): both are in the topic
        # table, so a name server routes them and a remote reader can follow the halves
        self._ensure_topic(TRANSACTION_OP_TOPIC, 1, PERM_READ_WRITE)
        result = self.halves.prepare(message, queue_id, producer_group)
        return SendResult(
            topic=message.topic, queue_id=queue_id, stored_topic=result.topic,
            stored_queue_id=result.queue_id, queue_offset=result.queue_offset,
            log_position=result.log_position, offset_msg_id=result.msg_id,
            unique_key=message.unique_key, store_timestamp_ms=result.store_timestamp_ms,
            delay_level=0, status=result.status)

    def end(self, receipt: HalfReceipt, state: TransactionState) -> SendResult | None:
        """``HalfMessages.end``."""
        return self.halves.end(receipt, state)

    # ---- checkers ----------------------------------------------------------------------------

    def register(self, producer_group: str, checker: Checker) -> None:
        """Ask ``checker`` about the halves of ``producer_group`` (a producer in this process)."""
        with self._lock:
            self._checkers.setdefault(producer_group, []).append(checker)

    def unregister(self, producer_group: str, checker: Checker) -> None:
        """Stop asking ``checker``."""
        with self._lock:
            checkers = self._checkers.get(producer_group, [])
            if checker in checkers:
                checkers.remove(checker)
            if not checkers:
                self._checkers.pop(producer_group, None)

    def add_route(self, route: Route) -> None:
        """Offer checks to producers connected over a network (a server's)."""
        with self._lock:
            self._routes.append(route)

    def remove_route(self, route: Route) -> None:
        """Stop offering checks to ``route``."""
        with self._lock:
            if route in self._routes:
                self._routes.remove(route)

    def deliver(self, check: TransactionCheck) -> bool:
        """Hand ``check`` to one producer of its group; False when none was reachable."""
        group = check.receipt.producer_group
        with self._lock:
            checkers = list(self._checkers.get(group, ()))
            routes = list(self._routes)
        try:
            if checkers:
                checkers[0](check)
                return True
            if any(route(check) for route in routes):
                return True
        except Exception:  # a checker's failure is a check unanswered, not a stopped service
            log.exception("[transactions] check of %s (group %s) failed",
                          check.receipt.transaction_id, group)
            return False
        log.info("[transactions] no producer of group %s to check %s", group,
                 check.receipt.transaction_id)
        return False

    # ---- discarded halves --------------------------------------------------------------------

    def discard(self, view: MessageView) -> None:
        """Keep a half checked too often in ``TRANS_CHECK_MAX_TIME_TOPIC`` (``replace`` then
        ends it with an op record)."""
        self._ensure_topic(TRANSACTION_CHECK_MAX_TIME_TOPIC, 1, PERM_READ_WRITE)
        self._store.put_message(stored_copy(view, TRANSACTION_CHECK_MAX_TIME_TOPIC,
                                            dict(view.properties)), 0)
        log.warning("[transactions] %s of group %s discarded after %s checks: kept in %s",
                    view.unique_key, view.properties.get(PROPERTY_PRODUCER_GROUP),
                    view.properties.get(PROPERTY_CHECK_TIMES, "0"),
                    TRANSACTION_CHECK_MAX_TIME_TOPIC)

    def discarded(self, offset: int = 0, max_count: int = 32) -> list[MessageView]:
        """The discarded halves from ``offset`` of ``TRANS_CHECK_MAX_TIME_TOPIC`` queue 0."""
        start = max(offset, self._store.min_offset(TRANSACTION_CHECK_MAX_TIME_TOPIC, 0))
        return self._store.get_message(TRANSACTION_GROUP, TRANSACTION_CHECK_MAX_TIME_TOPIC, 0,
                                       start, max_count).messages

    def resend_discarded(self, queue_offset: int) -> SendResult:
        """Commit the discarded half at ``queue_offset`` to its real topic and queue (an
        operator who learned that its transaction committed).

        Raises:
            MessageNotFoundError: no discarded half at ``queue_offset``.
        """
        found = self.discarded(queue_offset, 1)
        if not found or found[0].queue_offset != queue_offset:
            raise MessageNotFoundError(f"{TRANSACTION_CHECK_MAX_TIME_TOPIC} queue 0 has no "
                                       f"message at offset {queue_offset}")
        message, queue_id = committed_message(found[0])
        return self._put(message, queue_id)


class TransactionalSends:
    """``Broker``'s transactional sends (mixed into ``Broker``, which provides the names
    declared here)."""

    transactions: Transactions

    def _check_open(self) -> None:
        raise NotImplementedError

    def _check_master(self) -> None:
        raise NotImplementedError

    def _send_queue(self, message: Message, queue_id: int | None,
                    sharding_key: str | None) -> int:
        raise NotImplementedError

    def send_half(self, message: Message, producer_group: str, *, queue_id: int | None = None,
                  sharding_key: str | None = None) -> SendResult:
        """Store a transactional message as a half (consumers do not see it) until
        ``end_transaction`` commits it to its topic and queue (picked as ``send`` picks it) or
        rolls it back; ``HalfReceipt.of(producer_group, result)`` names it.

        Raises:
            NotMasterError: the store is a SLAVE.
        """
        self._check_open()
        self._check_master()
        chosen = self._send_queue(message, queue_id, sharding_key)
        return self.transactions.send_half(message, chosen, producer_group)

    def end_transaction(self, receipt: HalfReceipt, state: TransactionState, *,
                        from_check: bool = False) -> SendResult | None:
        """Commit or roll back a half (``UNKNOWN`` changes nothing: a check asks again); the
        committed message's result, else None.

        Raises:
            TransactionStateError: no pending half matches ``receipt`` (nothing written).
        """
        self._check_open()
        self._check_master()
        return self.transactions.end(receipt, state)

    def register_transaction_checker(self, producer_group: str, checker: Checker) -> None:
        """Call ``checker(check)`` for each check of a half of ``producer_group``; it answers
        with ``end_transaction(check.receipt, state, from_check=True)``."""
        self.transactions.register(producer_group, checker)

    def unregister_transaction_checker(self, producer_group: str, checker: Checker) -> None:
        """Stop calling ``checker``."""
        self.transactions.unregister(producer_group, checker)


__all__ = ["CHECK_BATCH", "Checker", "PendingHalf", "Route", "TransactionCheckService",
           "TransactionalSends", "Transactions", "restored_check"]
