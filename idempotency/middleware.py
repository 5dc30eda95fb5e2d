"""``IdempotencyMiddleware``: a handler registered with ``idempotent=True`` takes effect exactly
once per (consumer group, message id), however often the message arrives.

The decision flow (DESIGN §5), for each message:

1. **Receipt.** Insert the ``message_log`` row in its own transaction. Database unreachable →
   retry later through the retry topic; nothing was done, nothing is lost.
2. **Redis hint.** ``SET key token NX PX ttl``.
   - *held* → read ``message_processed``: done already → delete the log row, success (the fast
     rejection of a duplicate). Not done → go on to 3: the holder may be running right now,
     or may have died holding the mark; the database lock in 3 tells them apart safely.
   - *Redis error* → go on to 3 on the database alone (logged once). Never "duplicate".
3. **Handler transaction.** Lock the local stub (``FOR UPDATE`` where supported), then check
   and claim in one statement: insert the processed row unless it exists (``ON CONFLICT DO
   NOTHING`` / ``INSERT IGNORE`` / ``OR IGNORE``; a concurrent attempt's uncommitted row is
   waited for). Already there → delete the log row, success. Else run the handler with this
   transaction's ``Session`` as its second argument, mark the stub ``confirmed`` and delete
   the log row, commit; then turn the Redis mark into a "done" mark.
4. **Failure.** Handler error → roll back, compare-and-delete our Redis mark, and let the
   framework retry (or dead-letter) as the handler asked. Database error → the same, as
   "retry later"; an ambiguous commit is safe because the retry finds the processed row.

One deliberate difference from DESIGN §5: a mark "held by someone else" on an unconfirmed
message is not taken as "another worker has it, success". A consumer killed in the middle of
its handler leaves its mark behind until the TTL runs out, and its own redelivery would then be
acknowledged without ever running — a lost message. Waiting on the database lock instead costs
a live holder's duplicate a short wait and keeps a dead holder's message alive.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from framework import (
    ConsumeContext,
    ConsumedMessage,
    ConsumeOutcome,
    DeadLetter,
    Middleware,
    OutcomeKind,
    RetryLater,
)
from outbox.clock import NowFunction, utc_now
from outbox.database import dialect_name

from . import ledger
from .redis_guard import GuardState, RedisGuard

log = logging.getLogger(__name__)

SUCCESS = ConsumeOutcome(OutcomeKind.SUCCESS)


@dataclass
class IdempotencyStats:
    """How messages were decided since the middleware was made."""

    processed: int = 0
    duplicates_by_redis: int = 0
    """Duplicates rejected on the fast path: Redis held, one database read."""
    duplicates_by_database: int = 0
    """Duplicates rejected inside a database transaction (Redis free, down, or mark stale)."""
    failures: int = 0
    database_errors: int = 0
    taken_over: int = 0
    """Messages whose Redis mark was held by an attempt that had not finished them."""


class _Rollback(Exception):  # noqa: N818 - control flow: leave the transaction with an outcome
    def __init__(self, outcome: ConsumeOutcome) -> None:
        super().__init__(outcome.reason)
        self.outcome = outcome


def _flush(session: Session) -> ConsumeOutcome:
    """Flush what the handler added; a failure here (a unique key of its own, say) is the
    handler's failure — never mistaken for a duplicate delivery."""
    try:
        session.flush()
    except SQLAlchemyError as error:
        return ConsumeOutcome.from_error(error)
    return SUCCESS


