"""A stub that names its consumer groups is confirmed by the handler transaction that completes
the set — also when two groups' transactions run at the same moment (``ledger.claim_message``
locks the stub before it counts)."""

from __future__ import annotations

import threading

from sqlalchemy import event, select

from postbox import outbox
from postbox.framework import ConsumedMessage
from postbox.idempotency import ledger
from postbox.outbox.clock import utc_now
from postbox.outbox.database import create_database_engine, dialect_name
from postbox.outbox.tables import StubStatus
from tests.support.lock_waits import waiting_on_a_lock
from tests.support.polling import wait_until

GROUPS = ("billing", "shipping")
BLOCKING_STATEMENTS = ("BEGIN IMMEDIATE", "WITH locked_stub", "UPDATE message_stub")


def _status(engine, message_id: str) -> str:
    with engine.connect() as connection:
        return connection.execute(select(outbox.message_stub.c.status).where(
            outbox.message_stub.c.message_id == message_id)).scalar_one()


def _published_view(app, message_id: str):
    sent = app.producer.send("orders", b"order", unique_key=message_id)
    [view] = wait_until(lambda: app.client.pull("reader", "orders", sent.queue_id,
                                                sent.queue_offset, 1).messages,
                        what="the published message")
    return view


def _declared_stub(app):
    """An outbox declaring both groups, one stub sent through it and published: (outbox,
    message id, the stored record, the database's dialect)."""
    box = outbox.Outbox(app, consumer_groups={"orders": GROUPS})
    with box.session.begin() as session:
        message_id = outbox.send(session, "orders", b"order")
    return box, message_id, _published_view(app, message_id), dialect_name(box.engine)


def test_the_group_completing_the_set_confirms_the_stub(make_app, fake_clock):
    box, message_id, view, dialect = _declared_stub(make_app(clock=fake_clock))

    def claim(engine, group: str) -> bool:
        with engine.begin() as connection:
            return ledger.claim_message(connection, dialect, group,
                                        ConsumedMessage(view, group), utc_now())

    assert claim(box.engine, "billing")
    assert _status(box.engine, message_id) == StubStatus.UNCONFIRMED  # shipping has not
    assert not claim(box.engine, "billing")  # a duplicate changes nothing
    assert _status(box.engine, message_id) == StubStatus.UNCONFIRMED
    assert claim(box.engine, "shipping")
    assert _status(box.engine, message_id) == StubStatus.CONFIRMED


def test_two_groups_at_the_same_moment_confirm_the_stub(make_app, fake_clock):
    """billing's transaction holds the stub; shipping's waits for it, then counts billing's
    committed row with its own and confirms. Without the lock each would count only itself."""
    box, message_id, view, dialect = _declared_stub(make_app(clock=fake_clock))
    second_engine = create_database_engine(box.engine.url)
    blocking = threading.Event()

    def about_to_block(connection, cursor, statement, *args) -> None:
        if statement.lstrip().startswith(BLOCKING_STATEMENTS):
            blocking.set()

    event.listen(second_engine, "before_cursor_execute", about_to_block)
    claimed: list[bool] = []

    def shipping() -> None:
        with second_engine.begin() as connection:
            claimed.append(ledger.claim_message(connection, dialect, "shipping",
                                                ConsumedMessage(view, "shipping"), utc_now()))

    thread = threading.Thread(target=shipping, name="shipping-claim")
    try:
        with box.engine.begin() as connection:
            assert ledger.claim_message(connection, dialect, "billing",
                                        ConsumedMessage(view, "billing"), utc_now())
            thread.start()
            assert blocking.wait(30), "shipping's transaction never reached the stub"
            if dialect == "postgresql":  # seen waiting on billing's row lock
                wait_until(lambda: waiting_on_a_lock(box.engine), what="shipping waiting")
        thread.join(30)
        assert not thread.is_alive()
    finally:
        event.remove(second_engine, "before_cursor_execute", about_to_block)
        second_engine.dispose()
    assert claimed == [True]
    assert _status(box.engine, message_id) == StubStatus.CONFIRMED
