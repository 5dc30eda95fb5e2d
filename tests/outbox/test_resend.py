"""The resend rule and the dead-letter rule (``outbox.resend``) on a real database and store.

Stubs are sent with ``outbox.send`` and published by a real ``Relay`` into the embedded store.
Consumer groups move past them for real (``Broker.commit_offset``), dead-letter them for real
(``Broker.send_back``), and the consumer side's rows are written as the idempotency layer writes
them (``message_log`` on receipt, ``message_processed`` + confirmed stub on success). Time for
the rule is a ``Clock`` the test moves (the store keeps its own clock); alerts go to a real
HTTP endpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session

from postbox.framework import App
from postbox.idempotency import ledger
from postbox.outbox import (
    StubStatus,
    claim_stubs,
    message_stub,
)
from postbox.outbox.resend import ResendReport, ResendRules
from postbox.storage_engine import Broker, FakeClock, SendBackOutcome
from tests.outbox.conftest import stub_row
from tests.outbox.resend_support import (  # noqa: F401  (the build and clock fixtures)
    GRACE,
    GROUP,
    RECHECK,
    Build,
    Clock,
    build_fixture,
    carried_reason,
    clock_fixture,
    consumed_before,
    group_copies,
    locations,
    log_processed,
    log_receipt,
    move_past,
    publish,
    resend_rows,
    send_stub,
    webhook_alerter,
    where,
)
from tests.storage_engine.conftest import START_MS
from tests.support.alert_servers import (
    WebhookServer,
    webhook_server_fixture,  # noqa: F401  (the webhook_server fixture)
)
from tests.support.polling import wait_until

# ---- lost stubs are resent --------------------------------------------------------------


def test_stub_a_group_committed_past_is_resent_after_the_grace_period(
        build: Build, engine: Engine, broker: Broker, clock: Clock):
    rules = ResendRules()
    relay, resender = build(rules)
    message_id = send_stub(engine, clock, tags="created", keys="order-1")
    first = publish(relay, engine, message_id)
    assert first["send_count"] == 1
    assert first["next_resend_at"] == clock.now + rules.backoff(1) == clock.now + \
        timedelta(minutes=1)
    move_past(engine, broker, first)

    clock.advance(seconds=59, microseconds=999_999)  # the first check is not due yet
    assert resender.resend_due() == ResendReport()

    clock.advance(microseconds=1)
    assert resender.resend_due() == ResendReport(examined=1, grace_started=1)
    row = stub_row(engine, message_id)
    assert row["overtaken_at"] == clock.now
    assert row["next_resend_at"] == clock.now + GRACE
    assert (row["send_count"], where(row)) == (1, where(first))
    grace_started_at = clock.now

    clock.advance(seconds=29)  # inside the grace period: not even examined
    assert resender.resend_due() == ResendReport()
    assert stub_row(engine, message_id)["overtaken_at"] == grace_started_at

    clock.advance(seconds=1)  # the grace period is over: the stub is lost
    assert resender.resend_due() == ResendReport(examined=1, resent=1)
    row = stub_row(engine, message_id)
    assert row["status"] == StubStatus.UNCONFIRMED.value
    assert row["send_count"] == 2
    assert row["overtaken_at"] is None
    assert row["next_resend_at"] == clock.now + rules.backoff(2) == clock.now + \
        timedelta(minutes=2)
    assert row["lease_owner"] is None and row["lease_until"] is None
    assert row["last_error"] is None
    # the stub still says where it was published; the topic holds that one record only
    assert (where(row), row["published_at"]) == (where(first), first["published_at"])
    assert locations(broker, "orders", message_id) == [where(first)]
    # the copy went to the group that lost it alone, through its retry topic
    [resent] = group_copies(broker, message_id)
    assert resent.unique_key == message_id and bytes(resent.body) == b"order"
    assert resent.tags == "created" and list(resent.keys) == ["order-1"]
    assert resent.properties["RETRY_TOPIC"] == "orders"
    assert resend_rows(engine) == [(GROUP, message_id, f"%RETRY%{GROUP}", resent.queue_id,
                                    resent.queue_offset)]


def test_progress_known_only_from_the_message_log_makes_a_stub_lost(
        build: Build, app: App, engine: Engine, broker: Broker, clock: Clock):
    """No committed offset: the group logged a later message of the stub's queue."""
    relay, resender = build(ResendRules(consumer_groups={"orders": [GROUP]}))
    message_id = send_stub(engine, clock)
    first = publish(relay, engine, message_id)
    later = app.producer.send("orders", b"later", queue_id=first["queue_id"])
    assert later.queue_offset == first["queue_offset"] + 1
    log_receipt(engine, later.msg_id, "orders", later.queue_id, later.queue_offset, clock.now)
    assert broker.query_offset(GROUP, "orders", first["queue_id"]) is None

    clock.advance(minutes=1)
    assert resender.resend_due() == ResendReport(examined=1, grace_started=1)
    clock.advance(seconds=30)
    assert resender.resend_due() == ResendReport(examined=1, resent=1)
    row = stub_row(engine, message_id)
    assert row["send_count"] == 2 and row["overtaken_at"] is None
    assert locations(broker, "orders", message_id) == [where(first)]
    assert len(group_copies(broker, message_id)) == 1


