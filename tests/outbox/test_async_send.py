"""``await outbox.send(async_session, ...)``: the same stub as the sync path, in the caller's
async transaction, handed to the relay after the commit (or found by its polling).

Real databases through their async drivers (aiosqlite on the default SQLite file, asyncpg or
aiomysql with ``POSTBOX_TEST_DATABASE_URL``), a real embedded broker; each test runs its
coroutine with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from postbox import outbox
from postbox.framework import App, ConfigurationError
from postbox.framework.tracing import TRACEPARENT
from postbox.outbox import (
    InvalidMessageError,
    NoTransactionError,
    Outbox,
    RelayOptions,
    async_database_url,
    create_async_database_engine,
)
from postbox.storage_engine import Broker
from tests.outbox.conftest import add_order, order_count, stored_records, stub_count, stub_row
from tests.support.polling import wait_until
from tests.support.tracing import spans, traceparent_of  # noqa: F401  (fixture)

NOW = datetime(2024, 5, 6, 7, 8, 9, 123456)
STUB_COLUMNS = ("topic", "tags", "keys", "content", "properties", "delay_level", "status",
                "send_count", "created_at", "updated_at", "next_resend_at")


def run(work: Callable[[AsyncEngine], Awaitable[Any]], url: str) -> Any:
    """``work(engine)`` on a fresh loop with an async engine of its own, disposed after."""
    async def main() -> Any:
        engine = create_async_database_engine(url)
        try:
            return await work(engine)
        finally:
            await engine.dispose()
    return asyncio.run(main())


@pytest.fixture
def url(engine: Engine, migrated_database_url: str) -> str:
    """The migrated test database, with the business table (made by ``engine``)."""
    return migrated_database_url


def test_async_send_writes_the_same_stub_as_the_sync_send(engine: Engine, url: str):
    options: dict[str, Any] = {"tags": "created", "keys": ["order-1", "customer-7"],
                               "properties": {"source": "shop"}, "delay_level": 3, "now": NOW}

    async def work(async_engine: AsyncEngine) -> str:
        async with async_sessionmaker(async_engine).begin() as session:
            await session.run_sync(lambda sync_session: add_order(sync_session, 1))
            return await outbox.send(session, "orders", {"order": 1}, message_id="async-1",
                                     **options)

    assert run(work, url) == "async-1"
    with engine.begin() as connection:
        outbox.send(connection, "orders", {"order": 1}, message_id="sync-1", **options)
    async_row, sync_row = stub_row(engine, "async-1"), stub_row(engine, "sync-1")
    assert {column: async_row[column] for column in STUB_COLUMNS} == \
        {column: sync_row[column] for column in STUB_COLUMNS}
    assert bytes(async_row["content"]) == b'{"order":1}'
    assert order_count(engine) == 1


def test_async_connection_and_generated_ids(engine: Engine, url: str):
    async def work(async_engine: AsyncEngine) -> list[str]:
        async with async_engine.begin() as connection:
            return [await outbox.send(connection, "orders", f"text {n}") for n in range(3)]

    message_ids = run(work, url)
    assert len(set(message_ids)) == 3 and all(len(value) == 32 for value in message_ids)
    assert [bytes(stub_row(engine, value)["content"]) for value in message_ids] == \
        [b"text 0", b"text 1", b"text 2"]


def test_async_send_stores_the_message_group(engine: Engine, url: str):
    async def work(async_engine: AsyncEngine) -> str:
        async with async_engine.begin() as connection:
            return await outbox.send(connection, "orders", "paid", message_group="order-42")

    assert stub_row(engine, run(work, url))["message_group"] == "order-42"


def test_rolled_back_async_transaction_leaves_nothing(engine: Engine, url: str):
    async def work(async_engine: AsyncEngine) -> None:
        with pytest.raises(RuntimeError, match="business failure"):
            async with async_sessionmaker(async_engine).begin() as session:
                await session.run_sync(lambda sync_session: add_order(sync_session, 1))
                await outbox.send(session, "orders", b"x")
                raise RuntimeError("business failure")

    run(work, url)
    assert stub_count(engine) == 0 and order_count(engine) == 0


def test_an_async_send_carries_the_current_trace_context(engine: Engine, url: str,
                                                         spans):  # noqa: F811
    async def work(async_engine: AsyncEngine) -> tuple[str, str]:
        with spans.tracer.start_as_current_span("POST /orders") as request:
            async with async_sessionmaker(async_engine).begin() as session:
                return await outbox.send(session, "orders", b"x"), traceparent_of(request)

    message_id, expected = run(work, url)
    assert json.loads(stub_row(engine, message_id)["properties"]) == {TRACEPARENT: expected}


# ---- bad input ------------------------------------------------------------------------------


def test_no_transaction_closed_session_and_bad_messages_are_refused_before_awaiting(
        engine: Engine, url: str):
    async def work(async_engine: AsyncEngine) -> None:
        async with AsyncSession(async_engine) as session:
            with pytest.raises(NoTransactionError, match=r"async with session\.begin"):
                outbox.send(session, "orders", b"x")  # raises at the call: nothing to await
        with pytest.raises(NoTransactionError):
            outbox.send(session, "orders", b"x")  # closed
        async with async_engine.connect() as connection:
            with pytest.raises(NoTransactionError, match=r"engine\.begin"):
                outbox.send(connection, "orders", b"x")
        with pytest.raises(NoTransactionError):
            outbox.send(connection, "orders", b"x")  # closed
        async with async_sessionmaker(async_engine).begin() as session:
            with pytest.raises(InvalidMessageError):
                outbox.send(session, "orders", b"")
            with pytest.raises(InvalidMessageError, match="message_id="):
                outbox.send(session, "orders", b"x", properties={"UNIQ_KEY": "mine"})
        autocommit = async_engine.execution_options(isolation_level="AUTOCOMMIT")
        async with autocommit.connect() as connection, connection.begin():
            with pytest.raises(NoTransactionError, match="AUTOCOMMIT"):
                await outbox.send(connection, "orders", b"x")

    run(work, url)
    assert stub_count(engine) == 0


def test_dead_database_raises_a_database_error_and_writes_nothing(engine: Engine, url: str,
                                                                   tmp_path):
    dead_url = {"sqlite": f"sqlite:///{tmp_path / 'missing-dir' / 'app.db'}",
                "postgresql": "postgresql+psycopg://postgres@127.0.0.1:9/test",
                "mysql": "mysql+pymysql://root@127.0.0.1:9/test"}[engine.dialect.name
                                                                  .replace("mariadb", "mysql")]

    async def work(async_engine: AsyncEngine) -> None:
        with pytest.raises((DBAPIError, OSError)):
            async with async_sessionmaker(async_engine).begin() as session:
                await outbox.send(session, "orders", b"x")

    run(work, dead_url)
    assert stub_count(engine) == 0


def test_async_urls_derive_from_the_sync_ones():
    assert str(async_database_url("postgresql://u@h/db")) == "postgresql+asyncpg://u@h/db"
    assert str(async_database_url("postgresql+psycopg2://u@h/db")) == \
        "postgresql+asyncpg://u@h/db"
    assert str(async_database_url("sqlite:///x.db")) == "sqlite+aiosqlite:///x.db"
    assert str(async_database_url("mysql://root@h/db")) == "mysql+aiomysql://root@h/db"
    assert str(async_database_url("mariadb+pymysql://root@h/db")) == \
        "mariadb+aiomysql://root@h/db"
    assert str(async_database_url("sqlite+aiosqlite:///x.db")) == "sqlite+aiosqlite:///x.db"
    with pytest.raises(ConfigurationError, match="no async driver"):
        async_database_url("oracle://u@h/db")
    with pytest.raises(ConfigurationError, match="file-backed"):
        create_async_database_engine("sqlite://")
    with pytest.raises(ConfigurationError, match="libpq option"):
        create_async_database_engine("postgresql://u@h/db?options=-Xverbose")


def test_a_libpq_search_path_option_reaches_asyncpg(migrated_database_url: str):
    if not migrated_database_url.startswith("postgresql"):
        return  # a PostgreSQL URL option: the PostgreSQL run checks it
    url = make_url(migrated_database_url).update_query_dict(
        {"options": "-csearch_path=postbox_async_test,public -c application_name=shop"})

    async def work(async_engine: AsyncEngine) -> list[str]:
        async with async_engine.connect() as connection:
            return [str((await connection.exec_driver_sql(f"SHOW {name}")).scalar())
                    for name in ("search_path", "application_name")]

    assert run(work, url.render_as_string(hide_password=False)) == \
        ["postbox_async_test,public", "shop"]


# ---- the relay --------------------------------------------------------------------------------


@pytest.fixture
def async_outbox(app: App, url: str) -> Iterator[tuple[Outbox, asyncio.AbstractEventLoop]]:
    """An ``Outbox`` watching an async engine, and the loop that engine lives on."""
    loop = asyncio.new_event_loop()
    async_engine = create_async_database_engine(url)
    box = Outbox(app, async_engine=async_engine, options=RelayOptions(poll_interval_ms=60_000))
    try:
        yield box, loop
    finally:
        app.stop()
        loop.run_until_complete(async_engine.dispose())
        loop.close()


def test_relay_publishes_an_async_send_after_the_commit_not_a_rollback(
        async_outbox: tuple[Outbox, asyncio.AbstractEventLoop], app: App, broker: Broker):
    box, loop = async_outbox

    async def send(topic: str, fail: bool) -> str:
        async with box.async_session.begin() as session:
            message_id = await outbox.send(session, topic, b"body")
            if fail:
                raise RuntimeError("rolled back")
            return message_id

    with pytest.raises(RuntimeError):
        loop.run_until_complete(send("lost", True))
    kept_id = loop.run_until_complete(send("kept", False))
    app.start()  # the hook handed the id over already: the relay's first pass publishes it
    wait_until(lambda: box.relay.stats.published, what="the publish")
    assert stub_row(box.engine, kept_id)["published_at"] is not None
    assert box.relay.stats.published_by_hook == 1 and box.relay.stats.published_by_poll == 0
    assert [record.unique_key for record in stored_records(broker, "kept")] == [kept_id]
    assert broker.topic_config("lost") is None


def test_polling_finds_an_async_stub_the_relay_never_heard_of(app: App, url: str,
                                                              broker: Broker):
    box = Outbox(app, options=RelayOptions(poll_interval_ms=50))  # no async engine: no hook

    async def work(async_engine: AsyncEngine) -> str:
        async with async_sessionmaker(async_engine).begin() as session:
            return await outbox.send(session, "polled", b"found")

    message_id = run(work, url)
    app.start()
    wait_until(lambda: box.relay.stats.published, what="the poll")
    assert stub_row(box.engine, message_id)["published_at"] is not None
    assert box.relay.stats.published_by_poll == 1
    assert [record.unique_key for record in stored_records(broker, "polled")] == [message_id]
    with pytest.raises(ConfigurationError, match="async engine"):
        _ = box.async_session
