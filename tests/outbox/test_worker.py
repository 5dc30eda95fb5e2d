"""``OutboxWorker``: the periodic tasks under their leases, on a real database, a real store,
a real consumer and a real webhook endpoint; time is a clock the test moves."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import asdict
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, insert, select

from postbox import outbox
from postbox.framework import App, ConfigurationError, DeadLetter
from postbox.outbox import RelayOptions, StubStatus, message_processed, message_stub
from postbox.outbox.alerts import Alerter
from postbox.outbox.cleanup import CleanupPolicy, CleanupReport
from postbox.outbox.resend import ResendRules, retention_horizon
from postbox.outbox.tables import outbox_task
from postbox.outbox.worker import DEFAULT_CONSUMER_RETRY, TASK_NAMES, OutboxWorker, TaskSchedule
from postbox.storage_engine import Broker
from tests.outbox.conftest import records_of, stub_row, stub_rows
from tests.outbox.resend_support import carried_reason
from tests.outbox.test_resend import Clock, move_past, send_stub, webhook_alerter
from tests.support.alert_servers import (
    WebhookServer,
    webhook_server_fixture,  # noqa: F401  (the webhook_server fixture)
)
from tests.support.polling import wait_until

# the default rules' horizon by hand: backoffs 1+2+4+8+16 min and five 30 s grace periods,
# then five times the consumer's retry schedule (4 h 45 min 40 s), plus one hour of margin
DEFAULT_HORIZON = timedelta(minutes=31, seconds=150) + 5 * timedelta(
    hours=4, minutes=45, seconds=40) + timedelta(hours=1)
OVERSIZE_BODY = b"x" * 2_048
"""Over the tight store's 1 KiB message limit (far under the framework's 4 MiB)."""


@pytest.fixture
def clock() -> Clock:
    return Clock()


Build = Callable[..., OutboxWorker]


@pytest.fixture
def build(app: App, engine: Engine, clock: Clock) -> Build:
    """``build(on=app, **options)`` → an ``OutboxWorker`` on the app and the stub database, reading
    ``clock``, alerting to the log only unless told otherwise."""

    def factory(on: App = app, **options: Any) -> OutboxWorker:
        options.setdefault("alerter", Alerter())
        return OutboxWorker(on, engine=engine, now=clock, **options)

    return factory


def task_row(engine: Engine, name: str) -> Any:
    with engine.connect() as connection:
        return connection.execute(select(outbox_task).where(
            outbox_task.c.name == name)).mappings().one()


# ---- configuration ------------------------------------------------------------------------


def test_default_horizon_computed_by_hand():
    assert retention_horizon(ResendRules(), DEFAULT_CONSUMER_RETRY) == DEFAULT_HORIZON == \
        timedelta(hours=25, minutes=21, seconds=50)


@pytest.mark.parametrize("name", ["confirmed_retention", "log_retention",
                                  "processed_retention", "void_retention"])
def test_retention_not_longer_than_the_horizon_is_refused_at_construction(
        build: Build, name: str):
    with pytest.raises(ConfigurationError, match=f"CleanupPolicy.{name}"):
        build(cleanup=CleanupPolicy(**{name: DEFAULT_HORIZON}))
    build(cleanup=CleanupPolicy(**{name: DEFAULT_HORIZON + timedelta(microseconds=1)}))


def test_retention_check_follows_the_rules_and_the_consumer_retry(build: Build):
    rules = ResendRules(max_send_count=2, grace_ms=0, backoff_schedule_ms=(60_000,))
    horizon = timedelta(minutes=2) + 2 * timedelta(minutes=10) + timedelta(hours=1)
    short = CleanupPolicy(confirmed_retention=horizon, log_retention=timedelta(days=1),
                          processed_retention=timedelta(days=1))
    with pytest.raises(ConfigurationError, match="confirmed_retention"):
        build(rules=rules, consumer_retry=timedelta(minutes=10), cleanup=short)
    worker = build(rules=rules, consumer_retry=timedelta(minutes=9, seconds=59), cleanup=short)
    assert (worker.relay.options.max_send_count, worker.relay.options.resend_check_ms) == (
        2, 60_000)


def test_unknown_task_is_refused(build: Build):
    worker = build()
    with pytest.raises(ValueError, match="unknown outbox task 'bogus'; tasks: relay_pending, "
                                         "resend_due, cleanup"):
        worker.run("bogus")
    assert TASK_NAMES == ("relay_pending", "resend_due", "cleanup")


# ---- runs under the lease -----------------------------------------------------------------


def test_second_scheduled_run_within_min_interval_is_skipped_but_a_manual_run_goes(
        build: Build, engine: Engine, clock: Clock):
    worker = build(schedule=TaskSchedule(cleanup_s=100.0))  # min interval 80 s, lease 400 s
    nothing = {"task": "cleanup", "skipped": False, **asdict(CleanupReport())}
    assert worker.cleanup(scheduler="beat-a") == nothing
    clock.advance(seconds=79)
    assert worker.cleanup(scheduler="beat-a") == {"task": "cleanup", "skipped": True}
    assert worker.cleanup(scheduled=False) == nothing
    clock.advance(seconds=79)
    assert worker.run("cleanup") == {"task": "cleanup", "skipped": True}
    clock.advance(seconds=1)  # 80 s after the manual run started
    assert worker.run("cleanup") == nothing
    row = task_row(engine, "cleanup")
    assert (row["runs"], row["skipped"]) == (3, 2)
    assert row["lease_owner"] is None and row["last_started_at"] == clock.now


def test_relay_pending_publishes_every_unpublished_stub_in_batches(
        build: Build, engine: Engine, broker: Broker, clock: Clock):
    worker = build(relay_options=RelayOptions(batch_size=2))
    ids = [send_stub(engine, clock, body=f"order {number}".encode()) for number in range(5)]

    assert worker.relay_pending() == {"task": "relay_pending", "skipped": False,
                                      "published": 5, "failed": 0}
    for row in stub_rows(engine):
        assert row["send_count"] == 1 and row["published_at"] == clock.now
        assert row["next_resend_at"] == clock.now + timedelta(minutes=1)  # the rules' backoff
    assert all(len(records_of(broker, "orders", message_id)) == 1 for message_id in ids)
    clock.advance(seconds=5)
    assert worker.relay_pending() == {"task": "relay_pending", "skipped": False,
                                      "published": 0, "failed": 0}


def test_cleanup_returns_its_report(build: Build, engine: Engine, clock: Clock):
    retention = timedelta(days=2)
    worker = build(cleanup=CleanupPolicy(confirmed_retention=retention, log_retention=retention,
                                         processed_retention=retention))
    old = clock.now - retention - timedelta(seconds=1)
    fresh = clock.now - retention + timedelta(seconds=1)
    with engine.begin() as connection:
        for message_id, when in (("old", old), ("fresh", fresh)):
            outbox.send(connection, "orders", b"done", message_id=message_id, now=when)
            connection.execute(insert(message_processed).values(
                consumer_group="billing", message_id=message_id, topic="orders",
                processed_at=when))
        connection.execute(message_stub.update().values(status=StubStatus.CONFIRMED.value,
                                                        confirmed_at=message_stub.c.created_at))

    assert worker.cleanup() == {"task": "cleanup", "skipped": False, "stubs": 1, "logs": 0,
                                "processed": 1, "resends": 0, "void_stubs": 0, "batches": 2,
                                "largest_batch": 1, "complete": True}
    assert [row["message_id"] for row in stub_rows(engine)] == ["fresh"]


# ---- alerts -------------------------------------------------------------------------------


@pytest.fixture
def tight_app(open_broker, engine: Engine, migrated_database_url: str) -> Iterator[App]:
    """An app whose store refuses messages over 1 KiB: every publish of a bigger stub fails."""
    app = App(broker=open_broker("tight-store", max_message_size_bytes=1_024),
              database_url=migrated_database_url)
    try:
        yield app
    finally:
        app.stop()


def test_relay_pending_counts_the_failures_of_its_own_run(
        build: Build, tight_app: App, engine: Engine, clock: Clock):
    worker = build(on=tight_app, relay_options=RelayOptions(retry_delay_ms=1_000))
    message_id = send_stub(engine, clock, body=OVERSIZE_BODY)
    fits = send_stub(engine, clock)

    assert worker.relay_pending() == {"task": "relay_pending", "skipped": False,
                                      "published": 1, "failed": 1}
    row = stub_row(engine, message_id)
    assert (row["status"], row["send_count"]) == (StubStatus.UNCONFIRMED.value, 1)
    assert row["last_error"].startswith("MessageTooLargeError: message body is 2,048 bytes")
    assert row["next_resend_at"] == clock.now + timedelta(seconds=1)
    assert stub_row(engine, fits)["published_at"] == clock.now

    clock.advance(seconds=4)  # the task's minimum interval; the retry is due again
    assert worker.relay_pending() == {"task": "relay_pending", "skipped": False,
                                      "published": 0, "failed": 1}
    clock.advance(milliseconds=1_500)  # the second retry waits 2 s
    assert worker.relay_pending(scheduled=False) == {"task": "relay_pending", "skipped": False,
                                                     "published": 0, "failed": 0}
    assert stub_row(engine, message_id)["send_count"] == 2


def test_relay_voiding_a_stub_after_max_failed_publishes_alerts(
        build: Build, tight_app: App, engine: Engine, clock: Clock,
        webhook_server: WebhookServer):
    worker = build(on=tight_app, rules=ResendRules(max_send_count=2),
                   relay_options=RelayOptions(retry_delay_ms=1_000),
                   alerter=webhook_alerter(webhook_server))
    message_id = send_stub(engine, clock, body=OVERSIZE_BODY)
    fits = send_stub(engine, clock)

    assert worker.relay_pending() == {"task": "relay_pending", "skipped": False,
                                      "published": 1, "failed": 1}
    assert stub_row(engine, message_id)["status"] == StubStatus.UNCONFIRMED.value
    assert webhook_server.requests == []

    clock.advance(seconds=5)  # past the retry delay and the task's minimum interval
    assert worker.relay_pending() == {"task": "relay_pending", "skipped": False,
                                      "published": 0, "failed": 1}
    row = stub_row(engine, message_id)
    assert (row["status"], row["send_count"]) == (StubStatus.VOID.value, 2)
    [request] = webhook_server.wait_for(1)
    assert request.body == {
        "event": "postbox.stub.void", "kind": "exhausted", "message_id": message_id,
        "topic": "orders", "send_count": 2,
        "reason": f"send 2 of 2 failed to publish: {row['last_error']}",
        "consumer_group": None,
        "occurred_at": clock.now.isoformat(timespec="milliseconds") + "Z"}
    assert stub_row(engine, fits)["published_at"] is not None

    clock.advance(minutes=5)  # a void stub is never tried again
    assert worker.relay_pending()["failed"] == 0
    assert stub_row(engine, message_id)["send_count"] == 2
    assert len(webhook_server.requests) == 1


def test_resend_due_voids_what_a_real_consumer_dead_lettered_once(
        build: Build, app: App, broker: Broker, engine: Engine, clock: Clock,
        webhook_server: WebhookServer, store):
    @app.handler(topic="orders", consumer_group="billing", consume_from="first")
    def refuse(message) -> None:
        raise DeadLetter(f"order {message.text} refused")

    worker = build(alerter=webhook_alerter(webhook_server))
    message_id = send_stub(engine, clock, body=b"7")
    assert worker.relay_pending()["published"] == 1
    app.start()
    wait_until(lambda: broker.dead_letters("billing"), timeout_s=10, what="the dead letter")

    totals = {"task": "resend_due", "skipped": False, "dead_lettered": 1, "resent": 0,
              "exhausted": 0, "confirmed": 0, "grace_started": 0, "waiting": 0,
              "examined": 0, "alert_failures": []}
    assert worker.resend_due() == totals
    row = stub_row(engine, message_id)
    assert row["status"] == StubStatus.VOID.value
    assert row["last_error"] == ("dead-lettered by consumer group billing: "
                                 + carried_reason(store, "order 7 refused"))
    [request] = webhook_server.wait_for(1)
    assert (request.body["kind"], request.body["message_id"], request.body["consumer_group"],
            request.body["reason"]) == ("dead_lettered", message_id, "billing",
                                        row["last_error"])
    state = json.loads(task_row(engine, "resend_due")["state"])
    assert state == {"dead_letter_cursors": {"billing": 1}}

    clock.advance(minutes=1)  # the next run starts from the stored cursor
    assert worker.resend_due() == {**totals, "dead_lettered": 0}
    assert len(webhook_server.requests) == 1


def test_resend_due_reports_alert_failures(build: Build, engine: Engine, broker: Broker,
                                          clock: Clock, webhook_server: WebhookServer):
    webhook_server.fail_first = 1_000
    worker = build(rules=ResendRules(max_send_count=1, grace_ms=0),
                   alerter=webhook_alerter(webhook_server))
    message_id = send_stub(engine, clock)
    assert worker.relay_pending()["published"] == 1
    move_past(engine, broker, stub_row(engine, message_id))
    clock.advance(minutes=1)
    assert worker.resend_due()["grace_started"] == 1

    clock.advance(minutes=1)
    result = worker.resend_due()
    assert (result["examined"], result["exhausted"], result["alert_failures"]) == (
        1, 1, ["webhook"])
    assert stub_row(engine, message_id)["status"] == StubStatus.VOID.value
