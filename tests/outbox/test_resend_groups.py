"""The resend rule with several consumer groups, one (message, group) at a time: what a
refused per-group resend does (the end-to-end case is ``test_consumer_groups.py``)."""

from __future__ import annotations

from sqlalchemy import Engine

from postbox.outbox.resend import ResendReport, ResendRules
from postbox.storage_engine import Broker
from tests.outbox.conftest import stub_row
from tests.outbox.resend_support import (  # noqa: F401  (the build and clock fixtures)
    GROUP,
    Build,
    Clock,
    build_fixture,
    clock_fixture,
    group_copies,
    move_past,
    publish,
    resend_rows,
    send_stub,
)


def test_a_resend_the_broker_refuses_does_not_count_toward_voiding(
        build: Build, engine: Engine, broker: Broker, clock: Clock):
    """The group's retry topic is read-only (perm 4): the copy is refused, the claim's send is
    given back, and once the topic is writable again the next pass resends."""
    rules = ResendRules()
    relay, resender = build(rules)
    message_id = send_stub(engine, clock)
    move_past(engine, broker, publish(relay, engine, message_id))
    broker.create_topic(f"%RETRY%{GROUP}", 1, perm=4)
    clock.advance(minutes=1)
    assert resender.resend_due().grace_started == 1
    clock.advance(seconds=30)

    assert resender.resend_due() == ResendReport(examined=1)
    row = stub_row(engine, message_id)
    assert row["send_count"] == 1  # the refused attempt is not counted
    assert row["last_error"].startswith(f"resend to {GROUP} failed: ")
    assert row["lease_owner"] is None and row["next_resend_at"] == clock.now + rules.backoff(2)
    assert resend_rows(engine) == []

    broker.create_topic(f"%RETRY%{GROUP}", 1, perm=6)
    clock.advance(minutes=2)
    assert resender.resend_due().grace_started == 1
    clock.advance(seconds=30)
    assert resender.resend_due() == ResendReport(examined=1, resent=1)
    assert stub_row(engine, message_id)["send_count"] == 2
    assert len(group_copies(broker, message_id)) == 1
