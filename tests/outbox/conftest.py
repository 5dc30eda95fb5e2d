"""Fixtures for the outbox tests: a real database, a real embedded broker, a business table.

- ``engine``: ``create_database_engine(migrated_database_url)`` (SQLite file by default,
  PostgreSQL/MariaDB with ``POSTBOX_TEST_DATABASE_URL``), with a business table ``orders``
  created next to the outbox tables through its own ``MetaData``.
- ``make_engine()``: more engines on the same database (other "processes"), disposed at teardown.
- ``broker``: an embedded broker on a small store under ``tmp_path`` (delay levels in
  milliseconds), closed and verified by ``open_broker`` at teardown.
- ``app``: an ``App`` with ``database_url`` = the migrated database, on that broker (or, in a
  remote-transport run, on the run's remote broker: ``tests/support/transports.py``); stopped
  at teardown (before the broker closes).
- helpers: ``stub_row``/``stub_rows``/``stub_count``, ``order_count``, ``stored_records``
  (every record of a topic, read back from the store's queues).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Column, Engine, Integer, MetaData, String, Table, func, insert, select

from framework import App
from outbox import create_database_engine, message_stub
from storage_engine import Broker, MessageView
from tests.framework.conftest import open_broker  # noqa: F401  (fixture used below)
from tests.storage_engine.conftest import read_queue
from tests.support.transports import StoreUnderTest

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


def stored_records(broker: Broker, topic: str) -> list[MessageView]:
    """Every record of ``topic`` in the store, read through its consume queues."""
    store = broker.store
    assert store.wait_dispatched(), "dispatch did not catch up"
    return [view for queue_id in sorted(store.topics().get(topic, []))
            for view in read_queue(store, topic, queue_id)]


@pytest.fixture
def make_engine(migrated_database_url: str) -> Iterator[Callable[[], Engine]]:
    made: list[Engine] = []

    def factory() -> Engine:
        engine = create_database_engine(migrated_database_url)
        made.append(engine)
        return engine

    yield factory
    for engine in made:
        engine.dispose()


@pytest.fixture
def engine(make_engine: Callable[[], Engine]) -> Engine:
    engine = make_engine()
    business.create_all(engine)
    return engine


@pytest.fixture
def broker(open_broker) -> Broker:  # noqa: F811  (the imported fixture)
    return open_broker("store")


@pytest.fixture
def app(store: StoreUnderTest, engine: Engine, migrated_database_url: str,
        request: pytest.FixtureRequest) -> Iterator[App]:
    if store.remote:
        app = App(store_url=store.url(), database_url=migrated_database_url)
    else:  # the embedded ``broker`` that tests inspecting the store share
        app = App(broker=request.getfixturevalue("broker"), database_url=migrated_database_url)
    try:
        yield app
    finally:
        app.stop()