def test_a_log_row_of_an_earlier_offset_is_not_progress_past_the_stub(
        build: Build, app: App, engine: Engine, broker: Broker, clock: Clock):
    relay, resender = build(ResendRules(consumer_groups={"orders": [GROUP]}))
    message_id = send_stub(engine, clock)
    first = publish(relay, engine, message_id)
    # the message just before the stub in its queue: logged highest offset + 1 == stub offset
    log_receipt(engine, "earlier", "orders", first["queue_id"], first["queue_offset"] - 1,
                clock.now)

    clock.advance(minutes=1)
    assert resender.resend_due() == ResendReport(examined=1, rechecked=1)


def test_a_stub_due_inside_a_longer_grace_period_waits_for_its_end(
        build: Build, engine: Engine, broker: Broker, clock: Clock):
    relay, short = build(ResendRules(grace_ms=30_000))
    _, longer = build(ResendRules(grace_ms=90_000))  # the grace period raised between runs
    message_id = send_stub(engine, clock)
    move_past(engine, broker, publish(relay, engine, message_id))
    clock.advance(minutes=1)
    assert short.resend_due().grace_started == 1
    overtaken_at = clock.now

    clock.advance(seconds=30)
    assert longer.resend_due() == ResendReport(examined=1, waiting=1)
    row = stub_row(engine, message_id)
    assert row["overtaken_at"] == overtaken_at
    assert row["next_resend_at"] == overtaken_at + timedelta(seconds=90)
    assert row["send_count"] == 1

    clock.advance(seconds=59, microseconds=999_999)
    assert longer.resend_due() == ResendReport()
    clock.advance(microseconds=1)
    assert longer.resend_due() == ResendReport(examined=1, resent=1)


# ---- stubs that are not resent ---------------------------------------------------------


Situation = Callable[[Engine, Broker, Any, datetime], None]


def in_flight(engine: Engine, broker: Broker, row: Any, now: datetime) -> None:
    move_past(engine, broker, row)
    log_receipt(engine, row["message_id"], "orders", row["queue_id"], row["queue_offset"], now)


def group_not_past(engine: Engine, broker: Broker, row: Any, now: datetime) -> None:
    move_past(engine, broker, row, by=0)  # the next offset the group reads is the stub's


def other_topic_only(engine: Engine, broker: Broker, row: Any, now: datetime) -> None:
    broker.create_topic("invoices", 1)  # (a remote broker takes offsets of existing topics)
    broker.commit_offset(GROUP, "invoices", 0, 0)  # a group exists, but not on this topic


@pytest.mark.parametrize("situation", [in_flight, group_not_past, other_topic_only],
                         ids=lambda situation: situation.__name__)
def test_stub_no_group_lost_is_rechecked_later(
        build: Build, engine: Engine, broker: Broker, clock: Clock, situation: Situation):
    relay, resender = build()
    message_id = send_stub(engine, clock)
    first = publish(relay, engine, message_id)
    situation(engine, broker, first, clock.now)

    clock.advance(minutes=1)
    assert resender.resend_due() == ResendReport(examined=1, rechecked=1)
    row = stub_row(engine, message_id)
    assert row["status"] == StubStatus.UNCONFIRMED.value
    assert row["next_resend_at"] == clock.now + RECHECK
    assert row["overtaken_at"] is None
    assert (row["send_count"], where(row)) == (1, where(first))
    assert locations(broker, "orders", message_id) == [where(first)]


