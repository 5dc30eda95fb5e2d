"""The relay: publishes committed stubs to the broker and records where they went.

Two ways in, one way out:
- **After-commit hand-off.** ``attach()`` puts a ``CommitHook`` on the engine: ``outbox.send``
  reports each id to it, and once the transaction that wrote the stub has committed the ids
  reach the relay thread, which claims and publishes them at once (no timer, no extra read);
  the ids of a transaction or savepoint that rolled back are never handed over.
- **Polling.** Every ``poll_interval_ms`` the relay claims due, never-published stubs —
  whatever the hook never saw: a crash between commit and hand-off, another process's sends,
  a failed attempt waiting for its retry time.

The relay is a ``Service`` (the project's one background loop): ``start()`` runs its thread
(``postbox-relay``, a daemon), and a pass is ``run_once(now_ms)`` — publish what the hook
handed over, else poll when the poll is due — which tests drive with a fake clock. The loop's
time in ms comes from the same ``now`` function as the database time. A failed pass (database
or broker down) is logged, and the thread backs off and goes on.

Either way a stub is first *claimed* (``claims.claim_stubs``: ``send_count + 1`` — unless the
last claim was abandoned, which it replaces — and a lease,
``SKIP LOCKED`` where the database has it), so several relays never publish one stub at the
same time; then published with its own message id as ``UNIQ_KEY`` — the claimed stubs of one
topic together, with batch sends (``Producer.send_batch``: one call and one queue per batch of
at most ``RelayOptions.send_batch_max``; delayed stubs alone); then its queue id, queue
offset, log position and offsetMsgId are recorded under the claim token. A crash after the
publish and before the record leaves the lease to expire and the stub to be published again:
the relay is at-least-once, and consumers deduplicate by message id (``idempotency``).

A failed attempt records ``last_error`` and a retry time, and is one of two kinds
(``framework.send_failure``, the one place both transports' errors are sorted):
- **the broker was unavailable** (unreachable, timed out, busy, closed, no route yet): the
  attempt is not counted (the claim's ``send_count + 1`` is taken back) and the relay backs off
  as a whole (``outage.OutageBackoff``: exponential from ``RelayOptions.outage_backoff_ms``,
  capped at ``outage_backoff_max_ms``, jittered), claiming nothing until the wait is over. An
  outage of any length ends with every stub published and none void, with no one acting;
- **the message was refused** (too large, invalid, no such topic, no permission, or a failure
  not known to be transient): the attempt counts, the stub is tried again after
  ``retry_delay_ms`` (doubling), and after ``max_send_count`` counted attempts (the resend
  rule's, ``RelayOptions.rules``) it becomes ``void`` for an operator to handle.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Self

from sqlalchemy import Connection, Engine, bindparam, select, update

from postbox.framework import (
    BatchMessage,
    InvalidMessageError,
    Producer,
    SendFailure,
    SendResult,
    Service,
    send_failure,
)
from postbox.framework.metrics import LatencyTally

from .claims import ClaimedStub, claim_stubs, group_heads, unpublished_due
from .clock import NowFunction, utc_now
from .commit_hook import CommitHook
from .database import run_transaction
from .options import RelayOptions
from .outage import OutageBackoff
from .tables import StubStatus, message_stub

log = logging.getLogger(__name__)
stub = message_stub.c

BATCH_CONTENT_MAX = 1 << 20
"""Content bytes of one batch send at most (a send's limit is 4 MiB, properties included)."""


_RECORD_PUBLISHED = update(message_stub).where(
    stub.message_id == bindparam("b_id"), stub.lease_owner == bindparam("b_token")).values(
    queue_id=bindparam("b_queue_id"), queue_offset=bindparam("b_queue_offset"),
    log_position=bindparam("b_position"), offset_msg_id=bindparam("b_offset_msg_id"),
    published_at=bindparam("b_now"), lease_owner=None, lease_until=None, last_error=None,
    updated_at=bindparam("b_now"), overtaken_at=None, next_resend_at=bindparam("b_next"))
"""Where a publish went, fenced by the claim token; built once (one executemany per batch)."""


@dataclass
class RelayStats:
    """Counters since the relay was made."""

    published_by_hook: int = 0
    published_by_poll: int = 0
    failed: int = 0
    """Publish attempts that failed, of either kind."""
    unavailable: int = 0
    """Of ``failed``, those that failed because the broker was unavailable (not counted
    toward ``max_send_count``)."""
    voided: int = 0
    errors: int = 0
    publish_latency: LatencyTally = field(default_factory=LatencyTally)
    """How long each successfully published stub's publish call took (a batch send's time
    counts once for each of its stubs), for the metrics."""

    @property
    def published(self) -> int:
        """Stubs published, by hook and by poll."""
        return self.published_by_hook + self.published_by_poll


GROUP_ROUNDS_MAX = 64
"""Claims one pass makes at most while each publishes stubs of message groups: a claim holds
one stub per group (``claims.group_head``), the next one its successors (``group_heads``)."""

FAILURE_BACKOFF_MAX_MS = 5_000
"""Longest wait after failed passes in a row (0.2 s after one, doubling)."""


ProducerSource = Producer | Callable[[], Producer]


@dataclass(frozen=True, slots=True)
class PublishFailure:
    """Why one stub's publish failed: the error's text and its kind."""

    error: str
    kind: SendFailure

    @classmethod
    def of(cls, error: BaseException) -> PublishFailure:
        """The failure ``error`` stands for."""
        return cls(f"{type(error).__name__}: {error}", send_failure(error))

    @property
    def counts(self) -> bool:
        """Whether the attempt counts toward ``max_send_count`` (the message was refused)."""
        return self.kind is SendFailure.MESSAGE


class Relay(Service):
    """Publishes stubs of one database through one producer.

    Args:
        producer: the producer to publish with, or a function returning it (``lambda:
            app.producer``, so the broker opens only when the relay first publishes).
        engine: the engine whose ``message_stub`` table this relay serves.
        owner: a name for this relay in ``lease_owner`` (default: host and pid).
        now: database time source (naive UTC); the loop's clock too.
    """

    name = "relay"
    daemon = True

    def __init__(self, producer: ProducerSource, engine: Engine, *,
                 options: RelayOptions | None = None, owner: str | None = None,
                 now: NowFunction = utc_now) -> None:
        super().__init__(_MillisecondClock(now))
        self._producer_source = producer
        self.engine = engine
        self.options = options or RelayOptions()
        self.owner = owner or _default_owner()
        self._now = now
        self.stats = RelayStats()
        self._pending: collections.deque[str] = collections.deque()
        self._condition = threading.Condition()
        self._next_poll_ms = 0
        self._resume_ms = 0  # after failed passes: no pass before this
        self._failures = 0  # failed passes in a row
        self.outage = OutageBackoff(self.options.outage_backoff_ms,
                                    self.options.outage_backoff_max_ms,
                                    self.options.outage_jitter_ratio)
        """The back-off while the broker is unavailable (no claim before ``until_ms``)."""
        self.hook = CommitHook(engine, self.notify)
        """Hands this relay the ids of committed stubs (``attach()`` / ``detach()``)."""
        self.start_on_notify = False
        """Start the relay's thread when ids are handed over and it is not running, unless
        ``stop()`` was called since the last ``start()`` (``Outbox`` sets it for an app over a
        remote broker: a producer-only web process has no ``app.start()`` to start it)."""
        self.on_void: Callable[[list[tuple[ClaimedStub, str]]], None] | None = None
        """Called (after the commit) with the stubs this relay voided and their last error —
        the resend worker raises its alerts here."""

    # ---- the after-commit hand-off ----------------------------------------------------------

    def attach(self) -> None:
        """Watch the engine: ids sent through it reach this relay once their transaction has
        committed."""
        self.hook.attach()

    def detach(self) -> None:
        """Stop watching the engine."""
        self.hook.detach()

    def notify(self, message_ids: Iterable[str]) -> None:
        """Ask for these committed stubs to be published soon (the hook calls this)."""
        with self._condition:
            room = self.options.max_pending_notifications - len(self._pending)
            self._pending.extend(list(message_ids)[:max(room, 0)])
            start = self.start_on_notify and not self.is_running and not self.stopping
            if start:
                self.start()
        if start:
            log.info("[relay] started at the first commit (its app was not started)")
        self.wakeup()

    # ---- publishing ----------------------------------------------------------------------------

    def publish_due(self, limit: int | None = None) -> int:
        """One polling pass: claim and publish due, never-published stubs; return how many
        were published (none while backing off from an outage)."""
        if self.outage.waiting(self.clock.now_ms()):
            return 0
        published = 0
        successors: list[str] | None = None
        for _ in range(GROUP_ROUNDS_MAX):
            claimed = self._claim(limit or self.options.batch_size) if successors is None \
                else self._claim(len(successors), successors)
            done = self.publish_claimed(claimed)
            published += done
            groups = {item.message_group for item in claimed if item.message_group}
            if not done or not groups:
                break
            # the next round claims the successors these publishes freed, found through the
            # group index, not by reading every due stub again
            successors = group_heads(self.engine, sorted(groups))
            if not successors:
                break
        self.stats.published_by_poll += published
        return published

    def publish_ids(self, message_ids: list[str]) -> tuple[int, list[str]]:
        """Claim and publish these stubs; return (published, ids not in the table)."""
        claimed = self._claim(len(message_ids), message_ids)
        published = self.publish_claimed(claimed)
        self.stats.published_by_hook += published
        taken = {item.message_id for item in claimed}
        unseen = [message_id for message_id in message_ids if message_id not in taken]
        if unseen:
            with self.engine.connect() as connection:
                present = set(connection.execute(select(stub.message_id).where(
                    stub.message_id.in_(unseen))).scalars())
            unseen = [message_id for message_id in unseen if message_id not in present]
        return published, unseen

    def _claim(self, limit: int, message_ids: list[str] | None = None) -> list[ClaimedStub]:
        """Claim due, never-published stubs (only ``message_ids`` when given)."""
        now = self._now()
        return claim_stubs(self.engine, unpublished_due(now, self.options.max_send_count),
                           owner=self.owner, now=now, lease=self._lease(), limit=limit,
                           message_ids=message_ids)

    def publish_claimed(self, claimed: list[ClaimedStub], *,
                        check_after: Callable[[int], timedelta] | None = None,
                        keep_delay: bool = True) -> int:
        """Publish stubs claimed with ``claims.claim_stubs`` and record where each went (or
        why it failed); return how many were published.

        ``check_after(send_count)`` is the wait before the resend rule looks at a published
        stub again (default ``resend_check_ms``); ``keep_delay=False`` publishes a delayed
        stub for immediate delivery (a resend: its delay has long passed).
        """
        if not claimed:
            return 0
        try:
            producer = self._producer()
        except Exception as error:  # the broker's client could not be opened: nothing sent
            self._record([], [(item, PublishFailure.of(error)) for item in claimed])
            return 0
        now = self._now()
        done: list[dict[str, Any]] = []
        failed: list[tuple[ClaimedStub, PublishFailure]] = []
        for group in publish_groups(claimed, keep_delay, self.options.send_batch_max):
            for item, outcome in zip(group, self._send(producer, group, keep_delay),
                                     strict=True):
                if isinstance(outcome, PublishFailure):
                    failed.append((item, outcome))
                    continue
                # a delayed message's offset is in the delay (or timer) topic until the delay
                # (timer) service moves it: only the real queue is recorded, the offset stays
                # unknown (NULL)
                offset = None if _waiting(item, outcome, keep_delay) else outcome.queue_offset
                wait = check_after(item.send_count) if check_after else timedelta(
                    milliseconds=self.options.resend_check_ms)
                done.append({"b_id": item.message_id, "b_token": item.token,
                             "b_queue_id": outcome.queue_id, "b_queue_offset": offset,
                             "b_position": outcome.log_position,
                             "b_offset_msg_id": outcome.offset_msg_id, "b_next": now + wait})
        self._record(done, failed)
        return len(done)

    def _send(self, producer: Producer, group: list[ClaimedStub], keep_delay: bool
              ) -> list[SendResult | PublishFailure]:
        """Publish ``group`` (one stub, or a batch of one topic): each stub's result, or why
        it failed. A batch refused as invalid (nothing sent) is retried stub by stub, so that
        only the stub at fault fails."""
        started_s = time.monotonic()
        try:
            if len(group) == 1:
                item = group[0]
                results = [producer.send(
                    item.topic, item.content, tags=item.tags, keys=item.keys,
                    delay_level=item.delay_level if keep_delay else None,
                    deliver_at=item.deliver_at_ms if keep_delay else None,
                    properties=item.properties, unique_key=item.message_id,
                    message_group=item.message_group)]
            else:
                results = producer.send_batch(group[0].topic, [
                    BatchMessage(item.content, tags=item.tags, keys=item.keys,
                                 properties=item.properties, unique_key=item.message_id)
                    for item in group])
        except InvalidMessageError as error:
            if len(group) == 1:
                return [PublishFailure.of(error)]
            return [outcome for item in group
                    for outcome in self._send(producer, [item], keep_delay)]
        except Exception as error:  # the broker refused or failed: record, retry later
            return [PublishFailure.of(error)] * len(group)
        elapsed_s = time.monotonic() - started_s
        for _ in results:  # each stub's publish took the call's time
            self.stats.publish_latency.observe(elapsed_s)
        return list(results)

    def _record(self, done: list[dict[str, Any]],
                failed: list[tuple[ClaimedStub, PublishFailure]]) -> None:
        """Write what each publish did: where it went, or why it failed (a refused stub's
        attempt counts and may void it; an unavailable broker's is taken back)."""
        now = self._now()
        refused = [(item, failure) for item, failure in failed if failure.counts]
        unavailable = [(item, failure) for item, failure in failed if not failure.counts]
        wait_ms = 0
        if unavailable:
            now_ms = -((_EPOCH - now) // timedelta(milliseconds=1))  # rounded up: the poll
            # at the wait's end finds the stubs due (their next_resend_at is now + wait)
            wait_ms = self.outage.failed(now_ms, published=bool(done))
        elif done:
            self.outage.reachable()
        wait = timedelta(milliseconds=wait_ms)

        def write(connection: Connection) -> None:
            if done:
                connection.execute(_RECORD_PUBLISHED, [{**row, "b_now": now} for row in done])
            for item, failure in failed:
                values: dict[str, Any] = {
                    "last_error": failure.error[:2000], "lease_owner": None,
                    "lease_until": None, "updated_at": now}
                if not failure.counts:  # the claim counted an attempt the broker never judged
                    values.update(send_count=stub.send_count - 1, next_resend_at=now + wait)
                else:
                    values["next_resend_at"] = now + self._retry_delay(item.send_count)
                    if item.send_count >= self.options.max_send_count:
                        values["status"] = StubStatus.VOID.value
                connection.execute(update(message_stub).where(
                    stub.message_id == item.message_id, stub.lease_owner == item.token)
                    .values(**values))

        run_transaction(self.engine, write)
        if unavailable:
            log.warning("[relay] broker unavailable: %d stub(s) not published, trying again "
                        "in %d ms (%d failed pass(es) in a row; not counted toward "
                        "max_send_count): %s", len(unavailable), wait_ms,
                        self.outage.failures, unavailable[0][1].error)
        self.stats.failed += len(failed)
        self.stats.unavailable += len(unavailable)
        self._refused(refused)

    def _refused(self, refused: list[tuple[ClaimedStub, PublishFailure]]) -> None:
        """Log and count the stubs refused for their own reason; alert on those now void."""
        voided = [(item, failure.error) for item, failure in refused
                  if item.send_count >= self.options.max_send_count]
        for item, failure in refused:
            if item.send_count >= self.options.max_send_count:
                log.error("stub %s is void after %d failed publish attempts (last: %s); "
                          "an operator must re-arm it", item.message_id, item.send_count,
                          failure.error)
            else:
                log.warning("publishing stub %s failed (attempt %d): %s", item.message_id,
                            item.send_count, failure.error)
        self.stats.voided += len(voided)
        if voided and self.on_void is not None:
            self.on_void(voided)

    def _retry_delay(self, attempts: int) -> timedelta:
        delay_ms = min(self.options.retry_delay_ms * 2 ** max(attempts - 1, 0),
                       self.options.retry_delay_max_ms)
        return timedelta(milliseconds=delay_ms)

    def _lease(self) -> timedelta:
        return timedelta(milliseconds=self.options.lease_ms)

    def _producer(self) -> Producer:
        source = self._producer_source
        return source if isinstance(source, Producer) else source()

    # ---- the loop ------------------------------------------------------------------------------

    def start(self) -> Self:
        """Start the relay thread (hook notifications and polling); its first pass polls."""
        self._next_poll_ms = 0
        return super().start()

    def run_once(self, now_ms: int) -> int:
        """One pass at ``now_ms``: publish the notified stubs that are ready (one batch), or,
        with none, poll when the poll is due; return how many stubs were published.

        A failed pass is logged and counted (``stats.errors``); the next one waits 0.2 s,
        doubling per failure in a row up to ``FAILURE_BACKOFF_MAX_MS``. While the broker is
        unavailable no pass runs before the outage back-off's end (``outage``); ids handed over
        meanwhile wait for it.
        """
        if now_ms < self._resume_ms or self.outage.waiting(now_ms):
            return 0
        with self._condition:
            batch = self._take_ready()
        if not batch and now_ms < self._next_poll_ms:
            return 0
        try:
            if batch:
                published = self._publish_notified(batch)
            else:
                published = self.publish_due()
                self._next_poll_ms = now_ms + self.options.poll_interval_ms
            if self.outage.until_ms > now_ms:  # the pass met an outage: when its wait ends,
                # the first pass polls for the stubs it deferred
                self._next_poll_ms = min(self._next_poll_ms, self.outage.until_ms)
        except Exception:  # database or broker down: log, back off, keep the thread alive
            self.stats.errors += 1
            self._failures += 1
            log.exception("relay pass failed (%d in a row); retrying", self._failures)
            self._resume_ms = now_ms + min(100 * 2 ** self._failures, FAILURE_BACKOFF_MAX_MS)
            return 0
        self._failures = 0
        return published

    def idle_wait_ms(self, now_ms: int) -> int:
        """Until the next poll or the end of a back-off (0 while handed-over ids wait)."""
        with self._condition:
            wake_ms = now_ms if self._pending else self._next_poll_ms
        return max(wake_ms, self._resume_ms, self.outage.until_ms) - now_ms

    def _take_ready(self) -> list[str]:
        batch: list[str] = []
        while self._pending and len(batch) < self.options.batch_size:
            batch.append(self._pending.popleft())
        return batch

    def _publish_notified(self, message_ids: list[str]) -> int:
        """Publish ids the hook handed over: committed, so no re-reading; one a poll or
        another relay took meanwhile is simply not claimed."""
        published = 0
        for _ in range(GROUP_ROUNDS_MAX):
            claimed = self._claim(len(message_ids), message_ids)
            done = self.publish_claimed(claimed)
            published += done
            taken = {item.message_id for item in claimed}
            message_ids = [message_id for message_id in message_ids if message_id not in taken]
            if not done or not message_ids or not any(item.message_group for item in claimed):
                break  # ids held back behind a stub of their group just published go next
        self.stats.published_by_hook += published
        return published


def _waiting(item: ClaimedStub, outcome: SendResult, keep_delay: bool) -> bool:
    """Whether ``item``, just published, waits for a delay level or a timer (its offset is
    then not in its real queue yet)."""
    return outcome.delay_level > 0 or outcome.stored_topic != outcome.topic or (
        keep_delay and item.deliver_at_ms is not None
        and item.deliver_at_ms > int(time.time() * 1000))


def publish_groups(claimed: list[ClaimedStub], keep_delay: bool, batch_max: int
                   ) -> list[list[ClaimedStub]]:
    """``claimed`` in publish calls: the stubs of one topic together, in claim order, up to
    ``batch_max`` stubs and ``BATCH_CONTENT_MAX`` content bytes per call; a stub published
    with its delay or timer goes alone (a batch is never delayed), and so does a stub of a
    message group (its group's queue; a claim holds one stub per group at most)."""
    groups: list[list[ClaimedStub]] = []
    open_groups: dict[str, tuple[list[ClaimedStub], int]] = {}
    for item in claimed:
        if item.message_group is not None or (
                keep_delay and (item.delay_level or item.deliver_at_ms is not None)):
            groups.append([item])
            continue
        group, size = open_groups.get(item.topic, ([], 0))
        if group and (len(group) >= batch_max or size + len(item.content) > BATCH_CONTENT_MAX):
            group, size = [], 0
        if not group:
            groups.append(group)
        group.append(item)
        open_groups[item.topic] = (group, size + len(item.content))
    return groups


_EPOCH = datetime(1970, 1, 1)  # naive UTC, as ``now`` returns


class _MillisecondClock:
    """The relay's ``now`` function as a ``Clock`` (epoch milliseconds) for its loop."""

    def __init__(self, now: NowFunction) -> None:
        self._now = now

    def now_ms(self) -> int:
        """The database time in epoch milliseconds."""
        return (self._now() - _EPOCH) // timedelta(milliseconds=1)


def _default_owner() -> str:
    return f"{socket.gethostname()[:24]}:{os.getpid()}"


__all__ = ["PublishFailure", "Relay", "RelayOptions", "RelayStats"]
