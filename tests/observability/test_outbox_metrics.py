"""The outbox's families on a real endpoint: stubs by status from the database, and what a
scrape does when the database is dead.

A dead database is produced for real: a port nothing listens on (connections refused), and a
server that accepts TCP connections and never answers (the query would hang). Either way the
scrape answers within the query deadline with ``postbox_outbox_stubs_query_error 1`` and no
stub counts, and a stuck query is never joined by a second one.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update

from postbox.framework import App
from postbox.outbox import Outbox, Relay, send
from postbox.outbox.database import create_database_engine
from postbox.outbox.metrics import OutboxMetrics, outbox_metrics
from postbox.outbox.tables import StubStatus, message_stub
from tests.support.polling import wait_until

from .scrape import scrape

DEADLINE_S = 1.0
SMALL_LOG = {"mappedFileSizeCommitLog": str(1 << 20)}  # not the preallocated 1 GiB


class SilentServer:
    """Accepts TCP connections and never sends a byte (a database that hangs)."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.listener.settimeout(0.05)
        self.accepted: list[socket.socket] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            self.accepted.append(connection)

    def close(self) -> None:
        self._closed.set()
        self._thread.join()
        for connection in self.accepted:
            connection.close()
        self.listener.close()


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    server.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_stubs_by_status_and_publish_counts(tmp_path: Path, migrated_database_url: str) -> None:
    app = App(store_url=tmp_path / "store", database_url=migrated_database_url,
              broker_conf=SMALL_LOG)
    box = Outbox(app)
    with app:
        url = app.metrics_server(0).url
        for number in range(5):
            with box.session.begin() as session:
                send(session, "orders", f"order-{number}".encode())
        wait_until(lambda: box.relay.stats.published == 5, what="the relay's publishes")
        assert app.broker.store.wait_dispatched()  # the store counts puts as it dispatches them
        with box.engine.begin() as connection:  # two stubs settled by hand
            ids = [row[0] for row in connection.execute(
                message_stub.select().with_only_columns(message_stub.c.message_id)
                .order_by(message_stub.c.message_id).limit(2))]
            connection.execute(update(message_stub).where(message_stub.c.message_id == ids[0])
                               .values(status=StubStatus.CONFIRMED.value))
            connection.execute(update(message_stub).where(message_stub.c.message_id == ids[1])
                               .values(status=StubStatus.VOID.value))
        result = scrape(url)
    assert result.value("postbox_outbox_stubs_query_error") == 0
    assert result.value("postbox_outbox_stubs", status="unconfirmed") == 3
    assert result.value("postbox_outbox_stubs", status="confirmed") == 1
    assert result.value("postbox_outbox_stubs", status="void") == 1
    assert result.value("postbox_outbox_published_total") == 5
    assert result.value("postbox_outbox_publish_seconds_count") == 5
    assert result.value("postbox_outbox_publish_failures_total") == 0
    assert result.value("postbox_store_put_messages_total", topic="orders") == 5


def test_a_database_refusing_connections_reports_the_error_gauge(tmp_path: Path) -> None:
    dead = create_database_engine(f"postgresql+psycopg://postgres@127.0.0.1:{_free_port()}/x")
    app = App(store_url=tmp_path / "store", broker_conf=SMALL_LOG)
    Outbox(app, engine=dead)
    with app:
        result = scrape(app.metrics_server(0).url)
    assert result.value("postbox_outbox_stubs_query_error") == 1
    assert "postbox_outbox_stubs" not in result.samples
    assert result.value("postbox_store_dispatch_lag_bytes") == 0  # the rest still served


def test_a_hanging_database_does_not_hang_the_scrape(tmp_path: Path,
                                                     silent_server: SilentServer) -> None:
    hanging = create_database_engine(
        f"postgresql+psycopg://postgres@127.0.0.1:{silent_server.port}/x")
    app = App(store_url=tmp_path / "store", broker_conf=SMALL_LOG)
    metrics = app.metrics.source("postbox.outbox", lambda: OutboxMetrics(DEADLINE_S))
    assert outbox_metrics(app) is metrics
    metrics.add_relay(Relay(lambda: app.producer, hanging))  # never started: only the scrape
    app.start()                                              # talks to the database
    try:
        url = app.metrics_server(0).url
        started = time.monotonic()
        first = scrape(url)
        first_s = time.monotonic() - started
        started = time.monotonic()
        second = scrape(url)  # the first query is still stuck: no second one is started
        second_s = time.monotonic() - started
        connections = len(silent_server.accepted)
    finally:
        silent_server.close()  # the stuck query fails now; its thread ends
        app.stop()
    assert first.value("postbox_outbox_stubs_query_error") == 1
    assert DEADLINE_S <= first_s < DEADLINE_S + 3
    assert second.value("postbox_outbox_stubs_query_error") == 1
    assert second_s < DEADLINE_S
    assert connections == 1