def test_a_plain_consumer_moving_past_does_not_make_a_stub_lost(
        build: Build, engine: Engine, broker: Broker, clock: Clock):
    """A group that never logged nor processed a message of the topic (no idempotent
    handler, e.g. an analytics consumer) moves past stubs without a trace: not "lost"."""
    relay, resender = build()
    message_id = send_stub(engine, clock)
    first = publish(relay, engine, message_id)
    broker.commit_offset("analytics", "orders", first["queue_id"], first["queue_offset"] + 5)
    assert broker.consumer_groups() == ["analytics"]

    clock.advance(minutes=1)
    assert resender.resend_due() == ResendReport(examined=1, rechecked=1)
    assert stub_row(engine, message_id)["overtaken_at"] is None


def test_no_known_consumer_group_means_recheck(build: Build, engine: Engine, broker: Broker,
                                               clock: Clock):
    relay, resender = build()
    message_id = send_stub(engine, clock)
    publish(relay, engine, message_id)
    assert broker.consumer_groups() == []

    clock.advance(minutes=1)
    assert resender.resend_due() == ResendReport(examined=1, rechecked=1)
    assert stub_row(engine, message_id)["next_resend_at"] == clock.now + RECHECK


def test_a_stub_back_in_flight_during_its_grace_period_is_rechecked_and_grace_reset(
        build: Build, engine: Engine, broker: Broker, clock: Clock):
    """Concurrent consumers log out of order: the receipt shows up after the group's
    progress already passed the stub."""
    relay, resender = build()
    message_id = send_stub(engine, clock)
    first = publish(relay, engine, message_id)
    move_past(engine, broker, first)
    clock.advance(minutes=1)
    assert resender.resend_due().grace_started == 1
    log_receipt(engine, message_id, "orders", first["queue_id"], first["queue_offset"],
                clock.now)

    clock.advance(seconds=30)
    assert resender.resend_due() == ResendReport(examined=1, rechecked=1)
    row = stub_row(engine, message_id)
    assert row["overtaken_at"] is None and row["next_resend_at"] == clock.now + RECHECK
    assert row["send_count"] == 1
    assert locations(broker, "orders", message_id) == [where(first)]


def test_stub_is_confirmed_once_every_group_processed_it(
        build: Build, engine: Engine, broker: Broker, clock: Clock):
    relay, resender = build()
    message_id = send_stub(engine, clock)
    first = publish(relay, engine, message_id)
    move_past(engine, broker, first, group="billing")
    move_past(engine, broker, first, group="shipping")
    log_processed(engine, message_id, "orders", clock.now, group="billing")

    clock.advance(minutes=1)  # shipping moved past without it
    assert resender.resend_due() == ResendReport(examined=1, grace_started=1)

    log_processed(engine, message_id, "orders", clock.now, group="shipping")
    clock.advance(seconds=30)
    assert resender.resend_due() == ResendReport(examined=1, confirmed=1)
    row = stub_row(engine, message_id)
    assert row["status"] == StubStatus.CONFIRMED.value
    assert row["confirmed_at"] == clock.now
    assert row["send_count"] == 1
    clock.advance(hours=1)
    assert resender.resend_due() == ResendReport()
    assert locations(broker, "orders", message_id) == [where(first)]


def test_stub_not_due_or_leased_by_someone_else_is_not_examined(
        build: Build, engine: Engine, broker: Broker, clock: Clock):
    relay, resender = build()
    message_id = send_stub(engine, clock)
    first = publish(relay, engine, message_id)
    move_past(engine, broker, first)

    clock.advance(seconds=59)
    assert resender.resend_due() == ResendReport()  # next_resend_at is in the future
    clock.advance(seconds=1)
    [held] = claim_stubs(engine, message_stub.c.status == StubStatus.UNCONFIRMED.value,
                         owner="other-pass", now=clock.now, lease=timedelta(seconds=10), limit=1,
                         message_ids=[message_id])
    assert resender.resend_due() == ResendReport()
    clock.advance(seconds=9)
    assert resender.resend_due() == ResendReport()
    row = stub_row(engine, message_id)
    assert row["lease_owner"] == held.token and row["overtaken_at"] is None

    clock.advance(seconds=2)  # the other holder's lease ran out
    assert resender.resend_due() == ResendReport(examined=1, grace_started=1)


