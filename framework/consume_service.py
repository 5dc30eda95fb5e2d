"""How pulled messages become handler calls: concurrent and orderly consumption.

``QueueState`` is one assigned message queue: its ``ProcessQueue`` (in-flight messages), the
next offset to pull and, for orderly queues, local retry counts. ``ConsumeService`` runs
handlers on a ``WorkerPool`` and decides what each outcome means:

* concurrent — messages of a pulled batch are handed to threads a few at a time (one task: the
  middleware's ``before_batch``/``after_batch`` around its handler calls); a failure is
  sent back through ``%RETRY%group`` (or dead-lettered); the committed offset is the smallest
  still in flight, so a slow message never lets it skip (reference §12.4). If the send-back
  itself fails the message stays in flight and is consumed again locally after
  ``local_retry_delay_ms`` (RocketMQ's client does the same).
* orderly — one task per queue at a time, in offset order; a failure puts the messages back and
  suspends the queue for ``orderly_suspend_ms``, then retries them in place (§10.5). After
  ``reconsume_count_max`` attempts (None: forever) the message is dead-lettered so the queue
  can move on.
* broadcast — like concurrent, but a failed message is logged and dropped (no retry topic).

While a handler call and its outcome run, log lines carry the messages' fields
(``framework.log_format.message_log_context``).

A dropped ``ProcessQueue`` (the queue moved to another consumer) never commits again. An async
handler's coroutine cancelled by shutdown (``CoroutineCancelledError``, or ``EventLoopError``
for one started as the loop closed, while stopping) leaves its messages uncommitted and not sent
back: they are consumed again after restart.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from postbox.storage_engine import Clock, LatencyTally, MessageView, SendBackResult
from postbox.storage_engine.contract import BrokerClient

from .allocation import MessageQueue
from .consumed_message import ConsumedMessage
from .event_loop import CoroutineCancelledError, EventLoopError, EventLoopThread
from .handlers import ConsumerGroupPlan, HandlerSpec
from .log_format import message_log_context
from .middleware import ConsumeContext, Middleware, after_batch, before_batch, invoke
from .offset_store import OffsetStore
from .outcomes import ConsumeOutcome, OutcomeKind
from .process_queue import ProcessQueue
from .scheduler import Scheduler
from .worker_pool import WorkerPool

log = logging.getLogger(__name__)
DEAD_LETTER_LOG_ATTRIBUTE = "postbox_dead_lettered_by"
"""Attribute of the dead-letter warning record: the consumer group (for log filters)."""

DEAD_LETTER_LEVEL = -1  # send_back's "straight to the DLQ"


@dataclass
class QueueState:
    """One message queue assigned to this consumer."""

    queue: MessageQueue
    process_queue: ProcessQueue[MessageView]
    next_offset: int
    tags: str
    attempts: dict[int, int] = field(default_factory=dict)  # orderly: offset -> local retries
    orderly_running: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class ConsumeStats:
    """Counters a consumer exposes (``Consumer.stats``)."""

    consumed: int = 0
    succeeded: int = 0
    retried: int = 0
    dead_lettered: int = 0
    dropped: int = 0
    send_back_failures: int = 0
    handled: int = 0
    """Messages whose handler call succeeded (middleware included: a skipped duplicate too)."""
    failed: int = 0
    """Messages whose handler call did not succeed (then retried, dead-lettered or dropped)."""


class ConsumeService:
    """Runs handlers for one consumer group."""

    def __init__(self, client: BrokerClient, plan: ConsumerGroupPlan, *,
                 middleware: list[Middleware], offsets: OffsetStore, pool: WorkerPool,
                 scheduler: Scheduler, clock: Clock, messages_per_task: int,
                 orderly_suspend_ms: int, local_retry_delay_ms: int,
                 event_loop: EventLoopThread | None = None) -> None:
        self._client = client
        self._event_loop = event_loop
        self._plan = plan
        self._group = plan.consumer_group
        self._middleware = middleware
        self._offsets = offsets
        self._pool = pool
        self._scheduler = scheduler
        self._clock = clock
        # orderly: one handler call per batch; concurrent: a task carries at least one batch
        self._orderly_batch_size = max(spec.batch_size for spec in plan.handlers.values())
        self._task_size = max(messages_per_task, self._orderly_batch_size)
        self._orderly_suspend_ms = orderly_suspend_ms
        self._local_retry_delay_ms = local_retry_delay_ms
        self.stats = ConsumeStats()
        self.handler_latency: dict[str, LatencyTally] = {}
        """Topic → durations of its handler calls (middleware included), for metrics."""
        self._stats_lock = threading.Lock()
        self.stopping = False

    # ---- entry point from the pull loop ------------------------------------------------------

    def submit(self, state: QueueState, views: list[MessageView]) -> None:
        """Hand freshly pulled messages (already added to the process queue) to the threads."""
        if self._plan.orderly:
            self.schedule_orderly(state)
            return
        step = self._task_size
        for start in range(0, len(views), step):
            self._pool.submit(self._consume_concurrently, state, views[start:start + step])

    def _handler_for(self, message: ConsumedMessage) -> HandlerSpec | None:
        return self._plan.handlers.get(message.topic)

    # ---- concurrent --------------------------------------------------------------------------

    def _consume_concurrently(self, state: QueueState, views: list[MessageView]) -> None:
        consumed = succeeded = 0
        chunks = self._chunks([ConsumedMessage(view, self._group) for view in views])
        contexts = [self._context(chunk) for chunk in chunks]
        batch = [context for context in contexts if context is not None]
        before_batch(batch, self._middleware)
        try:
            for chunk, context in zip(chunks, contexts, strict=True):
                if state.process_queue.dropped or self.stopping:
                    return  # the new owner (or the next start) consumes them from the offset
                consumed += len(chunk)
                chunk_views = [message.view for message in chunk]
                with message_log_context(self._group, chunk_views):  # log lines carry it
                    outcome = self._invoke(chunk, context)
                    if self._abandoned(outcome):
                        return
                    settled = outcome.succeeded or self._handle_failure(chunk, outcome)
                if not settled:
                    self._retry_locally(state, chunk_views)
                    continue
                succeeded += len(chunk)
                self._finish(state, chunk_views)
        finally:
            after_batch(batch, self._middleware)
            self._count(consumed=consumed, succeeded=succeeded)

    def _chunks(self, messages: list[ConsumedMessage]) -> list[list[ConsumedMessage]]:
        """Runs of up to ``batch_size`` consecutive messages with the same handler (a retry
        topic mixes the original topics of one group)."""
        chunks: list[list[ConsumedMessage]] = []
        limit = 0
        for message in messages:
            if chunks and message.topic == chunks[-1][0].topic and len(chunks[-1]) < limit:
                chunks[-1].append(message)
                continue
            spec = self._handler_for(message)
            limit = spec.batch_size if spec else 1
            chunks.append([message])
        return chunks

    def _context(self, messages: list[ConsumedMessage]) -> ConsumeContext | None:
        """The handler call for ``messages``; None when no handler takes their topic."""
        spec = self._handler_for(messages[0])
        return None if spec is None else ConsumeContext(self._group, spec, messages,
                                                        event_loop=self._event_loop)

    def _run_handler(self, messages: list[ConsumedMessage]) -> ConsumeOutcome:
        return self._invoke(messages, self._context(messages))

    def _invoke(self, messages: list[ConsumedMessage],
                context: ConsumeContext | None) -> ConsumeOutcome:
        if context is None:
            log.error("[consume] group %s has no handler for topic %s (message %s): "
                      "dead-lettering it", self._group, messages[0].topic, messages[0].msg_id)
            return ConsumeOutcome(OutcomeKind.DEAD_LETTER,
                                  reason=f"no handler for topic {messages[0].topic}")
        started_s = time.monotonic()
        outcome = invoke(context, self._middleware)
        self._observe(context.handler.topic, time.monotonic() - started_s,
                      outcome.succeeded, len(messages))
        return outcome

    def _abandoned(self, outcome: ConsumeOutcome) -> bool:
        """Whether shutdown cancelled the handler's coroutine: leave its messages uncommitted
        (consumed again after restart) instead of sending them back."""
        return self.stopping and isinstance(outcome.error,
                                            CoroutineCancelledError | EventLoopError)

    def _handle_failure(self, messages: list[ConsumedMessage], outcome: ConsumeOutcome) -> bool:
        """Send failed messages back (retry or DLQ); False when that failed (retry locally)."""
        if self._plan.broadcast:
            for message in messages:
                log.warning("[consume] broadcast group %s dropped failed message %s: %s",
                            self._group, message.msg_id, outcome.reason)
            self._count(dropped=len(messages))
            return True
        spec = self._handler_for(messages[0])
        level = DEAD_LETTER_LEVEL if outcome.kind is OutcomeKind.DEAD_LETTER else (
            outcome.delay_level)
        for message in messages:
            try:
                result = self._send_back(message, level, spec, outcome.reason)
            except Exception as error:
                log.warning("[consume] send-back of %s for group %s failed (%s): consuming it "
                            "again in %d ms", message.msg_id, self._group, error,
                            self._local_retry_delay_ms)
                self._count(send_back_failures=1)
                return False
            dead = result.outcome.value == "dead_letter"
            self._count(dead_lettered=1 if dead else 0, retried=0 if dead else 1)
            if dead:
                log.warning("[consume] group %s dead-lettered %s after %d attempts: %s",
                            self._group, message.msg_id, message.reconsume_count + 1,
                            outcome.reason, extra={DEAD_LETTER_LOG_ATTRIBUTE: self._group})
        return True

    def _send_back(self, message: ConsumedMessage, level: int, spec: HandlerSpec | None,
                   reason: str) -> SendBackResult:
        max_times = spec.reconsume_count_max if spec else None
        kwargs: dict[str, Any] = {
            "delay_level": level,
            "max_reconsume_times": (1 << 31) - 1 if max_times is None else max_times}
        if reason:
            kwargs["reason"] = reason[:512]
        return self._client.send_back(self._group, message.view, **kwargs)

    def _retry_locally(self, state: QueueState, views: list[MessageView]) -> None:
        self._scheduler.call_later(self._local_retry_delay_ms,
                                   lambda: self._pool.submit(self._consume_concurrently, state,
                                                             views))

    def _finish(self, state: QueueState, views: list[MessageView]) -> None:
        offset = state.process_queue.remove(views)
        if offset is not None and not state.process_queue.dropped:
            self._offsets.update(state.queue, offset)

    # ---- orderly -----------------------------------------------------------------------------

    def schedule_orderly(self, state: QueueState) -> None:
        """Make sure one (and only one) orderly task runs for ``state``."""
        with state.lock:
            if state.orderly_running:
                return
            state.orderly_running = True
        self._pool.submit(self._consume_orderly, state)

    def _consume_orderly(self, state: QueueState) -> None:
        pq = state.process_queue
        try:
            while not pq.dropped and not self.stopping:
                now_ms = self._clock.now_ms()
                if pq.suspended_until_ms > now_ms:
                    self._scheduler.call_at(pq.suspended_until_ms,
                                            lambda: self.schedule_orderly(state))
                    return
                if not self._plan.broadcast and not pq.locked:
                    return  # the rebalance re-schedules once the broker grants the lock
                views = pq.take(self._orderly_batch_size)
                if not views:
                    return
                with message_log_context(self._group, views):  # log lines carry it
                    self._consume_orderly_batch(state, views, now_ms)
        finally:
            with state.lock:
                state.orderly_running = False
            if pq.count and not pq.dropped and not self.stopping and (
                    pq.suspended_until_ms <= self._clock.now_ms()):
                self.schedule_orderly(state)

    def _consume_orderly_batch(self, state: QueueState, views: list[MessageView],
                               now_ms: int) -> None:
        pq = state.process_queue
        messages = [ConsumedMessage(v, self._group,
                                    local_attempts=state.attempts.get(v.queue_offset, 0))
                    for v in views]
        self._count(consumed=len(messages))
        outcome = self._run_handler(messages)
        if self._abandoned(outcome):
            return
        if outcome.succeeded:
            self._commit_orderly(state, views, succeeded=True)
            return
        spec = self._handler_for(messages[0])
        limit = spec.reconsume_count_max if spec else 0
        exhausted = limit is not None and messages[0].reconsume_count >= limit
        if outcome.kind is OutcomeKind.DEAD_LETTER or exhausted:
            dead = ConsumeOutcome(OutcomeKind.DEAD_LETTER, outcome.error,
                                  reason=outcome.reason)
            if self._handle_failure(messages, dead):
                self._commit_orderly(state, views, succeeded=False)
                return
        pq.make_reconsume_later(views)
        for view in views:
            state.attempts[view.queue_offset] = state.attempts.get(view.queue_offset, 0) + 1
        self._count(retried=len(views))
        pq.suspended_until_ms = now_ms + self._orderly_suspend_ms
        log.info("[consume] orderly group %s suspends %s for %d ms after a failure (%s)",
                 self._group, state.queue, self._orderly_suspend_ms, outcome.reason)

    def _commit_orderly(self, state: QueueState, views: list[MessageView], *,
                        succeeded: bool) -> None:
        offset = state.process_queue.commit()
        for view in views:
            state.attempts.pop(view.queue_offset, None)
        if succeeded:
            self._count(succeeded=len(views))
        if offset is not None and not state.process_queue.dropped:
            self._offsets.update(state.queue, offset)

    # ---- bookkeeping -------------------------------------------------------------------------

    def _observe(self, topic: str, seconds: float, succeeded: bool, count: int) -> None:
        tally = self.handler_latency.get(topic)
        if tally is None:
            with self._stats_lock:
                tally = self.handler_latency.setdefault(topic, LatencyTally())
        tally.observe(seconds)
        self._count(**{"handled" if succeeded else "failed": count})

    def _count(self, **deltas: int) -> None:
        with self._stats_lock:
            for name, delta in deltas.items():
                setattr(self.stats, name, getattr(self.stats, name) + delta)
