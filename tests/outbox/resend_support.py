"""Helpers of the resend-rule tests (``test_resend.py``, ``test_resend_groups.py``): the
rule's clock and the ``clock``/``build`` fixtures, stubs sent and published for real, and the
rows and offsets a consumer group leaves behind."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, insert, select

from postbox import outbox
from postbox.framework import App
from postbox.outbox import Relay, message_log, message_processed, message_resend
from postbox.outbox.alerts import Alerter, WebhookSink
from postbox.outbox.clock import utc_now
from postbox.outbox.resend import Resender, ResendRules
from postbox.storage_engine import Broker
from tests.outbox.conftest import records_of, stub_row
from tests.support.alert_servers import WebhookServer

GROUP = "billing"
RECHECK = timedelta(milliseconds=ResendRules().recheck_ms)
GRACE = timedelta(milliseconds=ResendRules().grace_ms)


class Clock:
    """The database time the rule reads (naive UTC), moved by the test."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or utc_now()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture(name="clock")
def clock_fixture() -> Clock:
    return Clock()


@pytest.fixture(name="build")
def build_fixture(app: App, engine: Engine, clock: Clock) -> Build:
    """``build(rules, alerter=..., owner=..., stub_engine=..., on=app, **resender_options)`` →
    (relay, resender) on the app and the stub database, both reading ``clock``."""

    def factory(rules: ResendRules | None = None, *, alerter: Alerter | None = None,
                owner: str = "resend-test", stub_engine: Engine = engine, on: App = app,
                **options: Any) -> tuple[Relay, Resender]:
        rules = rules or ResendRules()
        relay = Relay(lambda: on.producer, stub_engine, options=rules.relay_options(),
                      owner=owner, now=clock)
        resender = Resender(on, stub_engine, relay, rules=rules, alerter=alerter or Alerter(),
                            owner=owner, now=clock, **options)
        return relay, resender

    return factory


def webhook_alerter(server: WebhookServer) -> Alerter:
    return Alerter([WebhookSink(server.url, timeout_s=2.0, retry_delay_s=0.01)])


Build = Callable[..., tuple[Relay, Resender]]


def send_stub(engine: Engine, clock: Clock, topic: str = "orders", body: bytes = b"order",
              **options: Any) -> str:
    """Commit one stub created at ``clock.now``; its id."""
    with engine.begin() as connection:
        return outbox.send(connection, topic, body, now=clock.now, **options)


def publish(relay: Relay, engine: Engine, message_id: str) -> Any:
    """Publish the stub through the relay; its row afterwards."""
    assert relay.publish_ids([message_id]) == (1, [])
    return stub_row(engine, message_id)


def move_past(engine: Engine, broker: Broker, row: Any, group: str = GROUP,
              by: int = 1) -> None:
    """The group — an idempotent consumer, which has processed an earlier message of the
    topic — commits an offset ``by`` past the stub's offset in its queue."""
    consumed_before(engine, row["topic"], group)
    broker.commit_offset(group, row["topic"], row["queue_id"], row["queue_offset"] + by)


def consumed_before(engine: Engine, topic: str, group: str = GROUP) -> None:
    """The trace an idempotent consumer leaves: a processed row of an earlier message."""
    with engine.begin() as connection:
        earlier = f"earlier-{group}-{topic}"
        if connection.execute(select(message_processed.c.message_id).where(
                message_processed.c.message_id == earlier)).first() is None:
            connection.execute(insert(message_processed).values(
                consumer_group=group, message_id=earlier, topic=topic,
                processed_at=datetime(2025, 1, 1)))


def log_receipt(engine: Engine, message_id: str, topic: str, queue_id: int, queue_offset: int,
                now: datetime, group: str = GROUP) -> None:
    """The ``message_log`` row the idempotency layer writes when a group receives a message."""
    with engine.begin() as connection:
        connection.execute(insert(message_log).values(
            consumer_group=group, message_id=message_id, topic=topic, queue_id=queue_id,
            queue_offset=queue_offset, created_at=now))


def log_processed(engine: Engine, message_id: str, topic: str, now: datetime,
                  group: str = GROUP) -> None:
    """The ``message_processed`` row of a group whose handler committed (its stub lives in
    another database: nothing confirms it here)."""
    with engine.begin() as connection:
        connection.execute(insert(message_processed).values(
            consumer_group=group, message_id=message_id, topic=topic, processed_at=now))


def locations(broker: Broker, topic: str, message_id: str) -> list[tuple[int, int, int]]:
    """(queue id, queue offset, log position) of every record of the message in ``topic``."""
    return sorted((view.queue_id, view.queue_offset, view.log_position)
                  for view in records_of(broker, topic, message_id))


def group_copies(broker: Broker, message_id: str, group: str = GROUP) -> list[Any]:
    """The copies of one message resent to ``group`` alone (its ``%RETRY%group`` topic)."""
    return records_of(broker, f"%RETRY%{group}", message_id)


def resend_rows(engine: Engine) -> list[tuple[Any, ...]]:
    """(group, message id, topic, queue id, queue offset) of every ``message_resend`` row."""
    columns = message_resend.c
    with engine.connect() as connection:
        return sorted(tuple(row) for row in connection.execute(select(
            columns.consumer_group, columns.message_id, columns.topic, columns.queue_id,
            columns.queue_offset)))


def where(row: Any) -> tuple[int, int, int]:
    return row["queue_id"], row["queue_offset"], row["log_position"]


def carried_reason(store: Any, reason: str) -> str:
    """The dead-letter reason a voided stub records on ``store``'s transport: the handler's
    own, except on the lab's Apache RocketMQ, whose send-back has no field for it (Postbox's
    broker reads the client's ``dlqReason`` header; Apache's drops it), so the resender falls
    back to "retries exhausted" there (docs/remoting-consumer.md)."""
    return "retries exhausted" if store.transport == "rocketmq" else reason
