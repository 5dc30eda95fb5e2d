"""A real broker outage, and the relay of a producer-only web process.

A ``postbox broker`` process is stopped (SIGTERM) while stubs are committed, stays away far
longer than the relay once took to void them (five counted failures: about 25 s at the Celery
``relay_pending`` period, well under a second with the short settings below), and is started
again on the same store and ports. Every stub is then published with nobody acting: none
``void``, no ``exhausted`` alert, each stub's ``send_count`` the one publish that went through.
The outage is real (a stopped process, refused connections); only the time the Celery worker
sees is a clock the test moves, as the worker tests do.

These tests start their own broker process (they stop and restart it), so they use no
``store`` fixture and run in the embedded pass only.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine

from postbox import outbox
from postbox.framework import App
from postbox.outbox import Outbox, RelayOptions, ResendRules, StubStatus
from postbox.outbox.alerts import Alert, Alerter
from postbox.outbox.worker import OutboxWorker
from tests.outbox.conftest import records_of, stub_row, stub_rows
from tests.outbox.resend_support import Clock
from tests.support.broker_process import BrokerProcess, write_broker_conf
from tests.support.polling import wait_until
from tests.support.services import free_port

OUTAGE = timedelta(minutes=40)
"""How long the broker stays away in the worker's time: past the 30 minutes the defaults are
documented to ride out, and about a hundred times the old void horizon."""
RELAY_PERIOD = timedelta(seconds=5)
"""The Celery beat's ``relay_pending`` period (``TaskSchedule.relay_pending_s``)."""


