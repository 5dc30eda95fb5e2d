"""Transactional messages over remoting: ``RemoteTransactions``, the ``Transacting`` part of
``RemotingBroker``, as RocketMQ's ``TransactionMQProducer`` does them.

- ``send_half``: SEND_MESSAGE_V2 with ``TRAN_MSG=true``, ``PGROUP`` and the PREPARED type
  (0x4) in ``sysFlag``, ``producerGroup`` = the group, never coalesced; the broker that stored
  the half is remembered by the half's offsetMsgId (until its end).
- ``end_transaction``: END_TRANSACTION (37) to that broker (or the receipt's
  ``broker_address``: a check's connection) with ``commitOrRollback`` 8/12; a commit or rollback
  waits for the answer and raises the broker's refusal, ``UNKNOWN`` is sent oneway, as Java
  sends every end (RocketMQ's broker answers nothing to it).
- ``register_transaction_checker``: the group's producers heartbeat (HEART_BEAT with a
  ``producerDataSet``) to every master now and every ``HEARTBEAT_INTERVAL_MS``, so brokers know
  the connection to check; a CHECK_TRANSACTION_STATE (39) the broker sends on it is decoded
  (header and the half record, with its real topic and queue) into a ``TransactionCheck``
  handed to the group's checker on the connection's request thread; the checker answers with
  ``end_transaction(check.receipt, state, from_check=True)``.

Thread-safety: every method may be called from any thread (one lock over the tables).
"""

from __future__ import annotations

import json
import logging
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable

from postbox.storage_engine.contract.message import Message
from postbox.storage_engine.contract.model import SendResult
from postbox.storage_engine.contract.transactions import (
    HalfReceipt,
    TransactionCheck,
    TransactionState,
)
from postbox.storage_engine.errors import BrokerUnavailableError, InvalidMessageError
from postbox.storage_engine.formats.constants import SYSFLAG_TRANSACTION_PREPARED
from postbox.storage_engine.service import Service

from ..protocol.codes import RequestCode
from ..protocol.wire import RemotingCommand
from .broker_errors import check_success
from .connection import Connection
from .context import ClientContext
from .errors import RemotingClientError
from .records import decode_records
from .sending import Sender

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_MS = 20_000
HALVES_REMEMBERED = 65_536
Checker = Callable[[TransactionCheck], object]
_QUEUE_ID = struct.Struct(">i")