def test_configured_consumer_groups_override_discovery(
        build: Build, engine: Engine, broker: Broker, clock: Clock):
    _, configured = build(ResendRules(consumer_groups={"orders": [GROUP]}))
    relay, discovering = build()
    message_id = send_stub(engine, clock)
    move_past(engine, broker, publish(relay, engine, message_id), group="audit")
    assert broker.consumer_groups() == ["audit"]

    clock.advance(minutes=1)  # only billing decides, and billing shows no progress
    assert configured.resend_due() == ResendReport(examined=1, rechecked=1)
    clock.advance(seconds=30)  # every known group decides: audit moved past it
    assert discovering.resend_due() == ResendReport(examined=1, grace_started=1)


def test_overlapping_passes_never_resend_a_stub_twice(
        build: Build, engine: Engine, broker: Broker, clock: Clock,
        make_engine: Callable[[], Engine], migrated_database_url: str):
    """Pass B plans the resend, then pass A resends the stub before B claims it: B's claim
    must find the stub no longer lost and publish nothing."""
    relay, first_pass = build(owner="pass-a")
    consumers = create_engine(migrated_database_url)  # B reads the consumers' rows here
    _, second_pass = build(owner="pass-b", stub_engine=make_engine(), log_engine=consumers)
    message_id = send_stub(engine, clock)
    first = publish(relay, engine, message_id)
    move_past(engine, broker, first)
    clock.advance(minutes=1)
    assert first_pass.resend_due().grace_started == 1
    clock.advance(seconds=30)

    reports: list[ResendReport] = []

    def run_first_pass(connection, cursor, statement, *args: Any) -> None:
        if "message_processed.message_id IN" in statement and not reports:
            reports.append(first_pass.resend_due())  # between B's plan and B's claim

    event.listen(consumers, "after_cursor_execute", run_first_pass)
    try:
        assert second_pass.resend_due() == ResendReport(examined=1)
    finally:
        event.remove(consumers, "after_cursor_execute", run_first_pass)
        consumers.dispose()
    assert reports == [ResendReport(examined=1, resent=1)]
    row = stub_row(engine, message_id)
    assert row["send_count"] == 2
    assert locations(broker, "orders", message_id) == [where(first)]
    assert len(group_copies(broker, message_id)) == 1


# ---- giving up: exhausted ----------------------------------------------------------------


def test_lost_stub_at_max_send_count_is_void_with_an_exhausted_alert(
        build: Build, engine: Engine, broker: Broker, clock: Clock,
        webhook_server: WebhookServer, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.ERROR, logger="postbox.alerts")
    rules = ResendRules(max_send_count=2, grace_ms=1_000, backoff_schedule_ms=(1_000,))
    relay, resender = build(rules, alerter=webhook_alerter(webhook_server))
    message_id = send_stub(engine, clock)
    move_past(engine, broker, publish(relay, engine, message_id))
    clock.advance(seconds=1)
    assert resender.resend_due().grace_started == 1
    clock.advance(seconds=1)
    assert resender.resend_due().resent == 1
    second = stub_row(engine, message_id)
    assert second["send_count"] == 2
    assert second["next_resend_at"] == clock.now + timedelta(seconds=1)
    [copy] = group_copies(broker, message_id)  # the group moves past its copy too
    broker.commit_offset(GROUP, copy.topic, copy.queue_id, copy.queue_offset + 1)
    clock.advance(seconds=1)
    assert resender.resend_due().grace_started == 1

    clock.advance(seconds=1)
    report = resender.resend_due()
    assert (report.examined, report.exhausted, report.resent) == (1, 1, 0)
    assert [(alerts.delivered, alerts.failed) for alerts in report.alerts] == [
        ({"log": 1, "webhook": 1}, {})]
    reason = (f"not confirmed after 2 sends: consumer group(s) billing moved past queue "
              f"{second['queue_id']} offset {second['queue_offset']} without it")
    row = stub_row(engine, message_id)
    assert row["status"] == StubStatus.VOID.value
    assert row["last_error"] == reason
    assert row["send_count"] == 2
    assert row["lease_owner"] is None and row["lease_until"] is None
    [request] = webhook_server.wait_for(1)
    assert request.body == {
        "event": "postbox.stub.void", "kind": "exhausted", "message_id": message_id,
        "topic": "orders", "send_count": 2, "reason": reason, "consumer_group": "billing",
        "occurred_at": clock.now.isoformat(timespec="milliseconds") + "Z"}
    assert [record.getMessage() for record in caplog.records
            if record.name == "postbox.alerts"] == [
        f"[alerts] stub {message_id} on topic orders is void (exhausted, group billing, "
        f"2 sends): {reason}"]

    clock.advance(hours=1)  # a void stub is left to an operator
    assert resender.resend_due() == ResendReport()
    assert len(locations(broker, "orders", message_id)) == 1
    assert len(group_copies(broker, message_id)) == 1
    assert len(webhook_server.requests) == 1


