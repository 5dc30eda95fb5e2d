"""Transactions over remoting: END_TRANSACTION (37) and the broker → producer
CHECK_TRANSACTION_STATE (39).

END_TRANSACTION (RocketMQ's ``EndTransactionProcessor``; Java sends it oneway, so an answer is
written only when the client asked for one): the header names the half by ``producerGroup``,
``tranStateTableOffset`` (its offset in the half topic) and ``commitLogOffset``;
``commitOrRollback`` 8 commits, 12 rolls back, 0 (the producer does not know yet) changes
nothing and answers SUCCESS (RocketMQ answers nothing), any other value answers 1 SYSTEM_ERROR
"commitOrRollback field wrong", as RocketMQ's header check. A half that is not found, of
another group (a check answered by another group's producer among them) or queue offset answers
1 SYSTEM_ERROR with RocketMQ's remark ("Find prepared transaction message failed", "The
producer group wrong", "The transaction state table offset wrong"); nothing is written then. A
half whose transaction already ended answers 0 SUCCESS, as RocketMQ, but writes nothing: the
first end stands (RocketMQ commits the half again, even after a rollback: a duplicate, or a
rolled-back message delivered). A SLAVE answers 11 SLAVE_NOT_AVAILABLE, as RocketMQ.

CHECK_TRANSACTION_STATE is this server's route for the broker's check-back
(``Transactions.add_route``): oneway, to one live connection of the producer group that its
heartbeats registered (the most recent), header ``topic``, ``tranStateTableOffset``,
``commitLogOffset``, ``msgId`` (the ``UNIQ_KEY``), ``transactionId``, ``offsetMsgId`` and
``brokerName``; body the half record with its real topic and queue (reference §2.6 layout). The
producer answers with END_TRANSACTION, ``fromTransactionCheck=true``.

Thread-safety: as ``Broker``'s; the route runs on the broker's check thread.
"""

from __future__ import annotations

import logging

from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.network.protocol.wire import RemotingCommand
from postbox.storage_engine.broker import Broker
from postbox.storage_engine.contract.transactions import (
    HalfReceipt,
    TransactionCheck,
    TransactionState,
)
from postbox.storage_engine.errors import NotMasterError, TransactionEndedError

from ..errors import RequestRefusedError
from ..handlers import HandlerTable
from ..session import Session
from ..workers import SEND_LANE
from .clients import ClientRegistry

log = logging.getLogger(__name__)

BROKER_NAME = "broker-a"
INT64_MAX = 2**63 - 1
END_CODES = frozenset(state.value for state in TransactionState)
"""The ``commitOrRollback`` values RocketMQ's header check accepts: 0, 8 and 12."""


class TransactionHandlers:
    """END_TRANSACTION, and the check-back route to the producers of this server."""

    def __init__(self, broker: Broker, registry: ClientRegistry,
                 broker_name: str = BROKER_NAME) -> None:
        self._broker = broker
        self._registry = registry
        self.broker_name = broker_name

    def register(self, table: HandlerTable, *, inline: bool) -> None:
        """Serve 37 (on the send lane unless the store never blocks a write) and offer the
        broker's checks to this server's producers."""
        table.register(RequestCode.END_TRANSACTION, self.end_transaction, inline=inline,
                       lane=SEND_LANE)

    def start(self) -> None:
        """Route the broker's checks to producers connected here."""
        self._broker.transactions.add_route(self.route_check)

    def stop(self) -> None:
        """Stop routing checks here."""
        self._broker.transactions.remove_route(self.route_check)

    def end_transaction(self, request: RemotingCommand, session: Session) -> RemotingCommand:
        """END_TRANSACTION: commit or roll back a half message."""
        fields = request.fields
        group = fields.get_str("producerGroup", max_chars=255)
        receipt = HalfReceipt(group, fields.get_int("tranStateTableOffset", low=0,
                                                    high=INT64_MAX),
                              fields.get_int("commitLogOffset", low=0, high=INT64_MAX), "",
                              fields.get_str("transactionId", None, max_chars=255))
        code = fields.get_int("commitOrRollback", low=-(2**31))
        if code not in END_CODES:
            raise RequestRefusedError(ResponseCode.SYSTEM_ERROR, "commitOrRollback field wrong")
        state = TransactionState.from_code(code)
        from_check = fields.get_str("fromTransactionCheck", "false").lower() == "true"
        if state is TransactionState.UNKNOWN:
            log.info("[transactions] producer %s (group %s) reports %s unknown%s",
                     session.peer_address, group, fields.get_str("msgId", "?"),
                     " on a check" if from_check else "")
            return request.response(ResponseCode.SUCCESS)
        try:
            self._broker.end_transaction(receipt, state, from_check=from_check)
        except NotMasterError as error:
            raise RequestRefusedError(ResponseCode.SLAVE_NOT_AVAILABLE, str(error)) from error
        except TransactionEndedError as ended:  # RocketMQ answers SUCCESS; nothing is written
            log.warning("[transactions] producer %s (group %s) ends a transaction again "
                        "(%s): %s", session.peer_address, group, state.name.lower(), ended)
        return request.response(ResponseCode.SUCCESS)

    def route_check(self, check: TransactionCheck) -> bool:
        """Send ``check`` to one live connection of its producer group; False when none."""
        group = check.receipt.producer_group
        sessions = [session for session in self._registry.producer_sessions(group)
                    if not session.closed]
        if not sessions:
            return False
        receipt = check.receipt
        fields = {"topic": check.message.topic,
                  "tranStateTableOffset": str(receipt.queue_offset),
                  "commitLogOffset": str(receipt.log_position),
                  "msgId": check.message.unique_key or receipt.transaction_id or "",
                  "transactionId": receipt.transaction_id or "",
                  "offsetMsgId": receipt.offset_msg_id, "brokerName": self.broker_name}
        sessions[-1].send_oneway(RemotingCommand(code=RequestCode.CHECK_TRANSACTION_STATE,
                                                 ext_fields=fields, body=check.record))
        return True


__all__ = ["TransactionHandlers"]