class RemoteTransactions:
    """Half sends, ends and checks of one remoting client."""

    def __init__(self, context: ClientContext, client_id: str) -> None:
        self._context = context
        self._client_id = client_id
        self._lock = threading.Lock()
        self._senders: dict[str, Sender] = {}
        self._brokers: OrderedDict[str, str] = OrderedDict()  # offsetMsgId → broker address
        self._checkers: dict[str, Checker] = {}
        self.heartbeats = _ProducerHeartbeats(self)
        context.connections.add_handler(RequestCode.CHECK_TRANSACTION_STATE, self._checked)

    def send_half(self, message: Message, producer_group: str, *, queue_id: int | None = None,
                  sharding_key: str | None = None) -> SendResult:
        """Store ``message`` as a half (see the module docstring)."""
        if not producer_group:
            raise InvalidMessageError("a transactional message needs its producer group",
                                      topic=message.topic)
        wire_group = self._context.wire(producer_group)
        with self._lock:
            sender = self._senders.get(wire_group)
            if sender is None:
                sender = self._senders[wire_group] = Sender(
                    self._context, producer_group=wire_group, coalesce=False)
        properties = {**(message.properties or {}), "TRAN_MSG": "true", "PGROUP": wire_group}
        half = Message(message.topic, message.body, tags=message.tags, keys=message.keys,
                       properties=properties, unique_key=message.unique_key, flag=message.flag,
                       born_timestamp_ms=message.born_timestamp_ms,
                       reconsume_count=message.reconsume_count,
                       sys_flag=message.sys_flag | SYSFLAG_TRANSACTION_PREPARED)
        result = sender.send(half, queue_id, sharding_key)
        _, address = self._context.routes.locate(message.topic, result.queue_id)
        with self._lock:
            self._brokers[result.offset_msg_id] = address
            while len(self._brokers) > HALVES_REMEMBERED:
                self._brokers.popitem(last=False)
        return result

    def end_transaction(self, receipt: HalfReceipt, state: TransactionState, *,
                        from_check: bool = False) -> None:
        """END_TRANSACTION for the half ``receipt`` names (see the module docstring).

        Raises:
            BrokerUnavailableError: no broker is known for the half (not sent by this client,
                nor named by a check), or it cannot be reached.
            RemotingClientError: the broker refused the end (e.g. no such pending half).
        """
        with self._lock:
            address = receipt.broker_address or self._brokers.get(receipt.offset_msg_id)
            if state is not TransactionState.UNKNOWN:
                self._brokers.pop(receipt.offset_msg_id, None)
        if address is None:
            raise BrokerUnavailableError(f"no broker known for the half message "
                                         f"{receipt.offset_msg_id} of {receipt.producer_group}")
        fields = {"producerGroup": self._context.wire(receipt.producer_group),
                  "tranStateTableOffset": receipt.queue_offset,
                  "commitLogOffset": receipt.log_position, "commitOrRollback": state.code,
                  "fromTransactionCheck": from_check,
                  "msgId": receipt.transaction_id or receipt.offset_msg_id,
                  "transactionId": receipt.transaction_id or ""}
        if state is TransactionState.UNKNOWN:
            request = RemotingCommand.request(RequestCode.END_TRANSACTION, fields, oneway=True)
            self._context.connections.get(address).oneway(request)
            return
        request = RemotingCommand.request(RequestCode.END_TRANSACTION, fields)
        check_success(f"end transaction {receipt.transaction_id} ({state.name})",
                      self._context.broker_call(address, request), address=address)

    # ---- checks ------------------------------------------------------------------------------

    def register_transaction_checker(self, producer_group: str, checker: Checker) -> None:
        """Answer the brokers' checks of ``producer_group`` with ``checker``; heartbeat the
        group now (so the brokers know whom to ask) and from then on."""
        with self._lock:
            self._checkers[self._context.wire(producer_group)] = checker
        self.heartbeats.beat()
        self.heartbeats.start()

    def unregister_transaction_checker(self, producer_group: str, checker: Checker) -> None:
        """Stop answering checks of ``producer_group`` with ``checker``."""
        with self._lock:
            wire_group = self._context.wire(producer_group)
            if self._checkers.get(wire_group) is checker:
                del self._checkers[wire_group]

    def groups(self) -> list[str]:
        """Wire names of the producer groups with a checker."""
        with self._lock:
            return sorted(self._checkers)

    def _checked(self, request: RemotingCommand, connection: Connection) -> None:
        """CHECK_TRANSACTION_STATE: hand the half to its group's checker."""
        body = request.body
        queue_id = _QUEUE_ID.unpack_from(body, 12)[0] if len(body) >= 16 else 0
        [view] = decode_records(body, queue_id)
        wire_group = view.properties.get("PGROUP", "")
        with self._lock:
            checker = self._checkers.get(wire_group)
        if checker is None:
            log.info("[transactions] check of %s for group %s, which has no checker here",
                     view.unique_key, wire_group)
            return None
        fields = request.fields
        receipt = HalfReceipt(
            self._context.app_name(wire_group), fields.get_int("tranStateTableOffset", low=0),
            fields.get_int("commitLogOffset", low=0), fields.get_str("offsetMsgId", ""),
            fields.get_str("transactionId", None) or view.unique_key,
            broker_address=connection.address)
        checker(TransactionCheck(receipt, view, body))
        return None

    def close(self) -> None:
        """Stop heartbeating."""
        self.heartbeats.stop()


class _ProducerHeartbeats(Service):
    """HEART_BEAT of the producer groups with a checker, to every master, periodically."""

    name = "remoting-producer-heartbeat"
    interval_ms = HEARTBEAT_INTERVAL_MS
    daemon = True

    def __init__(self, owner: RemoteTransactions) -> None:
        super().__init__(owner._context.clock)
        self._owner = owner

    def run_once(self, now_ms: int) -> int:
        """One round of heartbeats (0: the loop then sleeps an interval)."""
        self.beat()
        return 0

    def beat(self) -> None:
        """Heartbeat every producer group with a checker to every master now."""
        groups = self._owner.groups()
        if not groups:
            return
        context = self._owner._context
        body = json.dumps({"clientID": self._owner._client_id, "consumerDataSet": [],
                           "producerDataSet": [{"groupName": group} for group in groups]},
                          separators=(",", ":")).encode()
        try:
            masters = context.masters()
        except (RemotingClientError, BrokerUnavailableError) as error:
            log.info("[transactions] no producer heartbeat: %s", error)
            return
        for address in sorted(set(masters.values())):
            try:
                check_success("producer heartbeat", context.broker_call(
                    address, RemotingCommand.request(RequestCode.HEART_BEAT, {}, body)),
                    address=address)
            except (RemotingClientError, BrokerUnavailableError) as error:
                log.info("[transactions] producer heartbeat to %s failed: %s", address, error)


__all__ = ["HEARTBEAT_INTERVAL_MS", "RemoteTransactions"]