# ---- delayed stubs -------------------------------------------------------------------------


@pytest.fixture
def store_clock() -> FakeClock:
    return FakeClock(START_MS)


@pytest.fixture
def delay_app(open_broker, store_clock: FakeClock, engine: Engine,
              migrated_database_url: str) -> Iterator[App]:
    """An app whose store runs on a fake clock: a delayed message is delivered only when the
    test moves that clock (delay levels are milliseconds)."""
    app = App(broker=open_broker("delay-store", clock=store_clock),
              database_url=migrated_database_url)
    try:
        yield app
    finally:
        app.stop()


def deliver_delayed(broker: Broker, store_clock: FakeClock, topic: str,
                    message_id: str) -> Any:
    store_clock.advance(1_000)
    broker.delay_service.run_once(store_clock.now_ms())
    [view] = wait_until(lambda: broker.find_by_unique_key(topic, message_id),
                        what="the delayed delivery")
    return view


def test_delayed_stub_waits_for_delivery_then_records_its_real_offset(
        build: Build, delay_app: App, engine: Engine, clock: Clock, store_clock: FakeClock):
    broker = delay_app.broker
    relay, resender = build(on=delay_app)
    message_id = send_stub(engine, clock, delay_level=3)
    first = publish(relay, engine, message_id)
    assert first["queue_offset"] is None and first["queue_id"] is not None

    clock.advance(minutes=1)
    assert resender.resend_due() == ResendReport(examined=1, waiting=1)
    row = stub_row(engine, message_id)
    assert row["queue_offset"] is None
    assert row["next_resend_at"] == clock.now + RECHECK  # not looked at again before that

    delivered = deliver_delayed(broker, store_clock, "orders", message_id)
    assert delivered.queue_id == first["queue_id"]
    clock.advance(seconds=30)
    assert resender.resend_due() == ResendReport(examined=1, rechecked=1)
    row = stub_row(engine, message_id)
    assert (row["queue_id"], row["queue_offset"]) == (delivered.queue_id,
                                                      delivered.queue_offset)
    assert row["log_position"] == first["log_position"]  # still the first send's record

    # from now on it is judged like any stub: the group moves past its real offset
    consumed_before(engine, "orders")
    broker.commit_offset(GROUP, "orders", delivered.queue_id, delivered.queue_offset + 1)
    clock.advance(seconds=30)
    assert resender.resend_due() == ResendReport(examined=1, grace_started=1)
    clock.advance(seconds=30)
    assert resender.resend_due() == ResendReport(examined=1, resent=1)
    [copy] = group_copies(broker, message_id)  # resent for immediate delivery, to the group
    assert copy.properties["RETRY_TOPIC"] == "orders" and "DELAY" not in copy.properties


def test_undelivered_delayed_stubs_do_not_starve_the_other_stubs(
        build: Build, delay_app: App, engine: Engine, clock: Clock):
    """A full batch of delayed stubs still in the delay topic must not come first in every
    pass: the other due stubs get their turn."""
    broker = delay_app.broker
    relay, resender = build(ResendRules(batch_size=2), on=delay_app)
    delayed = [send_stub(engine, clock, delay_level=18) for _ in range(2)]
    clock.advance(milliseconds=1)
    lost = send_stub(engine, clock)
    for message_id in [*delayed, lost]:
        publish(relay, engine, message_id)
    move_past(engine, broker, stub_row(engine, lost))

    clock.advance(minutes=1)
    assert resender.resend_due() == ResendReport(examined=2, waiting=2)
    assert resender.resend_due() == ResendReport(examined=1, grace_started=1)
    assert stub_row(engine, lost)["overtaken_at"] == clock.now


