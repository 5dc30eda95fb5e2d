"""Fixtures for the outbox tests: a real database, a real embedded broker, a business table.

- ``engine``: ``create_database_engine(migrated_database_url)`` (SQLite file by default,
  PostgreSQL/MariaDB with ``POSTBOX_TEST_DATABASE_URL``), with a business table ``orders``
  created next to the outbox tables through its own ``MetaData``.
- ``make_engine()`` (``tests/support/services.py``): more engines on the same database (other
  "processes"), disposed at teardown.
- ``broker`` (``tests/support/brokers.py``): an embedded broker on a small store under
  ``tmp_path`` (delay levels in milliseconds), closed and verified by ``open_broker`` at
  teardown.
- ``app``: an ``App`` on that broker with ``database_url`` = the migrated database; stopped at
  teardown (before the broker closes).
- helpers: ``stub_row``/``stub_rows``/``stub_count``, ``order_count``, ``stored_records``
  (every record of a topic, read back from the store's queues), ``records_of`` (the records of
  one message id), ``embedded(broker)`` (whether the store is in this process, for assertions
  on store internals), ``settled`` (a read once the broker's dispatch caught up).
- ``broker`` is ``open_broker("store")``: in a remote-transport run a client of the run's
  broker, the one the ``app`` fixture reaches.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Column, Engine, Integer, MetaData, String, Table, func, insert, select

from postbox.framework import App, BrokerClient
from postbox.outbox import message_stub
from postbox.storage_engine import Broker, MessageView
from tests.storage_engine.conftest import read_queue

SETTLE_TIMEOUT_S = 10.0
SETTLE_INTERVAL_S = 0.1
READER_GROUP = "outbox-test-reader"

business = MetaData()
orders = Table(
    "outbox_test_orders", business,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("note", String(64), nullable=False),
)


def stub_row(engine: Engine, message_id: str) -> Any:
    """The stub row of ``message_id`` (a ``RowMapping``), or None."""
    with engine.connect() as connection:
        return connection.execute(select(message_stub).where(
            message_stub.c.message_id == message_id)).mappings().one_or_none()


def stub_rows(engine: Engine) -> list[Any]:
    """Every stub row, oldest first."""
    with engine.connect() as connection:
        return list(connection.execute(select(message_stub).order_by(
            message_stub.c.created_at, message_stub.c.message_id)).mappings())


def stub_count(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(select(func.count()).select_from(message_stub)).scalar_one()


def order_count(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(select(func.count()).select_from(orders)).scalar_one()


def add_order(target: Any, order_id: int, note: str = "new") -> None:
    """Insert a business row through a Session or a Connection (in its transaction)."""
    target.execute(insert(orders).values(id=order_id, note=note))


def embedded(broker: BrokerClient) -> bool:
    """True for a broker in this process (its store can be read); False for a remote one."""
    return isinstance(broker, Broker)


def settled(broker: BrokerClient, read: Callable[[], list[MessageView]]) -> list[MessageView]:
    """``read()`` once what the broker stored is readable: embedded, after its dispatch caught
    up; remote (whose dispatch this process cannot see), once two reads 0.1 s apart agree."""
    if embedded(broker):
        assert broker.store.wait_dispatched(), "dispatch did not catch up"
        return read()
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    previous = read()
    while True:
        time.sleep(SETTLE_INTERVAL_S)  # what a read missed shows up in the next one
        current = read()
        if _positions(current) == _positions(previous):
            return current
        if time.monotonic() > deadline:
            raise AssertionError(f"the broker's reads did not settle in {SETTLE_TIMEOUT_S} s")
        previous = current


def _positions(views: list[MessageView]) -> list[tuple[str, int, int, int]]:
    """What identifies each record read (a view compares by identity)."""
    return [(view.topic, view.queue_id, view.queue_offset, view.log_position) for view in views]


def stored_records(broker: BrokerClient, topic: str) -> list[MessageView]:
    """Every record of ``topic``, read through its consume queues."""
    if embedded(broker):
        store = broker.store
        assert store.wait_dispatched(), "dispatch did not catch up"
        return [view for queue_id in sorted(store.topics().get(topic, []))
                for view in read_queue(store, topic, queue_id)]
    return settled(broker, lambda: _pulled(broker, topic))


def _pulled(broker: BrokerClient, topic: str) -> list[MessageView]:
    if broker.topic_config(topic) is None:
        return []
    views: list[MessageView] = []
    for queue_id in broker.queue_ids(topic):
        offset = 0
        while messages := broker.pull(READER_GROUP, topic, queue_id, offset, 32).messages:
            views.extend(messages)
            offset = messages[-1].queue_offset + 1
    return views


def records_of(broker: BrokerClient, topic: str, message_id: str) -> list[MessageView]:
    """Every stored record of one message, found by its unique key."""
    return settled(broker, lambda: broker.find_by_unique_key(topic, message_id))


@pytest.fixture
def engine(engine: Engine) -> Engine:
    """``engine`` (tests/support/services.py) with the business table created."""
    business.create_all(engine)
    return engine


@pytest.fixture
def app(broker: BrokerClient, engine: Engine, migrated_database_url: str) -> Iterator[App]:
    app = App(broker=broker, database_url=migrated_database_url)
    try:
        yield app
    finally:
        app.stop()
