"""The resend rule: find stubs whose message a consumer group moved past without, and send them
again — or give up on them (``void``) and raise an alert for manual handling.

A published stub is examined once its ``next_resend_at`` is due. For each consumer group it is
expected to reach — its ``expected_groups`` (declared to the ``Outbox`` when it was sent), else
``ResendRules.consumer_groups`` for its topic, else every group the broker knows on the topic
that has left a trace in the consumer tables — each (message, group) on its own:

- *done* — the group's ``message_processed`` row exists;
- *in flight* — the group's ``message_log`` row exists (received, not yet confirmed);
- *lost* — neither, and the group's progress on the stub's queue is past the stub's offset.
  Progress is the group's committed consumer offset, or, on a queue where it never committed,
  the highest offset it logged + 1; a message-log row is written on receipt, before the
  handler runs, so a message being worked on is never *lost*. Once the message was resent to
  the group, the queue and offset that count are those of the copy in the group's retry topic
  (``message_resend``): a group that is down is not past its copy, and waits for it.

Then:

=====================================  ======================================================
every group *done*                     the stub is confirmed (its consumer's database said so
                                       while the stub's did not — e.g. they are different
                                       databases)
some group *lost*, first seen          ``overtaken_at`` = now: the grace period starts
                                       (an offset assigned early may become visible late;
                                       concurrent consumers log out of order)
some group *lost* for ``grace``        resend to each lost group alone: claim
                                       (``send_count + 1``), store a copy with the same
                                       message id in the group's ``%RETRY%group`` topic
                                       (``Producer.send_to_group``: the group's consumers
                                       restore the original topic, no other group sees it),
                                       record where it went in ``message_resend``;
                                       ``next_resend_at`` = now + backoff
… and ``send_count >= max``            ``void`` + one alert ``exhausted`` per lost group
otherwise                              look again after ``recheck``
=====================================  ======================================================

A delayed stub's offset in its real queue is unknown until the delay service delivers it; it
is looked up by message id in the store's key index, and the stub waits until it is found.

Dead letters: a message that a consumer group dead-lettered (retries exhausted, or the handler
raised ``DeadLetter``) is in ``%DLQ%group``. ``void_dead_lettered`` reads each group's
dead-letter queue from a cursor and, for every (message, group) the stub expects (any group
when it names none) and that group has not processed, raises one alert ``dead_lettered``
naming the group, whatever other groups did; the stub becomes ``void`` (unless it is already
confirmed) and its ``last_error`` names every group that dead-lettered it. Both are the
manual-handling cases: ``postbox outbox list --status void`` shows them and ``postbox outbox
rearm`` sends them again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    RowMapping,
    and_,
    bindparam,
    func,
    select,
    update,
)

from postbox.framework import App, ConsumedMessage

from .alerts import Alert, Alerter, AlertKind, AlertReport
from .claims import ClaimedStub, claim_stubs, group_head, lease_free
from .clock import NowFunction, utc_now
from .database import run_transaction
from .group_state import group_pairs, record_resends, resent_copies, with_dead_letter_reason
from .options import ResendRules
from .relay import Relay
from .tables import (
    StubStatus,
    expected_group_names,
    message_log,
    message_processed,
    message_resend,
    message_stub,
)

log = logging.getLogger(__name__)
stub = message_stub.c
logged = message_log.c
processed = message_processed.c
resent = message_resend.c

DEAD_LETTER_PAGE = 100
DEAD_LETTER_PAGES_PER_RUN = 20
GROUP_EVIDENCE_TTL_S = 60.0


@dataclass
class ResendReport:
    """What one pass did."""

    examined: int = 0
    resent: int = 0
    exhausted: int = 0
    """Stubs made void because ``max_send_count`` sends were not enough."""
    dead_lettered: int = 0
    """Stubs made void because their message was dead-lettered."""
    confirmed: int = 0
    grace_started: int = 0
    waiting: int = 0
    """Lost stubs still inside their grace period, and delayed stubs not delivered yet."""
    rechecked: int = 0
    alerts: list[AlertReport] = field(default_factory=list)


@dataclass
class ResendStats:
    """Totals of every pass since the resender was made (metrics)."""

    resent: int = 0
    exhausted: int = 0
    dead_lettered: int = 0


@dataclass(frozen=True, slots=True)
class _Candidate:
    message_id: str
    topic: str
    queue_id: int | None
    queue_offset: int | None
    send_count: int
    overtaken_at: datetime | None
    expected_groups: str | None = None


@dataclass
class _Plan:
    confirm: list[str] = field(default_factory=list)
    start_grace: list[str] = field(default_factory=list)
    resend: dict[str, list[str]] = field(default_factory=dict)
    """Message id → the groups that lost it."""
    exhaust: list[tuple[_Candidate, list[str]]] = field(default_factory=list)
    recheck: list[str] = field(default_factory=list)
    wait_until: dict[str, datetime] = field(default_factory=dict)


class Resender:
    """Applies the resend rule and the dead-letter rule to one database's stubs.

    Args:
        app: the application whose broker holds the messages (its producer publishes).
        engine: the database with ``message_stub``.
        relay: the app's relay; each resent copy's publish time is counted in its
            ``publish_latency`` (the ``postbox_outbox_publish_seconds`` histogram).
        rules: the resend rule.
        alerter: where void stubs are reported.
        log_engine: the consumers' database (``message_log``/``message_processed``) when it
            is not ``engine``.
        owner: lease owner name for claims.
        now: database time source (naive UTC).
    """

    def __init__(self, app: App, engine: Engine, relay: Relay, *, rules: ResendRules,
                 alerter: Alerter, log_engine: Engine | None = None, owner: str,
                 now: NowFunction = utc_now) -> None:
        self.app = app
        self.engine = engine
        self.log_engine = log_engine or engine
        self.relay = relay
        self.rules = rules
        self.alerter = alerter
        self.owner = owner
        self._now = now
        self._evidence: dict[tuple[str, str], bool | float] = {}
        self.stats = ResendStats()

    # ---- the resend rule ---------------------------------------------------------------------

    def resend_due(self) -> ResendReport:
        """One pass over up to ``batch_size`` due stubs."""
        report = ResendReport()
        now = self._now()
        candidates = self._due(now)
        report.examined = len(candidates)
        if not candidates:
            return report
        candidates = self._locate_delayed(candidates, now, report)
        plan = self._plan(candidates, now)
        self._apply(plan, now, report)
        if plan.resend:
            # still lost past its grace, as planned: an overlapping pass that resent it first
            # has cleared overtaken_at and moved next_resend_at on
            grace = timedelta(milliseconds=self.rules.grace_ms)
            claimed = claim_stubs(
                self.engine, and_(self._published_unconfirmed(),
                                  stub.send_count < self.rules.max_send_count,
                                  stub.next_resend_at <= now, stub.overtaken_at <= now - grace,
                                  group_head()),
                owner=self.owner, now=now, lease=timedelta(milliseconds=self.rules.lease_ms),
                limit=len(plan.resend), message_ids=list(plan.resend))
            report.resent = self._resend_to_groups(claimed, plan.resend)
            self.stats.resent += report.resent
            if claimed:
                log.info("resent %d stubs a consumer group moved past (of %d due)",
                         report.resent, len(claimed))
        if plan.exhaust:
            alerts = self._exhaust(plan.exhaust, now)
            report.exhausted = len(alerts)
            self.stats.exhausted += report.exhausted
            report.alerts.append(self.alerter.fire(alerts))
        return report

    @staticmethod
    def _published_unconfirmed() -> Any:
        return and_(stub.status == StubStatus.UNCONFIRMED.value, stub.published_at.is_not(None))

    def _due(self, now: datetime) -> list[_Candidate]:
        query = (select(stub.message_id, stub.topic, stub.queue_id, stub.queue_offset,
                        stub.send_count, stub.overtaken_at, stub.expected_groups)
                 .where(self._published_unconfirmed(), stub.next_resend_at <= now,
                        lease_free(now))
                 .order_by(stub.next_resend_at).limit(self.rules.batch_size))
        with self.engine.connect() as connection:
            return [_Candidate(*row) for row in connection.execute(query)]

    def _locate_delayed(self, candidates: list[_Candidate], now: datetime,
                        report: ResendReport) -> list[_Candidate]:
        """Fill in the real-queue offset of delayed stubs the delay service delivered."""
        located: list[_Candidate] = []
        found: list[dict[str, Any]] = []
        undelivered: list[str] = []
        for item in candidates:
            if item.queue_offset is not None:
                located.append(item)
                continue
            views = [view for view in self.app.client.find_by_unique_key(item.topic,
                                                                         item.message_id)
                     if view.topic == item.topic]
            if not views:
                report.waiting += 1  # still in the delay topic (or the index lags)
                undelivered.append(item.message_id)
                continue
            view = min(views, key=lambda found_view: found_view.queue_offset)
            found.append({"b_id": item.message_id, "b_queue_id": view.queue_id,
                          "b_queue_offset": view.queue_offset})
            located.append(_Candidate(item.message_id, item.topic, view.queue_id,
                                      view.queue_offset, item.send_count, item.overtaken_at,
                                      item.expected_groups))
        if found:
            run_transaction(self.engine, lambda connection: connection.execute(
                update(message_stub).where(stub.message_id == bindparam("b_id"),
                                           stub.queue_offset.is_(None))
                .values(queue_id=bindparam("b_queue_id"),
                        queue_offset=bindparam("b_queue_offset"), updated_at=now), found))
        if undelivered:  # look again after recheck, not at the head of every pass
            recheck_at = now + timedelta(milliseconds=self.rules.recheck_ms)
            run_transaction(self.engine, lambda connection: connection.execute(
                update(message_stub).where(stub.message_id.in_(undelivered),
                                           stub.queue_offset.is_(None), lease_free(now))
                .values(next_resend_at=recheck_at, updated_at=now)))
        return located

    def _plan(self, candidates: list[_Candidate], now: datetime) -> _Plan:
        queues: dict[str, list[Any]] = {}  # group → its QueueProgress, read once per pass
        names = self._expected(candidates, queues)
        topics = sorted({item.topic for item in candidates})
        all_groups = sorted({group for groups in names.values() for group in groups})
        ids = [item.message_id for item in candidates]
        with self.engine.connect() as connection:
            copies = resent_copies(connection, ids, all_groups)
        retry_topics = {topic for topic, _, _ in copies.values()}
        progress = self._progress(all_groups, sorted({*topics, *retry_topics}), queues)
        with self.log_engine.connect() as connection:
            in_flight = group_pairs(connection, message_log, ids, all_groups)
            done = group_pairs(connection, message_processed, ids, all_groups)
        grace = timedelta(milliseconds=self.rules.grace_ms)
        plan = _Plan()
        for item in candidates:
            # _locate_delayed kept located stubs only
            assert item.queue_id is not None and item.queue_offset is not None
            key = item.message_id
            groups = names[key]
            if groups and all((group, key) in done for group in groups):
                plan.confirm.append(key)
                continue
            lost = []
            for group in groups:
                if (group, key) in done or (group, key) in in_flight:
                    continue
                topic, queue_id, offset = copies.get(
                    (group, key), (item.topic, item.queue_id, item.queue_offset))
                if (offset is not None and queue_id is not None
                        and progress.get((group, topic, queue_id), -1) > offset):
                    lost.append(group)
            if not lost:
                plan.recheck.append(key)
            elif item.overtaken_at is None:
                plan.start_grace.append(key)
            elif now - item.overtaken_at < grace:
                plan.wait_until[key] = item.overtaken_at + grace
            elif item.send_count >= self.rules.max_send_count:
                plan.exhaust.append((item, lost))
            else:
                plan.resend[key] = lost
        return plan

    def _expected(self, candidates: list[_Candidate],
                  queues: dict[str, list[Any]]) -> dict[str, list[str]]:
        """Message id → the groups whose progress decides: the stub's own expected groups,
        else those of its topic (configured, else discovered once per topic)."""
        by_topic: dict[str, list[str]] = {}
        names: dict[str, list[str]] = {}
        for item in candidates:
            declared = expected_group_names(item.expected_groups)
            if declared is None:
                if item.topic not in by_topic:
                    by_topic[item.topic] = self._groups(item.topic, queues)
                names[item.message_id] = by_topic[item.topic]
            else:
                names[item.message_id] = list(declared)
        return names

    def _queues(self, group: str, queues: dict[str, list[Any]]) -> list[Any]:
        """The group's ``QueueProgress`` list, asked of the broker once per pass."""
        if group not in queues:
            queues[group] = self.app.client.consumer_progress(group)
        return queues[group]

    def _groups(self, topic: str, queues: dict[str, list[Any]]) -> list[str]:
        configured = self.rules.consumer_groups.get(topic)
        if configured is not None:
            return list(configured)
        return [group for group in self.app.client.consumer_groups()
                if any(queue.topic == topic for queue in self._queues(group, queues))
                and self._logs_topic(group, topic)]

    def _logs_topic(self, group: str, topic: str) -> bool:
        """Whether ``group`` has ever logged or processed a message of ``topic`` here — an
        idempotent consumer whose progress means something. A plain consumer moves past
        stubs without a trace and must not make them look lost. Positive answers are kept;
        negative ones are asked again after ``GROUP_EVIDENCE_TTL_S``."""
        key = (group, topic)
        seen = self._evidence.get(key)
        now_s = time.monotonic()
        if seen is True or (seen is not None and now_s - seen < GROUP_EVIDENCE_TTL_S):
            return seen is True
        with self.log_engine.connect() as connection:
            found = any(connection.execute(
                select(table.c.message_id).where(table.c.consumer_group == group,
                                                 table.c.topic == topic).limit(1)).first()
                        for table in (message_log, message_processed))
        self._evidence[key] = True if found else now_s
        return found

    def _progress(self, groups: list[str], topics: list[str],
                  queues: dict[str, list[Any]]) -> dict[tuple[str, str, int], int]:
        """(group, topic, queue id) → the group's progress there: the committed offset, else
        the highest logged offset + 1."""
        progress: dict[tuple[str, str, int], int] = {}
        wanted = set(topics)
        for group in groups:
            for queue in self._queues(group, queues):
                if queue.topic in wanted and queue.committed_offset is not None:
                    progress[(group, queue.topic, queue.queue_id)] = queue.committed_offset
        if groups:
            query = (select(logged.consumer_group, logged.topic, logged.queue_id,
                            func.max(logged.queue_offset))
                     .where(logged.consumer_group.in_(groups), logged.topic.in_(topics),
                            logged.queue_offset.is_not(None))
                     .group_by(logged.consumer_group, logged.topic, logged.queue_id))
            with self.log_engine.connect() as connection:
                for group, topic, queue_id, highest in connection.execute(query):
                    # only where no offset was committed: a committed offset is the consumer's
                    # own word, while a log row stays behind a failing message and later
                    # offsets may simply not have been received yet
                    progress.setdefault((group, topic, queue_id), highest + 1)
        return progress

    def _apply(self, plan: _Plan, now: datetime, report: ResendReport) -> None:
        recheck_at = now + timedelta(milliseconds=self.rules.recheck_ms)
        grace_ends = now + timedelta(milliseconds=self.rules.grace_ms)
        fence = (self._published_unconfirmed(), lease_free(now))

        def write(connection: Connection) -> None:
            if plan.confirm:
                connection.execute(update(message_stub).where(
                    stub.message_id.in_(plan.confirm), *fence).values(
                    status=StubStatus.CONFIRMED.value, confirmed_at=now, updated_at=now))
            if plan.start_grace:
                connection.execute(update(message_stub).where(
                    stub.message_id.in_(plan.start_grace), *fence).values(
                    overtaken_at=now, next_resend_at=grace_ends, updated_at=now))
            if plan.recheck:
                connection.execute(update(message_stub).where(
                    stub.message_id.in_(plan.recheck), *fence).values(
                    overtaken_at=None, next_resend_at=recheck_at, updated_at=now))
            for message_id, due in plan.wait_until.items():
                connection.execute(update(message_stub).where(
                    stub.message_id == message_id, *fence).values(next_resend_at=due))

        run_transaction(self.engine, write)
        report.confirmed = len(plan.confirm)
        report.grace_started = len(plan.start_grace)
        report.rechecked = len(plan.recheck)
        report.waiting += len(plan.wait_until)

    def _exhaust(self, exhausted: list[tuple[_Candidate, list[str]]],
                 now: datetime) -> list[Alert]:
        alerts: list[Alert] = []

        def write(connection: Connection) -> None:
            alerts.clear()
            for item, groups in exhausted:
                reason = (f"not confirmed after {item.send_count} sends: consumer group(s) "
                          f"{', '.join(groups)} moved past queue {item.queue_id} offset "
                          f"{item.queue_offset} without it")
                changed = connection.execute(update(message_stub).where(
                    stub.message_id == item.message_id, self._published_unconfirmed(),
                    stub.send_count >= self.rules.max_send_count, lease_free(now)).values(
                    status=StubStatus.VOID.value, last_error=reason, updated_at=now,
                    lease_owner=None, lease_until=None)).rowcount
                if changed:
                    alerts.extend(Alert(AlertKind.EXHAUSTED, item.message_id, item.topic,
                                        item.send_count, reason, now, group)
                                  for group in groups)

        run_transaction(self.engine, write)
        return alerts

    def _resend_to_groups(self, claimed: list[ClaimedStub], lost: dict[str, list[str]]) -> int:
        """Send each claimed stub again to the groups that lost it, each through its own retry
        topic; record where the copies went and release the claims. A stub that reached no
        group (the broker down or refusing: the message itself was accepted before) gets its
        claim's send back, so an outage never counts toward voiding it. Returns how many stubs
        reached at least one group."""
        producer = self.app.producer
        copies: list[dict[str, Any]] = []
        outcomes: list[dict[str, Any]] = []
        now = self._now()
        held: set[tuple[str, str]] = set()  # (message group, consumer group) a resend failed
        for item in sorted(claimed, key=_group_order):
            errors: list[str] = []
            for group in lost.get(item.message_id, []):
                if item.message_group is not None and (item.message_group, group) in held:
                    errors.append(f"resend to {group} waits for an earlier message of group "
                                  f"{item.message_group}")
                    continue
                started_s = time.monotonic()
                try:
                    result = producer.send_to_group(
                        group, item.topic, item.content, tags=item.tags, keys=item.keys,
                        properties=item.properties, unique_key=item.message_id)
                except Exception as error:  # broker down or refusing: the next pass retries
                    errors.append(f"resend to {group} failed: {type(error).__name__}: {error}")
                    if item.message_group is not None:
                        held.add((item.message_group, group))
                    continue
                self.relay.stats.publish_latency.observe(time.monotonic() - started_s)
                copies.append({"consumer_group": group, "message_id": item.message_id,
                               "topic": result.stored_topic, "queue_id": result.stored_queue_id,
                               "queue_offset": result.queue_offset, "resent_at": now})
            reached = any(copy["message_id"] == item.message_id for copy in copies)
            outcomes.append({"b_id": item.message_id, "b_token": item.token,
                             "b_error": "; ".join(errors)[:2000] or None,
                             "b_next": now + self.rules.backoff(item.send_count),
                             "b_uncounted": 0 if reached else 1})
            for problem in errors:
                log.warning("stub %s: %s", item.message_id, problem)
        record_resends(self.engine, copies, outcomes, now)
        return len({copy["message_id"] for copy in copies})

    def relay_voided(self, voided: list[tuple[ClaimedStub, str]]) -> None:
        """Alert on stubs the relay voided after ``max_send_count`` failed publishes."""
        now = self._now()
        self.alerter.fire([Alert(AlertKind.EXHAUSTED, item.message_id, item.topic,
                                 item.send_count, f"send {item.send_count} of "
                                 f"{item.send_count} failed to publish: {error}", now)
                           for item, error in voided])

    # ---- the dead-letter rule ----------------------------------------------------------------

    def void_dead_lettered(self, cursors: dict[str, int]) -> ResendReport:
        """Void the stubs of messages dead-lettered since ``cursors`` (group → next DLQ
        offset; updated in place) and alert on them."""
        report = ResendReport()
        now = self._now()
        alerts: list[Alert] = []
        for group in self.app.client.consumer_groups():
            offset = cursors.get(group, 0)
            for _ in range(DEAD_LETTER_PAGES_PER_RUN):
                letters = self.app.client.dead_letters(group, offset, DEAD_LETTER_PAGE)
                if not letters:
                    break
                report.examined += len(letters)
                alerts.extend(self._void_letters(group, letters, now))
                offset = letters[-1].queue_offset + 1
            cursors[group] = offset
        report.dead_lettered = len(alerts)
        self.stats.dead_lettered += report.dead_lettered
        if alerts:
            report.alerts.append(self.alerter.fire(alerts))
        return report

    def _void_letters(self, group: str, letters: Sequence[Any], now: datetime) -> list[Alert]:
        reasons: dict[str, str] = {}
        for letter in letters:
            dead = ConsumedMessage(letter, group)
            if letter.unique_key:  # the stub's id: copies keep the UNIQ_KEY of the original
                reasons[letter.unique_key] = dead.dead_letter_reason or "retries exhausted"
        if not reasons:
            return []
        with self.log_engine.connect() as connection:
            done = group_pairs(connection, message_processed, list(reasons), [group])
        alerts: list[Alert] = []

        def write(connection: Connection) -> None:
            alerts.clear()
            rows: Sequence[RowMapping] = connection.execute(
                select(stub.message_id, stub.topic, stub.send_count, stub.status,
                       stub.expected_groups, stub.last_error).where(
                    stub.message_id.in_(list(reasons)))).mappings().all()
            for row in rows:
                expected = expected_group_names(row["expected_groups"])
                if (group, row["message_id"]) in done or (
                        expected is not None and group not in expected):
                    continue  # this group did it after all, or the stub does not wait for it
                prefix = f"dead-lettered by consumer group {group}: "
                if prefix in (row["last_error"] or ""):
                    continue  # alerted already (a dead-letter queue read again)
                reason = prefix + reasons[row["message_id"]]
                changed = connection.execute(update(message_stub).where(
                    stub.message_id == row["message_id"], stub.status == row["status"]).values(
                    status=row["status"] if row["status"] == StubStatus.CONFIRMED.value
                    else StubStatus.VOID.value,
                    last_error=with_dead_letter_reason(row, reason), updated_at=now,
                    lease_owner=None, lease_until=None)).rowcount
                if changed:
                    alerts.append(Alert(AlertKind.DEAD_LETTERED, row["message_id"],
                                        row["topic"], row["send_count"], reason, now, group))

        run_transaction(self.engine, write)
        return alerts


def _group_order(item: ClaimedStub) -> tuple[str, str, str]:
    """Resends in send order within each message group (the others keep claim order)."""
    if item.message_group is None:
        return "", "", ""
    sent = item.created_at.isoformat(sep=" ", timespec="microseconds") if item.created_at \
        else ""
    return item.message_group, sent, item.message_id


def retention_horizon(rules: ResendRules, consumer_retry: timedelta,
                      margin: timedelta = timedelta(hours=1)) -> timedelta:
    """How long a message may still arrive after it was first sent: every resend, each
    followed by the consumer's whole retry schedule, plus ``margin`` for clock skew."""
    return rules.horizon() + consumer_retry * rules.max_send_count + margin

__all__ = ["ResendReport", "ResendRules", "Resender", "retention_horizon"]