# ---- dead letters -------------------------------------------------------------------------


def dead_letter(broker: Broker, row: Any, group: str = GROUP, **options: Any) -> None:
    """The group pulls the stub's message and gives up on it."""
    [view] = wait_until(lambda: broker.pull(group, row["topic"], row["queue_id"],
                                            row["queue_offset"], 1).messages,
                        what="the stub's message")  # dispatched after the send returned
    assert view.unique_key == row["message_id"]
    result = broker.send_back(group, view, **options)
    assert result.outcome is SendBackOutcome.DEAD_LETTER
    wait_until(lambda: any(letter.unique_key == row["message_id"]
                           for letter in broker.dead_letters(group)), what="the dead letter")


def test_dead_lettered_stubs_are_void_with_an_alert_and_the_cursor_moves(
        build: Build, engine: Engine, broker: Broker, clock: Clock,
        webhook_server: WebhookServer, store):
    relay, resender = build(alerter=webhook_alerter(webhook_server))
    refused, retried, confirmed = (send_stub(engine, clock) for _ in range(3))
    rows = {message_id: publish(relay, engine, message_id)
            for message_id in (refused, retried, confirmed)}
    dead_letter(broker, rows[refused], delay_level=-1, reason="boom")
    dead_letter(broker, rows[retried], max_reconsume_times=0)  # retries exhausted
    with Session(engine) as session, session.begin():  # another group took effect first
        ledger.confirm_stub(session, confirmed, clock.now)
    dead_letter(broker, rows[confirmed], delay_level=-1, reason="too late")

    cursors: dict[str, int] = {}
    report = resender.void_dead_lettered(cursors)
    assert (report.examined, report.dead_lettered) == (3, 3)
    assert [(alerts.delivered, alerts.failed) for alerts in report.alerts] == [
        ({"log": 3, "webhook": 3}, {})]
    assert cursors == {GROUP: 3}
    expected = {refused: "dead-lettered by consumer group billing: "
                         + carried_reason(store, "boom"),
                retried: "dead-lettered by consumer group billing: retries exhausted",
                confirmed: "dead-lettered by consumer group billing: "
                           + carried_reason(store, "too late")}
    for message_id, reason in expected.items():
        row = stub_row(engine, message_id)
        assert row["status"] == (StubStatus.CONFIRMED.value if message_id == confirmed
                                 else StubStatus.VOID.value)
        assert row["last_error"] == reason
        assert row["updated_at"] == clock.now
        assert row["lease_owner"] is None
    # confirmed by another group (the stub names no groups): billing's dead letter still
    # raises its alert, and the stub stays confirmed
    requests = webhook_server.wait_for(3)
    assert sorted((request.body["message_id"], request.body["kind"],
                   request.body["consumer_group"], request.body["reason"],
                   request.body["send_count"]) for request in requests) == sorted(
        (message_id, "dead_lettered", GROUP, reason, 1) for message_id, reason in
        expected.items())

    clock.advance(minutes=1)
    assert resender.void_dead_lettered(cursors) == ResendReport()
    assert cursors == {GROUP: 3}
    assert len(webhook_server.requests) == 3
    # void stubs are no longer the resend rule's business
    assert resender.resend_due() == ResendReport()


def test_a_fresh_cursor_reads_the_dead_letters_again_without_alerting_twice(
        build: Build, engine: Engine, broker: Broker, clock: Clock,
        webhook_server: WebhookServer):
    relay, resender = build(alerter=webhook_alerter(webhook_server))
    message_id = send_stub(engine, clock)
    dead_letter(broker, publish(relay, engine, message_id), delay_level=-1, reason="boom")
    assert resender.void_dead_lettered({}).dead_lettered == 1

    again = resender.void_dead_lettered({})  # a lost cursor: the void stub stays as it is
    assert (again.examined, again.dead_lettered, again.alerts) == (1, 0, [])
    assert len(webhook_server.wait_for(1)) == 1
