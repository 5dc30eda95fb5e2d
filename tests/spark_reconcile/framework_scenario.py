"""A store and database put in a known state by the real framework: every class present.

One consumer group (``billing``) on ``orders`` behind the idempotency middleware and a fault
injector that drops first deliveries; a topic nobody consumes (``audit``). What each kind of
message does, and the class it must end in:

- ``ok`` → handled → ``confirmed``.
- ``poison`` → the handler raises ``DeadLetter`` → ``%DLQ%billing`` → ``dead_lettered``.
- ``stuck`` → the handler keeps failing; RocketMQ's delay levels (10 s before the first retry)
  keep it waiting in the delay topic with its log row → ``in_flight``.
- ``lose`` (first batch) → first delivery dropped; the resend rule with ``max_send_count=1``
  gives up on it → void → ``exhausted``.
- ``lose`` (second batch, after the resend pass) → dropped, never resent → ``lost``.
- on ``audit`` → published, no consumer → ``pending``.
- ``stuck`` / ``poison`` sent with ``app.send`` (no stub) → ``orphan_log`` / ``dlq_without_stub``
  (a poison message's log row stays too: the middleware keeps the receipt of a failed attempt).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select

from examples.payments.faults import FaultInjector
from postbox import migrations, outbox
from postbox.framework import App, ConsumerOptions, DeadLetter
from postbox.outbox.resend import ResendRules
from postbox.outbox.tables import StubStatus, message_log, message_stub
from postbox.outbox.worker import OutboxWorker
from tests.idempotency.process_support import stub_counts
from tests.support.polling import wait_until

TOPIC = "orders"
AUDIT_TOPIC = "audit"
GROUP = "billing"
FAST = ConsumerOptions(persist_interval_ms=100, long_polling_ms=100)
WAIT_S = 30.0


@dataclass(frozen=True)
class ScenarioCounts:
    """How many messages of each kind the scenario sends."""

    ok: int = 30
    poison: int = 4
    stuck: int = 3
    lose_exhausted: int = 3
    lose_lost: int = 2
    audit: int = 5
    plain_stuck: int = 2
    plain_poison: int = 2

    def expected(self) -> dict[str, int]:
        """The classification every run must find."""
        return {"confirmed": self.ok, "dead_lettered": self.poison, "in_flight": self.stuck,
                "exhausted": self.lose_exhausted, "lost": self.lose_lost,
                "pending": self.audit, "orphan_log": self.plain_stuck + self.plain_poison,
                "dlq_without_stub": self.plain_poison}


class StuckError(RuntimeError):
    """The handler of a ``stuck`` message always fails."""


def bill(message, session) -> None:
    kind = json.loads(message.body)["kind"]
    if kind == "poison":
        raise DeadLetter("card declined permanently")
    if kind == "stuck":
        raise StuckError("processor timed out")


def build_scenario(store_dir: Path, database_url: str, redis_url: str | None,
                   counts: ScenarioCounts = ScenarioCounts(),
                   during: Callable[[App], None] | None = None) -> dict[str, list[str]]:
    """Play the scenario; return the message ids of each kind. The app is stopped at the end
    (``during(app)`` runs just before, while it is live)."""
    migrations.upgrade(database_url)
    faults = FaultInjector()
    app = App(store_url=store_dir, database_url=database_url, redis_url=redis_url,
              consumer_options=FAST)
    app.add_middleware(faults)
    app.handler(topic=TOPIC, consumer_group=GROUP, consume_from="first", idempotent=True,
                reconsume_count_max=16)(bill)
    rules = ResendRules(max_send_count=1, grace_ms=1, backoff_ms=1, recheck_ms=1,
                        consumer_groups={TOPIC: (GROUP,)})
    box = outbox.Outbox(app, options=rules.relay_options())
    worker = OutboxWorker(app, rules=rules)
    ids: dict[str, list[str]] = {}
    app.start()
    try:
        for kind in ("ok", "poison", "stuck", "lose_exhausted"):
            ids[kind] = _send(box, TOPIC, kind, getattr(counts, kind))
        ids["audit"] = _send(box, AUDIT_TOPIC, "ok", counts.audit)
        ids["plain_stuck"] = _send_plain(app, "stuck", counts.plain_stuck)
        ids["plain_poison"] = _send_plain(app, "poison", counts.plain_poison)
        logged = counts.poison + counts.stuck + counts.plain_stuck + counts.plain_poison
        wait_until(lambda: stub_counts(box.engine).get(StubStatus.CONFIRMED) == counts.ok
                   and faults.dropped == counts.lose_exhausted and _logged(box) == logged,
                   WAIT_S, "the first batch to be consumed")
        wait_until(lambda: _void_after_resend(worker, box, ids["lose_exhausted"]), WAIT_S,
                   "the resend rule to give up on the first lost batch")
        ids["lose_lost"] = _send(box, TOPIC, "lose", counts.lose_lost)
        wait_until(lambda: faults.dropped == counts.lose_exhausted + counts.lose_lost, WAIT_S,
                   "the second lost batch to be dropped")
        wait_until(lambda: _committed_past(app, box, ids["lose_lost"]), WAIT_S,
                   "the consumer to commit past the second lost batch")
        if during is not None:
            during(app)
    finally:
        app.stop()
    return ids


def _send(box: outbox.Outbox, topic: str, kind: str, count: int) -> list[str]:
    body_kind = "lose" if kind.startswith("lose") else kind
    ids = []
    for _ in range(count):
        with box.session.begin() as session:
            ids.append(outbox.send(session, topic, {"kind": body_kind, "fault":
                                                    "lose" if body_kind == "lose" else None}))
    return ids


def _send_plain(app: App, kind: str, count: int) -> list[str]:
    """Sent straight to the broker, without a stub."""
    body = json.dumps({"kind": kind}).encode()
    return [app.producer.send(TOPIC, body).msg_id for _ in range(count)]


def _logged(box: outbox.Outbox) -> int:
    with box.engine.connect() as connection:
        return connection.execute(select(func.count()).select_from(message_log)).scalar_one()


def _void_after_resend(worker: OutboxWorker, box: outbox.Outbox, message_ids: list[str]) -> bool:
    worker.run("resend_due", scheduled=False)
    with box.engine.connect() as connection:
        statuses = connection.execute(select(message_stub.c.status).where(
            message_stub.c.message_id.in_(message_ids))).scalars().all()
    return set(statuses) == {StubStatus.VOID}


def _committed_past(app: App, box: outbox.Outbox, message_ids: list[str]) -> bool:
    with box.engine.connect() as connection:
        rows = connection.execute(select(message_stub.c.queue_id, message_stub.c.queue_offset)
                                  .where(message_stub.c.message_id.in_(message_ids))).all()
    broker = app.broker
    return all(offset is not None
               and (broker.query_offset(GROUP, TOPIC, queue) or 0) > offset
               for queue, offset in rows)


__all__ = ["AUDIT_TOPIC", "GROUP", "TOPIC", "ScenarioCounts", "build_scenario"]
