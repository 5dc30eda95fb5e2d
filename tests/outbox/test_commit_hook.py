"""The after-commit hand-off: the relay hears of a stub only once the transaction that wrote it
has committed (so its first claim finds it), never of one that rolled back, and the polling
pass still finds what the hand-off never delivered — a process killed between the commit and
the hand-off among them. Real database (SQLite file, or ``POSTBOX_TEST_DATABASE_URL``), real
broker, a real ``kill -9``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterable, Iterator

import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session

from postbox import outbox
from postbox.framework import App
from postbox.outbox import Outbox, Relay, RelayOptions
from postbox.storage_engine import Broker
from tests.outbox.conftest import add_order, stored_records, stub_row
from tests.outbox.test_relay import send_stubs
from tests.support.polling import wait_until

NO_POLL = RelayOptions(poll_interval_ms=3_600_000)
"""A relay whose polling pass (after the one at start) is an hour away."""


class WatchedRelay(Relay):
    """A real relay that also records, for each id handed to it, whether the stub was already
    committed — read through ``observer``, an engine of its own (another connection)."""

    def __init__(self, *args, observer: Engine, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.observer = observer
        self.handed: list[tuple[str, bool]] = []

    def notify(self, message_ids: Iterable[str]) -> None:
        ids = list(message_ids)
        self.handed += [(message_id, stub_row(self.observer, message_id) is not None)
                        for message_id in ids]
        super().notify(ids)


@pytest.fixture
def watched(app: App, engine: Engine, migrated_database_url: str) -> Iterator[WatchedRelay]:
    # a plain engine: its reads take no write lock on SQLite (outbox engines begin IMMEDIATE)
    observer = create_engine(migrated_database_url)
    relay = WatchedRelay(lambda: app.producer, engine, observer=observer)
    relay.attach()
    yield relay
    relay.detach()
    observer.dispose()


def test_a_session_hands_its_stubs_over_after_the_commit(watched: WatchedRelay,
                                                         engine: Engine):
    with Session(engine) as session, session.begin():
        add_order(session, 1)
        first = outbox.send(session, "orders", b"one")
        second = outbox.send(session, "orders", b"two")
        assert watched.handed == []  # nothing before the commit
    assert watched.handed == [(first, True), (second, True)]  # visible to others already


def test_a_connection_hands_its_stubs_over_after_the_commit(watched: WatchedRelay,
                                                            engine: Engine):
    with engine.begin() as connection:
        message_id = outbox.send(connection, "orders", b"one")
        assert watched.handed == []
    assert watched.handed == [(message_id, True)]


def test_commit_as_you_go_hands_over_at_the_next_transaction_or_the_close(
        watched: WatchedRelay, engine: Engine):
    with engine.connect() as connection:
        connection.begin()
        first = outbox.send(connection, "orders", b"one")
        connection.commit()
        assert watched.handed == []  # committed; the connection is still held, idle
        connection.begin()
        assert watched.handed == [(first, True)]
        second = outbox.send(connection, "orders", b"two")
        connection.commit()
    assert watched.handed == [(first, True), (second, True)]


def test_rolled_back_stubs_are_never_handed_over(watched: WatchedRelay, engine: Engine):
    with pytest.raises(RuntimeError), engine.begin() as connection:
        outbox.send(connection, "orders", b"rolled back")
        raise RuntimeError("the business change failed")
    with Session(engine) as session:
        session.begin()
        outbox.send(session, "orders", b"rolled back too")
        session.rollback()
    with engine.connect() as connection:  # closed with its transaction open: rolled back
        connection.begin()
        outbox.send(connection, "orders", b"abandoned")
    with engine.begin() as connection:  # the pooled connections' next transactions
        kept = outbox.send(connection, "orders", b"kept")
    assert watched.handed == [(kept, True)]


def test_a_transaction_whose_connection_was_lost_rolls_back_with_its_own_error(
        watched: WatchedRelay, engine: Engine):
    # the database went away mid-transaction (a restart): SQLAlchemy invalidated the connection,
    # and the hook's rollback listener must neither raise over the error (reading
    # ``connection.info`` of an invalidated connection in a transaction raises
    # PendingRollbackError) nor keep the connection from going back to the pool
    with pytest.raises(RuntimeError, match="lost"), engine.begin() as connection:
        outbox.send(connection, "orders", b"lost with the connection")
        connection.invalidate()
        raise RuntimeError("the connection was lost")
    assert engine.pool.checkedout() == 0
    with engine.begin() as connection:  # a fresh connection: nothing stale handed over
        kept = outbox.send(connection, "orders", b"kept")
    assert watched.handed == [(kept, True)]


def test_a_rolled_back_savepoint_takes_its_stubs_with_it(watched: WatchedRelay,
                                                         engine: Engine):
    with Session(engine) as session, session.begin():
        before = outbox.send(session, "orders", b"before")
        with pytest.raises(RuntimeError), session.begin_nested():
            outbox.send(session, "orders", b"inside, rolled back")
            raise RuntimeError("undo the savepoint")
        with session.begin_nested():
            released = outbox.send(session, "orders", b"inside, released")
        after = outbox.send(session, "orders", b"after")
    assert watched.handed == [(before, True), (released, True), (after, True)]


def test_a_committed_stub_is_published_without_waiting_for_the_poll(
        app: App, broker: Broker, engine: Engine, make_engine: Callable[[], Engine]):
    box = Outbox(app, engine=engine, options=NO_POLL)
    # another process's stub, found by the poll at start
    [polled] = send_stubs(make_engine(), 1, first_order=100)
    app.start()
    wait_until(lambda: box.relay.stats.published_by_poll == 1, what="the poll at start")
    with box.session.begin() as session:
        add_order(session, 1)
        message_id = outbox.send(session, "orders", b"now")
    # the next poll is an hour away: only the hand-off can publish it
    wait_until(lambda: box.relay.stats.published_by_hook == 1, what="the hand-off")
    assert stub_row(engine, message_id)["published_at"] is not None
    assert box.relay.stats.published_by_poll == 1
    assert sorted(view.unique_key for view in stored_records(broker, "orders")) == \
        sorted([polled, message_id])


def test_a_stub_whose_hand_off_died_with_its_process_is_found_by_the_poll(
        app: App, broker: Broker, engine: Engine, migrated_database_url: str, tmp_path):
    """The writer commits with a relay attached and is killed (SIGKILL) as the hand-off
    starts: the stub is committed, no relay heard of it, and a polling pass publishes it."""
    script = textwrap.dedent("""
        import os, signal, sys
        from postbox import outbox
        from postbox.framework import Producer
        from postbox.outbox import Relay, create_database_engine

        class DyingRelay(Relay):
            def notify(self, message_ids):
                os.kill(os.getpid(), signal.SIGKILL)

        engine = create_database_engine(sys.argv[1])
        DyingRelay(lambda: None, engine).attach()
        with engine.begin() as connection:
            outbox.send(connection, "orders", b"orphan", message_id="orphan-1")
    """)
    done = subprocess.run([sys.executable, "-c", script, migrated_database_url],
                          capture_output=True, timeout=60)
    assert done.returncode == -9, done.stderr.decode()
    assert stub_row(engine, "orphan-1")["published_at"] is None  # committed, not published

    relay = Relay(app.producer, engine)
    assert relay.publish_due() == 1
    assert stub_row(engine, "orphan-1")["published_at"] is not None
    assert [view.unique_key for view in stored_records(broker, "orders")] == ["orphan-1"]
