"""Two consumer groups on one topic, played by the real framework: the fan-out case.

``billing`` and ``shipping`` both consume ``orders`` with idempotent handlers, and the outbox
declares both (``Outbox(app, consumer_groups=...)``). What each kind of message does:

- ``ok`` → both groups handle it.
- ``poison`` → billing handles it; shipping raises ``DeadLetter`` → ``%DLQ%shipping``.
- ``poison_both`` → both groups raise ``DeadLetter``.
- ``lose`` → billing handles it; shipping's first delivery is dropped (fault injection: a
  delivery lost between broker and consumer cannot be produced on demand), so shipping's
  consumer commits past it with no trace.

``play`` runs the consumers until each group is done with the first delivery of everything
(``at_rest(app)`` is called then, while the app is live and before any outbox task ran), then
runs the ``resend_due`` task until the lost message is confirmed or ``WAIT_S`` passes.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import func, select

from postbox import outbox
from postbox.framework import (
    App,
    ConsumeContext,
    ConsumerOptions,
    DeadLetter,
    Middleware,
    SkipMessage,
)
from postbox.outbox.alerts import Alert, Alerter
from postbox.outbox.resend import ResendRules
from postbox.outbox.tables import StubStatus, message_processed, message_stub
from postbox.outbox.worker import OutboxWorker
from postbox.storage_engine import Broker, MessageView
from tests.support.polling import wait_until

TOPIC = "orders"
GROUPS = ("billing", "shipping")
KINDS = {"ok": 3, "poison": 1, "poison_both": 1, "lose": 1}
FAST = ConsumerOptions(persist_interval_ms=100, long_polling_ms=100, rebalance_interval_ms=200)
RULES = ResendRules(grace_ms=1, backoff_ms=1, recheck_ms=1)
WAIT_S = 30.0


class RecordingSink:
    """An alert sink that keeps what it is given."""

    name = "recording"

    def __init__(self) -> None:
        self.alerts: list[Alert] = []

    def send(self, alerts: Sequence[Alert]) -> None:
        self.alerts.extend(alerts)


class Deliveries(Middleware):
    """Counts every delivery per group (outermost middleware, so duplicates count too), and
    drops shipping's first delivery of a ``lose`` message."""

    def __init__(self) -> None:
        self.delivered: dict[str, Counter[str]] = {group: Counter() for group in GROUPS}
        self.dropped: list[str] = []
        self._lock = threading.Lock()

    def before_consume(self, context: ConsumeContext) -> None:
        message = context.message
        with self._lock:
            self.delivered[context.consumer_group][message.msg_id] += 1
            lose = (context.consumer_group == "shipping" and _kind(message.body) == "lose"
                    and message.msg_id not in self.dropped)
            if lose:
                self.dropped.append(message.msg_id)
        if lose:
            raise SkipMessage(f"fault injection: {message.msg_id} lost on its way to shipping")


@dataclass
class Played:
    """What the scenario did: the ids of each kind, the alerts, and what each group saw."""

    ids: dict[str, list[str]]
    alerts: list[Alert]
    deliveries: Deliveries
    handled: dict[str, Counter[str]] = field(default_factory=dict)
    records: dict[str, list[MessageView]] = field(default_factory=dict)
    """Topic → the stored records of the lost message there, read at the end."""

    def one(self, kind: str) -> str:
        [message_id] = self.ids[kind]
        return message_id


def _kind(body: bytes) -> str:
    return str(json.loads(body)["kind"])


def play(store_dir: Path, database_url: str, redis_url: str | None,
         at_rest: Callable[[App, Played], None] | None = None) -> Played:
    """Play the scenario (module docstring); the app is stopped at the end."""
    deliveries = Deliveries()
    sink = RecordingSink()
    played = Played({}, sink.alerts, deliveries, {group: Counter() for group in GROUPS})
    lock = threading.Lock()
    app = App(store_url=store_dir, database_url=database_url, redis_url=redis_url,
              consumer_options=FAST)
    app.add_middleware(deliveries)
    for group in GROUPS:
        def handle(message, session, group: str = group) -> None:
            kind = _kind(message.body)
            with lock:
                played.handled[group][message.msg_id] += 1
            if kind == "poison_both" or (kind == "poison" and group == "shipping"):
                raise DeadLetter(f"{group} cannot take order {message.msg_id}")

        app.handler(topic=TOPIC, consumer_group=group, consume_from="first",
                    idempotent=True)(handle)
    box = outbox.Outbox(app, consumer_groups={TOPIC: GROUPS}, options=RULES.relay_options())
    worker = OutboxWorker(app, rules=RULES, alerter=Alerter([sink]))
    app.start()
    try:
        for kind, count in KINDS.items():
            played.ids[kind] = [_send(box, kind) for _ in range(count)]
        wait_until(lambda: _at_rest(app, box, played), WAIT_S,
                   "both groups done with the first delivery of every message")
        if at_rest is not None:
            at_rest(app, played)
        lost = played.one("lose")
        wait_until(lambda: _resend_pass(worker, box, lost), WAIT_S,
                   "the lost message resent to shipping and confirmed")
        assert isinstance(app.client, Broker) and app.client.store.wait_dispatched()
        played.records = {topic: app.client.find_by_unique_key(topic, lost) for topic in
                          (TOPIC, *(f"%RETRY%{group}" for group in GROUPS))}
    finally:
        app.stop()
    return played


def _send(box: outbox.Outbox, kind: str) -> str:
    with box.session.begin() as session:
        return outbox.send(session, TOPIC, {"kind": kind})


def _processed(box: outbox.Outbox, group: str) -> int:
    with box.engine.connect() as connection:
        return connection.execute(select(func.count()).select_from(message_processed).where(
            message_processed.c.consumer_group == group)).scalar_one()


def _at_rest(app: App, box: outbox.Outbox, played: Played) -> bool:
    """billing processed all but ``poison_both``; shipping the ``ok`` ones; both dead
    letters are in the DLQs; shipping dropped ``lose`` and committed past it."""
    if _processed(box, "billing") != sum(KINDS.values()) - KINDS["poison_both"]:
        return False
    if _processed(box, "shipping") != KINDS["ok"] or not played.deliveries.dropped:
        return False
    dead = {group: {letter.unique_key for letter in app.client.dead_letters(group)}
            for group in GROUPS}
    if dead != {"billing": set(played.ids["poison_both"]),
                "shipping": set(played.ids["poison"]) | set(played.ids["poison_both"])}:
        return False
    with box.engine.connect() as connection:
        queue_id, offset = connection.execute(select(
            message_stub.c.queue_id, message_stub.c.queue_offset).where(
            message_stub.c.message_id == played.one("lose"))).one()
    return (app.client.query_offset("shipping", TOPIC, queue_id) or 0) > offset


def _resend_pass(worker: OutboxWorker, box: outbox.Outbox, message_id: str) -> bool:
    worker.run("resend_due", scheduled=False)
    return stub_status(box.engine, message_id) == StubStatus.CONFIRMED


def stub_status(engine, message_id: str) -> str:
    with engine.connect() as connection:
        return connection.execute(select(message_stub.c.status).where(
            message_stub.c.message_id == message_id)).scalar_one()


__all__ = ["GROUPS", "KINDS", "TOPIC", "Played", "play", "stub_status"]
