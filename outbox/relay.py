"""The relay: publishes committed stubs to the broker and records where they went.

Two ways in, one way out:
- **After-commit hook.** ``attach()`` marks the engine; ``outbox.send`` then remembers each id on
  its connection, and the engine's commit event hands them to the relay thread. The event fires
  just before the database commits, so an id the relay cannot see yet is tried again a few
  milliseconds later (``hook_retry_delays_ms``) before the poller is left to find it; an id
  whose transaction rolled back simply never appears.
- **Polling.** Every ``poll_interval_ms`` the relay claims due, never-published stubs —
  whatever the hook missed: a crash between commit and publish, another process's sends, a
  failed attempt waiting for its retry time.

Either way a stub is first *claimed* (``claims.claim_stubs``: ``send_count + 1`` and a lease,
``SKIP LOCKED`` where the database has it), so several relays never publish one stub at the
same time; then published with its own message id as ``UNIQ_KEY``; then its queue id, queue
offset, log position and offsetMsgId are recorded under the claim token. A crash after the
publish and before the record leaves the lease to expire and the stub to be published again:
the relay is at-least-once, and consumers deduplicate by message id (``idempotency``). A failed
attempt records ``last_error`` and a retry time; after ``max_send_count`` attempts the stub
becomes ``void`` for an operator to handle.
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
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, event, select, update

from framework import Producer

from .claims import ClaimedStub, claim_stubs, unpublished_due
from .clock import NowFunction, utc_now
from .database import run_transaction
from .send import PENDING_IDS_INFO_KEY, RELAY_EXECUTION_OPTION
from .tables import StubStatus, message_stub

log = logging.getLogger(__name__)
stub = message_stub.c


_RECORD_PUBLISHED = update(message_stub).where(
    stub.message_id == bindparam("b_id"), stub.lease_owner == bindparam("b_token")).values(
    queue_id=bindparam("b_queue_id"), queue_offset=bindparam("b_queue_offset"),
    log_position=bindparam("b_position"), offset_msg_id=bindparam("b_offset_msg_id"),
    published_at=bindparam("b_now"), lease_owner=None, lease_until=None, last_error=None,
    updated_at=bindparam("b_now"), overtaken_at=None, next_resend_at=bindparam("b_next"))
"""Where a publish went, fenced by the claim token; built once (one executemany per batch)."""


@dataclass(frozen=True)
class RelayOptions:
    """Relay tuning; the defaults suit one relay per application process."""

    batch_size: int = 100
    poll_interval_ms: int = 1_000
    lease_ms: int = 30_000
    """How long a claim holds a stub; a relay that dies holding it blocks it this long."""
    max_send_count: int = 5
    retry_delay_ms: int = 1_000
    """Wait before retrying a failed publish; doubles per attempt up to ``retry_delay_max_ms``."""
    retry_delay_max_ms: int = 60_000
    resend_check_ms: int = 60_000
    """After a publish, ``next_resend_at`` = now + this: the earliest the resend rule looks."""
    hook_retry_delays_ms: tuple[int, ...] = (2, 10, 50, 250, 1_000)
    max_pending_notifications: int = 100_000


@dataclass
class RelayStats:
    """Counters since the relay was made."""

    published_by_hook: int = 0
    published_by_poll: int = 0
    failed: int = 0
    voided: int = 0
    errors: int = 0

    @property
    def published(self) -> int:
        """Stubs published, by hook and by poll."""
        return self.published_by_hook + self.published_by_poll


@dataclass(order=True)
class _Notification:
    due_s: float
    message_id: str = field(compare=False)
    attempt: int = field(default=0, compare=False)


ProducerSource = Producer | Callable[[], Producer]


class Relay:
    """Publishes stubs of one database through one producer.

    Args:
        producer: the producer to publish with, or a function returning it (``lambda:
            app.producer``, so the broker opens only when the relay first publishes).
        engine: the engine whose ``message_stub`` table this relay serves.
        owner: a name for this relay in ``lease_owner`` (default: host and pid).
        now: database time source (naive UTC).
    """

    def __init__(self, producer: ProducerSource, engine: Engine, *,
                 options: RelayOptions | None = None, owner: str | None = None,
                 now: NowFunction = utc_now) -> None:
        self._producer_source = producer
        self.engine = engine
        self.options = options or RelayOptions()
        self.owner = owner or _default_owner()
        self._now = now
        self.stats = RelayStats()
        self._pending: collections.deque[_Notification] = collections.deque()
        self._retries: list[_Notification] = []
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._attached = False
        self.on_void: Callable[[list[tuple[ClaimedStub, str]]], None] | None = None
        """Called (after the commit) with the stubs this relay voided and their last error —
        the resend worker raises its alerts here."""

    # ---- the after-commit hook ---------------------------------------------------------------

    def attach(self) -> None:
        """Watch the engine: ids sent through it reach this relay as their transaction commits."""
        if self._attached:
            return
        self.engine.update_execution_options(**{RELAY_EXECUTION_OPTION: True})
        event.listen(self.engine, "commit", self._on_commit)
        event.listen(self.engine, "rollback", self._on_rollback)
        self._attached = True

    def detach(self) -> None:
        """Stop watching the engine."""
        if not self._attached:
            return
        self.engine.update_execution_options(**{RELAY_EXECUTION_OPTION: False})
        event.remove(self.engine, "commit", self._on_commit)
        event.remove(self.engine, "rollback", self._on_rollback)
        self._attached = False

    def _on_commit(self, connection: Any) -> None:
        ids = connection.info.pop(PENDING_IDS_INFO_KEY, None)
        if ids:
            self.notify(ids)

    @staticmethod
    def _on_rollback(connection: Any) -> None:
        connection.info.pop(PENDING_IDS_INFO_KEY, None)

    def notify(self, message_ids: Iterable[str]) -> None:
        """Ask for these stubs to be published soon (the hook calls this)."""
        now_s = time.monotonic()
        with self._condition:
            room = self.options.max_pending_notifications - len(self._pending)
            for message_id in list(message_ids)[:max(room, 0)]:
                self._pending.append(_Notification(now_s, message_id))
            self._condition.notify()

    # ---- publishing ----------------------------------------------------------------------------

    def publish_due(self, limit: int | None = None) -> int:
        """One polling pass: claim and publish due, never-published stubs; return how many
        were published."""
        published = self.publish_claimed(self._claim(limit or self.options.batch_size))
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

    def run_once(self) -> int:
        """Publish everything notified so far, then one polling pass (for tasks and tests)."""
        with self._condition:
            batch = [item.message_id for item in self._pending]
            self._pending.clear()
        published = 0
        for start in range(0, len(batch), self.options.batch_size):
            published += self.publish_ids(batch[start:start + self.options.batch_size])[0]
        return published + self.publish_due()

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
        producer = self._producer()
        now = self._now()
        done: list[dict[str, Any]] = []
        failed: list[tuple[ClaimedStub, str]] = []
        for item in claimed:
            delay_level = item.delay_level if keep_delay else None
            try:
                result = producer.send(item.topic, item.content, tags=item.tags, keys=item.keys,
                                       delay_level=delay_level, properties=item.properties,
                                       unique_key=item.message_id)
            except Exception as error:  # the broker refused or failed: record, retry later
                failed.append((item, f"{type(error).__name__}: {error}"))
                continue
            # a delayed message's offset is in the delay topic until the delay service moves
            # it: only the real queue is recorded, the offset stays unknown (NULL)
            offset = None if result.delay_level > 0 else result.queue_offset
            wait = check_after(item.send_count) if check_after else timedelta(
                milliseconds=self.options.resend_check_ms)
            done.append({"b_id": item.message_id, "b_token": item.token,
                         "b_queue_id": result.queue_id, "b_queue_offset": offset,
                         "b_position": result.log_position,
                         "b_offset_msg_id": result.offset_msg_id, "b_next": now + wait})
        self._record(done, failed)
        return len(done)

    def _record(self, done: list[dict[str, Any]], failed: list[tuple[ClaimedStub, str]]) -> None:
        now = self._now()

        def write(connection: Connection) -> None:
            if done:
                connection.execute(_RECORD_PUBLISHED, [{**row, "b_now": now} for row in done])
            for item, error in failed:
                values: dict[str, Any] = {
                    "last_error": error[:2000], "lease_owner": None, "lease_until": None,
                    "updated_at": now, "next_resend_at": now + self._retry_delay(item.send_count)}
                if item.send_count >= self.options.max_send_count:
                    values["status"] = StubStatus.VOID.value
                connection.execute(update(message_stub).where(
                    stub.message_id == item.message_id, stub.lease_owner == item.token)
                    .values(**values))

        run_transaction(self.engine, write)
        voided = [(item, error) for item, error in failed
                  if item.send_count >= self.options.max_send_count]
        for item, error in failed:
            if item.send_count >= self.options.max_send_count:
                log.error("stub %s is void after %d failed publish attempts (last: %s); "
                          "an operator must re-arm it", item.message_id, item.send_count, error)
            else:
                log.warning("publishing stub %s failed (attempt %d): %s", item.message_id,
                            item.send_count, error)
        self.stats.failed += len(failed)
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

    # ---- the thread ----------------------------------------------------------------------------

    def start(self) -> Relay:
        """Start the relay thread (hook notifications and polling)."""
        with self._condition:
            if self._thread is not None:
                return self
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="postbox-relay", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread; stubs not yet published stay for the next relay's poll."""
        with self._condition:
            thread, self._thread = self._thread, None
            self._stopping = True
            self._condition.notify_all()
        if thread is not None:
            thread.join(timeout_s)

    def _run(self) -> None:
        next_poll_s = time.monotonic()
        failures = 0
        while True:
            with self._condition:
                if self._stopping:
                    return
                now_s = time.monotonic()
                batch = self._take_ready(now_s)
                if not batch and now_s < next_poll_s:
                    self._condition.wait(self._wait_s(now_s, next_poll_s))
                    continue
            try:
                if batch:
                    self._publish_notified(batch)
                else:
                    self.publish_due()
                    next_poll_s = time.monotonic() + self.options.poll_interval_ms / 1000
                failures = 0
            except Exception:  # database or broker down: log, back off, keep the thread alive
                self.stats.errors += 1
                failures += 1
                log.exception("relay pass failed (%d in a row); retrying", failures)
                with self._condition:
                    self._condition.wait(min(0.1 * 2 ** failures, 5.0))

    def _take_ready(self, now_s: float) -> list[_Notification]:
        batch: list[_Notification] = []
        while self._pending and len(batch) < self.options.batch_size:
            batch.append(self._pending.popleft())
        keep: list[_Notification] = []
        for item in self._retries:
            (batch if item.due_s <= now_s and len(batch) < self.options.batch_size
             else keep).append(item)
        self._retries = keep
        return batch

    def _wait_s(self, now_s: float, next_poll_s: float) -> float:
        wake_s = min([next_poll_s, *(item.due_s for item in self._retries)])
        return max(wake_s - now_s, 0.0005)

    def _publish_notified(self, batch: list[_Notification]) -> None:
        attempts = {item.message_id: item.attempt for item in batch}
        _, unseen = self.publish_ids(list(attempts))
        delays = self.options.hook_retry_delays_ms
        now_s = time.monotonic()
        with self._condition:
            for message_id in unseen:  # not committed yet (or rolled back): look again soon
                attempt = attempts[message_id]
                if attempt < len(delays):
                    self._retries.append(_Notification(now_s + delays[attempt] / 1000,
                                                       message_id, attempt + 1))


def _default_owner() -> str:
    return f"{socket.gethostname()[:24]}:{os.getpid()}"


__all__ = ["Relay", "RelayOptions", "RelayStats"]