class IdempotencyMiddleware(Middleware):
    """Exactly-once effects for ``idempotent=True`` handlers (other handlers pass through).

    Args:
        engine: the consumer's database (holds ``message_log``/``message_processed``, and
            ``message_stub`` when the producer shares it).
        guard: the Redis fast path; ``None`` decides on the database alone.
        retry_delay_level: delay level asked for after a database error (None: the broker's
            "3 + reconsume count" rule).
        now: database time source (naive UTC).
    """

    serves_idempotent_handlers = True

    def __init__(self, engine: Engine, guard: RedisGuard | None = None, *,
                 retry_delay_level: int | None = None, now: NowFunction = utc_now) -> None:
        self.engine = engine
        self._dialect = dialect_name(engine)
        self.guard = guard
        self.retry_delay_level = retry_delay_level
        self._now = now
        self.stats = IdempotencyStats()

    def around_consume(self, context: ConsumeContext, call_next) -> ConsumeOutcome:  # noqa: ANN001
        """Run the decision flow of the module docstring around the handler."""
        if not context.handler.idempotent:
            return call_next()
        message = context.message
        group = context.consumer_group
        if not message.view.unique_key:
            return ConsumeOutcome.from_error(DeadLetter(
                f"message {message.offset_msg_id} has no message id (UNIQ_KEY); an idempotent "
                "handler cannot tell its deliveries apart"))
        message_id = message.msg_id
        try:
            ledger.record_receipt(self.engine, group, message, self._now())
        except SQLAlchemyError as error:
            return self._database_error("recording the receipt of", message_id, error)
        token = uuid.uuid4().hex
        state = self.guard.acquire(group, message_id, token) if self.guard else \
            GuardState.UNAVAILABLE
        if state is GuardState.HELD:
            try:
                with self.engine.connect() as connection:
                    done = ledger.is_processed(connection, group, message_id)
                    if done:
                        ledger.forget_receipt(connection, group, message_id)
                        connection.commit()
            except SQLAlchemyError as error:
                return self._database_error("checking", message_id, error)
            if done:
                self.stats.duplicates_by_redis += 1
                context.skipped = True
                return SUCCESS
            self.stats.taken_over += 1
        return self._run_handler(context, call_next, group, message, token, state)

    def _run_handler(self, context: ConsumeContext, call_next, group: str,  # noqa: ANN001
                     message: ConsumedMessage, token: str, state: GuardState) -> ConsumeOutcome:
        message_id = message.msg_id
        owns_mark = state is GuardState.ACQUIRED
        try:
            with Session(self.engine, expire_on_commit=False) as session, session.begin():
                ledger.lock_stub(session, message_id)
                duplicate = not ledger.claim_processing(session, self._dialect, group, message,
                                                        self._now())
                if duplicate:  # processed already (or by the attempt we waited for)
                    ledger.forget_receipt(session, group, message_id)
                else:
                    context.handler_args = [session, *context.handler_args]
                    outcome = call_next()
                    if outcome.succeeded:
                        outcome = _flush(session)  # the handler's pending rows, as its outcome
                    if not outcome.succeeded:
                        raise _Rollback(outcome)
                    ledger.confirm(session, group, message_id, self._now())
        except _Rollback as rollback:
            self.stats.failures += 1
            if owns_mark:
                self.guard.release(group, message_id, token)
            return rollback.outcome
        except SQLAlchemyError as error:
            if owns_mark:
                self.guard.release(group, message_id, token)
            return self._database_error("processing", message_id, error)
        if duplicate:
            self.stats.duplicates_by_database += 1
            context.skipped = True
            return SUCCESS
        self.stats.processed += 1
        if owns_mark:
            self.guard.mark_done(group, message_id, token)
        return SUCCESS

    def _database_error(self, doing: str, message_id: str,
                        error: SQLAlchemyError) -> ConsumeOutcome:
        self.stats.database_errors += 1
        log.warning("database error while %s message %s; it will be retried: %s", doing,
                    message_id, error.__class__.__name__ + ": " + str(error).splitlines()[0])
        return ConsumeOutcome.from_error(RetryLater(
            self.retry_delay_level, reason=f"database unavailable while {doing} the message"))

    def close(self) -> None:
        """Release Redis connections."""
        if self.guard is not None:
            self.guard.close()


__all__ = ["IdempotencyMiddleware", "IdempotencyStats"]
