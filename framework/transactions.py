"""Transactional sends of a ``Producer``: RocketMQ's two-phase send with check-back.

``Producer.send_in_transaction(topic, body, execute=..., check=...)``:

1. the message is stored as a *half* (consumers do not see it);
2. ``execute(result)`` runs the local transaction (``result``: the half's ``SendResult``, whose
   ``unique_key`` is the message id the check sees); it returns how the transaction ended —
   ``TransactionState.COMMIT``/``ROLLBACK``/``UNKNOWN``, ``True`` (commit), ``False``
   (rollback) or ``None`` (commit: it returned normally). An exception leaves the half
   ``UNKNOWN`` and is raised to the caller after the end is sent;
3. the producer ends the transaction (commit: the message reaches the topic; rollback: it never
   does; unknown: nothing yet);
4. whenever the broker does not learn the outcome (unknown, a crash between the steps, a lost
   end), it asks a producer of the group again later (check-back: first after the broker's
   ``transactionTimeOut``, 6 s, then every ``transactionCheckInterval``, at most
   ``transactionCheckMax`` times): the group's ``check(message)`` is called with the half
   (a ``MessageView``: body, properties, ``unique_key``, its topic) and answers as ``execute``
   does; an exception or ``UNKNOWN`` leaves the question for the next check.

``TransactionChecks`` keeps the check function of each producer group and registers one
checker per group with the broker client (the embedded broker calls it on its check thread, the
remote client on the connection's request thread). ``Producer.register_transaction_check`` sets
one ahead of any send: a restarted process must answer checks of halves its predecessor left.

Thread-safety: every method may be called from any thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from postbox.storage_engine import SendResult
from postbox.storage_engine.contract import (
    BrokerClient,
    HalfReceipt,
    TransactionCheck,
    TransactionState,
)
from postbox.storage_engine.formats import MessageView

log = logging.getLogger(__name__)

DEFAULT_TRANSACTION_GROUP = "postbox-transactions"
"""The producer group of ``send_in_transaction`` when none is named; applications sharing a
broker name their own (the broker asks any producer of the group about any of its halves)."""

LocalOutcome = TransactionState | bool | None
Execute = Callable[[SendResult], LocalOutcome]
Check = Callable[[MessageView], LocalOutcome]


def outcome_state(outcome: Any) -> TransactionState:
    """The state a local transaction's ``outcome`` means (see the module docstring).

    Raises:
        TypeError: anything else (a typo must not commit).
    """
    if isinstance(outcome, TransactionState):
        return outcome
    if outcome is None or outcome is True:
        return TransactionState.COMMIT
    if outcome is False:
        return TransactionState.ROLLBACK
    raise TypeError(f"a local transaction returns a TransactionState, True, False or None, "
                    f"not {outcome!r}")


@dataclass(frozen=True)
class TransactionResult:
    """What ``send_in_transaction`` did."""

    send_result: SendResult
    """The half's send result (``unique_key``: the message id)."""
    state: TransactionState
    """The local transaction's outcome, as ``execute`` reported it."""
    ended: bool
    """Whether the broker took the end (False: it will check back instead)."""
    committed: SendResult | None = None
    """Where the committed message went, when the broker says (the embedded one does)."""

    @property
    def receipt_id(self) -> str | None:
        """The message id (``UNIQ_KEY``)."""
        return self.send_result.unique_key


class TransactionChecks:
    """The check function of each producer group, registered with one broker client."""

    def __init__(self, client: BrokerClient) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._checks: dict[str, Check] = {}
        self._registered: dict[str, Callable[[TransactionCheck], None]] = {}

    def set(self, group: str, check: Check) -> None:
        """Answer checks of ``group`` with ``check`` (replacing an earlier one)."""
        if not callable(check):
            raise TypeError(f"check must be callable, got {check!r}")
        with self._lock:
            self._checks[group] = check
            new = group not in self._registered
            if new:
                self._registered[group] = checker = self._checker(group)
        if new:
            self._client.register_transaction_checker(group, checker)

    def _checker(self, group: str) -> Callable[[TransactionCheck], None]:
        def answer(check: TransactionCheck) -> None:
            with self._lock:
                function = self._checks.get(group)
            if function is None:
                return
            try:
                state = outcome_state(function(check.message))
            except Exception:
                log.exception("[transactions] check of %s (group %s) failed: asked again later",
                              check.receipt.transaction_id, group)
                return
            if state is TransactionState.UNKNOWN:
                return
            try:
                self._client.end_transaction(check.receipt, state, from_check=True)
            except Exception as error:  # the broker asks again
                log.warning("[transactions] end of %s (group %s) after a check failed: %s",
                            check.receipt.transaction_id, group, error)

        return answer

    def close(self) -> None:
        """Unregister every checker (the producer closed)."""
        with self._lock:
            registered, self._registered = self._registered, {}
            self._checks.clear()
        for group, checker in registered.items():
            self._client.unregister_transaction_checker(group, checker)


def end_local_transaction(client: BrokerClient, group: str, half: SendResult,
                          execute: Execute) -> TransactionResult:
    """Steps 2 and 3 of the module docstring for the stored ``half``."""
    receipt = HalfReceipt.of(group, half)
    try:
        state = outcome_state(execute(half))
    except BaseException:
        _end(client, receipt, TransactionState.UNKNOWN)
        raise
    ended, committed = _end(client, receipt, state)
    return TransactionResult(half, state, ended, committed)


def _end(client: BrokerClient, receipt: HalfReceipt, state: TransactionState
         ) -> tuple[bool, SendResult | None]:
    try:
        return True, client.end_transaction(receipt, state)
    except Exception as error:  # the half stays pending: the broker checks back
        log.warning("[transactions] end of %s (%s, group %s) failed, the broker will check "
                    "back: %s", receipt.transaction_id, state.name, receipt.producer_group,
                    error)
        return False, None


__all__ = ["DEFAULT_TRANSACTION_GROUP", "Check", "Execute", "TransactionChecks",
           "TransactionResult", "TransactionState", "end_local_transaction", "outcome_state"]