class RestartableBroker:
    """One ``postbox broker`` on fixed loopback ports, so that it can be stopped and started
    again where its clients expect it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.namesrv_port, self.remoting_port = free_port(), free_port()
        self.process: BrokerProcess | None = None

    @property
    def store_url(self) -> str:
        return f"rocketmq://127.0.0.1:{self.namesrv_port}"

    def start(self) -> None:
        self.process = BrokerProcess(
            self.directory / "store", broker_conf=write_broker_conf(self.directory),
            extra=("--namesrv-listen", f"127.0.0.1:{self.namesrv_port}",
                   "--remoting-listen", f"127.0.0.1:{self.remoting_port}")).start()

    def stop(self) -> None:
        if self.process is not None:
            assert self.process.stop() == 0
            self.process = None


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RestartableBroker]:
    server = RestartableBroker(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def remote_app(server: RestartableBroker, engine: Engine, migrated_database_url: str
               ) -> Iterator[App]:
    """A producer-only app (no handlers) over the broker process."""
    app = App(store_url=server.store_url, database_url=migrated_database_url)
    try:
        yield app
    finally:
        app.stop()


class KeptAlerts:
    """An alert sink that keeps what it is given."""

    name = "kept"

    def __init__(self) -> None:
        self.alerts: list[Alert] = []

    def send(self, alerts: list[Alert]) -> None:
        self.alerts.extend(alerts)


def commit_stub(engine: Engine, clock: Clock, number: int) -> str:
    """A web process's send at ``clock.now``: a plain transaction on its own engine (no
    hook)."""
    with engine.begin() as connection:
        return outbox.send(connection, "orders", f"order {number}", keys=f"order-{number}",
                           now=clock.now)


def assert_all_published_once(engine: Engine, app: App, ids: list[str]) -> None:
    """Every stub published (each send_count the one publish that went through), none void,
    each stored in the broker."""
    rows = {row["message_id"]: row for row in stub_rows(engine)}
    assert sorted(rows) == sorted(ids)
    for message_id, row in rows.items():
        assert row["status"] == StubStatus.UNCONFIRMED.value, (message_id, row["last_error"])
        assert row["published_at"] is not None and row["send_count"] == 1
        assert row["last_error"] is None and row["lease_owner"] is None
        [record] = records_of(app.client, "orders", message_id)
        assert (record.queue_id, record.queue_offset) == (row["queue_id"], row["queue_offset"])


def test_a_broker_outage_of_forty_minutes_ends_with_every_stub_published_by_the_worker(
        server: RestartableBroker, remote_app: App, engine: Engine):
    clock = Clock()
    kept = KeptAlerts()
    worker = OutboxWorker(remote_app, engine=engine, now=clock, alerter=Alerter([kept]))
    ids = [commit_stub(engine, clock, 0)]
    assert worker.relay_pending(scheduled=False)["published"] == 1  # the broker is up

    clock.advance(seconds=RELAY_PERIOD.seconds)

    server.stop()  # a real outage: the name server and the broker refuse connections
    outage_ends = clock.now + OUTAGE
    number = 0
    runs = 0
    while clock.now < outage_ends:
        if runs % 12 == 0:  # a web process commits once a minute
            number += 1
            ids.append(commit_stub(engine, clock, number))
        runs += 1
        result = worker.relay_pending()
        assert result["published"] == 0 and not result["skipped"]
        clock.advance(seconds=RELAY_PERIOD.seconds)
    assert number >= OUTAGE // timedelta(minutes=1)
    assert worker.relay.stats.unavailable > 5 * worker.rules.max_send_count  # tried, and again
    rows = stub_rows(engine)
    assert [row["message_id"] for row in rows if row["status"] != "unconfirmed"] == []
    assert max(row["send_count"] for row in rows) <= 1  # no failed attempt counted
    assert "ConnectionClosedError" in stub_row(engine, ids[1])["last_error"]

    server.start()  # back on the same store and ports; nobody re-arms anything
    for _ in range(20):  # the worker's runs go on; the longest outage wait is 30 s
        worker.relay_pending()
        clock.advance(seconds=RELAY_PERIOD.seconds)
        if not any(row["published_at"] is None for row in stub_rows(engine)):
            break
    assert_all_published_once(engine, remote_app, ids)
    assert kept.alerts == []
    assert (worker.relay.stats.voided, worker.relay.outage.failures) == (0, 0)


# ---- the relay of a producer-only web process ------------------------------------------------

SHORT = RelayOptions(poll_interval_ms=3_600_000, retry_delay_ms=20, retry_delay_max_ms=50,
                     outage_backoff_ms=20, outage_backoff_max_ms=200,
                     rules=ResendRules(max_send_count=5))
"""Short waits, so the real outage below lasts far longer than five counted failures would
(about 0.2 s), and an hour's poll: the first commit is published by what the after-commit hook
handed over, and the stubs the outage deferred by the poll at the end of its wait."""


def test_a_producer_only_outbox_publishes_at_commit_and_rides_out_a_broker_outage(
        server: RestartableBroker, remote_app: App, engine: Engine):
    box = Outbox(remote_app, options=SHORT)  # never app.start(): nothing to consume here
    with box.session.begin() as session:
        first = outbox.send(session, "orders", "order 1")
    wait_until(lambda: stub_row(engine, first)["published_at"] is not None,
               what="the commit published by the web process's own relay",
               detail=lambda: dict(stub_row(engine, first)))
    # the hand-off, not a poll or a task (counted just after the stub is marked published)
    wait_until(lambda: box.relay.stats.published_by_hook == 1, what="the hand-off counted",
               detail=lambda: box.relay.stats)
    assert box.relay.stats.published_by_poll == 0

    server.stop()
    ids = [first]
    for number in range(2, 5):
        with box.session.begin() as session:
            ids.append(outbox.send(session, "orders", f"order {number}"))
    # the relay keeps trying, far past the old horizon; nothing is voided meanwhile
    wait_until(lambda: box.relay.stats.failed >= 4 * SHORT.max_send_count
               or box.relay.stats.voided, what="the relay trying through the outage")
    assert box.relay.stats.voided == 0
    assert all(row["status"] == "unconfirmed" for row in stub_rows(engine))

    server.start()
    wait_until(lambda: box.relay.stats.published == len(ids), timeout_s=60,
               what="every stub published after the broker came back",
               detail=lambda: [dict(row) for row in stub_rows(engine)])
    assert_all_published_once(engine, remote_app, ids)

    remote_app.stop()  # stopped: a later commit is left to the polling task, nothing restarts
    with box.session.begin() as session:
        outbox.send(session, "orders", "after stop")
    assert not box.relay.is_running
