"""Transactional messages as every broker takes them: the outcome of a local transaction
(``TransactionState``), what a producer needs to end one (``HalfReceipt``) and what a broker's
check-back hands a producer (``TransactionCheck``). Pure values, safe to share between threads.

RocketMQ's two-phase send: a producer stores a *half* message (invisible to consumers), runs its
local transaction, then commits (the message reaches its topic) or rolls back (it never does).
A producer that does not say — it crashed, or answered ``UNKNOWN`` — is asked by the broker
(check-back) until it does or the broker gives up (reference: RocketMQ 5 transactions).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..formats import MessageView
from ..formats.constants import (
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_NOT,
    SYSFLAG_TRANSACTION_ROLLBACK,
)
from .model import SendResult


class TransactionState(enum.Enum):
    """How a local transaction ended, as a producer reports it (RocketMQ's
    ``LocalTransactionState``: COMMIT_MESSAGE, ROLLBACK_MESSAGE, UNKNOW)."""

    COMMIT = SYSFLAG_TRANSACTION_COMMIT
    ROLLBACK = SYSFLAG_TRANSACTION_ROLLBACK
    UNKNOWN = SYSFLAG_TRANSACTION_NOT

    @property
    def code(self) -> int:
        """The ``commitOrRollback`` value of END_TRANSACTION: 8, 12 or 0."""
        return int(self.value)

    @classmethod
    def from_code(cls, code: int) -> TransactionState:
        """The state of a ``commitOrRollback`` value; any other value is ``UNKNOWN``."""
        return _STATES_BY_CODE.get(code, cls.UNKNOWN)


_STATES_BY_CODE = {state.value: state for state in TransactionState}


@dataclass(frozen=True)
class HalfReceipt:
    """Where a half message was stored: what ending its transaction names."""

    producer_group: str
    queue_offset: int
    """Its offset in the half topic's queue 0 (END_TRANSACTION's ``tranStateTableOffset``)."""
    log_position: int
    """Its commit-log position (``commitLogOffset``)."""
    offset_msg_id: str
    transaction_id: str | None
    """The message's ``UNIQ_KEY`` (RocketMQ's transaction id)."""
    broker_address: str | None = None
    """The broker holding the half, when a remote client knows it (a check's connection)."""

    @classmethod
    def of(cls, producer_group: str, result: SendResult) -> HalfReceipt:
        """The receipt of a half send's result."""
        return cls(producer_group, result.queue_offset, result.log_position,
                   result.offset_msg_id, result.unique_key)


@dataclass(frozen=True)
class TransactionCheck:
    """One check-back: the broker asks a producer of ``receipt.producer_group`` how the local
    transaction of a half message ended. ``message`` is the half record with the topic and
    queue it was sent to (``record``: its bytes, the body of CHECK_TRANSACTION_STATE)."""

    receipt: HalfReceipt
    message: MessageView
    record: bytes


__all__ = ["HalfReceipt", "TransactionCheck", "TransactionState"]
