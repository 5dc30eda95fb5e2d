"""``idempotent=True`` on an ``async def`` handler: its ``AsyncSession`` transaction confirms the
stub, and the effect happens exactly once — on a real store, a real database through its async
driver (aiosqlite, asyncpg or aiomysql with ``POSTBOX_TEST_DATABASE_URL``) and real Redis.
Most paths run inline with a fake clock; the concurrency test runs a real consumer whose
consume threads race duplicates on the database."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from sqlalchemy import Column, Integer, MetaData, String, Table, func, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from postbox import outbox
from postbox.framework import App, ConsumerOptions, DeadLetter
from postbox.framework.testing import InlineRunner
from postbox.idempotency import IdempotencyMiddleware
from postbox.idempotency.async_handler import LoopEngines
from tests.idempotency.conftest import count_rows, ledger
from tests.idempotency.test_middleware import _middleware, _publish, _send_stub, _stub
from tests.support.polling import wait_until

effects = Table("async_effects", MetaData(),
                Column("id", Integer, primary_key=True, autoincrement=True),
                Column("message_id", String(128), nullable=False))
"""An effect with no key of its own: a second run of a handler would add a second row."""


def _stub_status(app: App, message_id: str) -> str:
    return _stub(app, message_id)["status"]


def _register(app: App, calls: list[str], *, fail_first: int = 0,
              error: Callable[[], Exception] = lambda: RuntimeError("injected failure")) -> None:
    @app.handler(topic="orders", consumer_group="billing", consume_from="first",
                 idempotent=True)
    async def bill(message, session) -> None:
        assert isinstance(session, AsyncSession) and session.in_transaction()
        calls.append(message.msg_id)
        await session.execute(insert(ledger).values(message_id=message.msg_id, pid="1"))
        await asyncio.sleep(0)  # a real suspension point inside the transaction
        if len(calls) <= fail_first:
            raise error()


def test_each_message_takes_effect_once_and_confirms_its_stub(make_app, fake_clock):
    app = make_app(clock=fake_clock)
    calls: list[str] = []
    _register(app, calls)
    message_id = _send_stub(app)
    _publish(app, message_id, copies=3)
    InlineRunner(app).run_until_idle(advance_clock=True)

    engine = outbox.database_engine(app)
    assert calls == [message_id]
    assert count_rows(engine, ledger) == 1
    assert _stub_status(app, message_id) == "confirmed"
    assert count_rows(engine, outbox.message_log) == 0
    assert count_rows(engine, outbox.message_processed) == 1
    stats = _middleware(app).stats
    assert (stats.processed, stats.duplicates_by_redis) == (1, 2)


def test_a_duplicate_redis_forgot_is_rejected_in_the_async_transaction(make_app, fake_clock,
                                                                        redis_url):
    import redis

    app = make_app(clock=fake_clock)
    calls: list[str] = []
    _register(app, calls)
    message_id = _send_stub(app)
    _publish(app, message_id)
    runner = InlineRunner(app)
    runner.run_until_idle(advance_clock=True)
    redis.Redis.from_url(redis_url).flushdb()  # Redis lost its marks
    _publish(app, message_id)
    runner.run_until_idle(advance_clock=True)

    assert calls == [message_id]
    stats = _middleware(app).stats
    assert (stats.processed, stats.duplicates_by_database) == (1, 1)
    assert count_rows(outbox.database_engine(app), outbox.message_log) == 0


def test_a_failing_async_handler_rolls_back_its_effect_and_the_confirmation(make_app,
                                                                              fake_clock):
    app = make_app(clock=fake_clock)
    calls: list[str] = []
    _register(app, calls, fail_first=2)
    message_id = _send_stub(app)
    _publish(app, message_id)
    InlineRunner(app).run_until_idle(advance_clock=True)

    assert calls == [message_id] * 3
    assert count_rows(outbox.database_engine(app), ledger) == 1  # two rolled-back inserts
    assert _stub_status(app, message_id) == "confirmed"
    middleware = _middleware(app)
    assert (middleware.stats.failures, middleware.stats.processed) == (2, 1)
    assert middleware.guard is not None and middleware.guard.stats.held == 0


def test_a_dead_lettered_message_leaves_no_effect_and_its_stub_unconfirmed(make_app,
                                                                            fake_clock):
    app = make_app(clock=fake_clock)
    calls: list[str] = []
    _register(app, calls, fail_first=1, error=lambda: DeadLetter("bad order"))
    message_id = _send_stub(app)
    _publish(app, message_id)
    InlineRunner(app).run_until_idle(advance_clock=True)

    engine = outbox.database_engine(app)
    assert calls == [message_id]
    assert count_rows(engine, ledger) == 0
    assert count_rows(engine, outbox.message_processed) == 0
    assert _stub_status(app, message_id) == "unconfirmed"
    dead = app.broker.find_by_unique_key("%DLQ%billing", message_id)
    assert len(dead) == 1


def test_an_unreachable_async_database_means_retry_later_and_nothing_is_lost(
        make_app, fake_clock, migrated_database_url, tmp_path):
    app = make_app(clock=fake_clock)
    dead_url = {"sqlite": f"sqlite+aiosqlite:///{tmp_path / 'missing' / 'app.db'}",
                "postgresql": "postgresql+asyncpg://postgres@127.0.0.1:9/test",
                "mysql": "mysql+aiomysql://root@127.0.0.1:9/test"}[
        outbox.database.dialect_name(outbox.database_engine(app))]
    app.add_middleware(IdempotencyMiddleware(outbox.database_engine(app), None,
                                             async_database_url=dead_url))
    calls: list[str] = []
    _register(app, calls)
    message_id = _send_stub(app)
    _publish(app, message_id)
    runner = InlineRunner(app)
    middleware = _middleware(app)
    for _ in range(3):
        runner.run_once()
    assert middleware.stats.database_errors >= 1
    assert calls == [] and count_rows(outbox.database_engine(app), ledger) == 0

    middleware.async_engines = LoopEngines(migrated_database_url)  # the database is back
    runner.run_until_idle(advance_clock=True)
    assert calls == [message_id]
    assert count_rows(outbox.database_engine(app), ledger) == 1
    assert _stub_status(app, message_id) == "confirmed"


def test_sync_and_async_idempotent_handlers_live_in_one_app(make_app, fake_clock):
    app = make_app(clock=fake_clock)
    seen: dict[str, list[str]] = {"sync": [], "async": []}

    @app.handler(topic="orders", consumer_group="sync-group", consume_from="first",
                 idempotent=True)
    def record_sync(message, session) -> None:
        seen["sync"].append(message.msg_id)
        session.execute(insert(effects).values(message_id="sync:" + message.msg_id))

    @app.handler(topic="orders", consumer_group="async-group", consume_from="first",
                 idempotent=True)
    async def record_async(message, session) -> None:
        seen["async"].append(message.msg_id)
        await session.execute(insert(effects).values(message_id="async:" + message.msg_id))

    effects.create(outbox.database_engine(app))
    message_id = _send_stub(app)
    _publish(app, message_id, copies=2)
    InlineRunner(app).run_until_idle(advance_clock=True)

    assert seen == {"sync": [message_id], "async": [message_id]}
    assert count_rows(outbox.database_engine(app), effects) == 2


def test_concurrent_duplicates_run_the_effect_once(make_app, migrated_database_url):
    """Eight consume threads, duplicates spread over the queues, no Redis: the database claim
    alone decides, while the handlers of one message overlap on the loop."""
    app = make_app(consumer_options=ConsumerOptions(consume_thread_count=8,
                                                    long_polling_ms=100))
    engine = outbox.database_engine(app)
    app.add_middleware(IdempotencyMiddleware(engine, None))
    effects.create(engine)

    @app.handler(topic="orders", consumer_group="billing", consume_from="first",
                 idempotent=True)
    async def ship(message, session) -> None:
        await session.execute(insert(effects).values(message_id=message.msg_id))
        await asyncio.sleep(0.005)  # hold the claim while the duplicates arrive

    message_ids = [_send_stub(app) for _ in range(12)]
    for message_id in message_ids:
        _publish(app, message_id, copies=4)
    app.start()
    wait_until(lambda: count_rows(engine, outbox.message_processed) == len(message_ids),
               timeout_s=30, what="every message processed")
    wait_until(lambda: _middleware(app).stats.processed + _middleware(app).stats
               .duplicates_by_database >= 4 * len(message_ids), timeout_s=30,
               what="every copy decided")
    app.stop()

    with engine.connect() as connection:
        per_message = dict(connection.execute(select(effects.c.message_id, func.count())
                                              .group_by(effects.c.message_id)).all())
    assert per_message == dict.fromkeys(message_ids, 1)
    assert all(_stub_status(app, message_id) == "confirmed" for message_id in message_ids)
    stats = _middleware(app).stats
    assert stats.processed == len(message_ids)
    assert stats.duplicates_by_database == 3 * len(message_ids)
    assert len(_middleware(app).async_engines) == 0  # disposed on its loop as it shut down
