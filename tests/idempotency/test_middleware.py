"""The decision flow of the idempotency middleware, one path per test, on a real store, a real
database and real Redis (driven inline with a fake clock so retries through the delay levels
take milliseconds)."""

from __future__ import annotations

import logging

import pytest
import redis
from sqlalchemy import Column, MetaData, String, Table, create_engine, insert, select, text
from sqlalchemy.orm import DeclarativeBase

from postbox import outbox
from postbox.framework import (
    App,
    ConfigurationError,
    DeadLetter,
    Middleware,
    RetryLater,
    SkipMessage,
)
from postbox.framework.testing import InlineRunner
from postbox.idempotency import GuardState, IdempotencyMiddleware, RedisGuard
from postbox.storage_engine import Message
from tests.idempotency.conftest import count_rows, ledger
from tests.support.services import database_backend, free_port
from tests.support.tcp_proxy import TcpProxy

effects = Table("effects", MetaData(),
                Column("consumer_group", String(64), primary_key=True),
                Column("message_id", String(128), primary_key=True))


def _send_stub(app: App, body: bytes = b"order") -> str:
    engine = outbox.database_engine(app)
    with engine.begin() as connection:
        return outbox.send(connection, "orders", body, tags="paid")


def _publish(app: App, message_id: str, copies: int = 1) -> None:
    for _ in range(copies):
        app.producer.send("orders", b"order", tags="paid", unique_key=message_id)


def _middleware(app: App):
    return next(layer for layer in app.middleware if isinstance(layer, IdempotencyMiddleware))


def _stub(app: App, message_id: str):
    with outbox.database_engine(app).connect() as connection:
        return connection.execute(select(outbox.message_stub).where(
            outbox.message_stub.c.message_id == message_id)).mappings().one()


def _register_ledger_handler(app: App, calls: list[str], fail_first: int = 0) -> None:
    @app.handler(topic="orders", consumer_group="billing", consume_from="first",
                 idempotent=True)
    def bill(message, session) -> None:
        calls.append(message.msg_id)
        session.execute(insert(ledger).values(message_id=message.msg_id, pid="1"))
        if len(calls) <= fail_first:
            raise RuntimeError("injected failure")


def test_each_message_takes_effect_once_and_confirms_its_stub(make_app, fake_clock):
    app = make_app(clock=fake_clock)
    calls: list[str] = []
    _register_ledger_handler(app, calls)
    message_id = _send_stub(app)
    _publish(app, message_id, copies=3)
    InlineRunner(app).run_until_idle(advance_clock=True)

    engine = outbox.database_engine(app)
    assert calls == [message_id]
    assert count_rows(engine, ledger) == 1
    stub = _stub(app, message_id)
    assert stub["status"] == "confirmed" and stub["confirmed_at"] is not None
    assert count_rows(engine, outbox.message_log) == 0
    assert count_rows(engine, outbox.message_processed) == 1
    stats = _middleware(app).stats
    assert (stats.processed, stats.duplicates_by_redis) == (1, 2)


def test_a_duplicate_redis_forgot_is_rejected_by_the_database(make_app, fake_clock, redis_url):
    app = make_app(clock=fake_clock)
    calls: list[str] = []
    _register_ledger_handler(app, calls)
    message_id = _send_stub(app)
    _publish(app, message_id)
    runner = InlineRunner(app)
    runner.run_until_idle(advance_clock=True)
    redis.Redis.from_url(redis_url).flushdb()  # Redis lost its marks (restart, eviction)
    _publish(app, message_id)
    runner.run_until_idle(advance_clock=True)

    assert calls == [message_id]
    stats = _middleware(app).stats
    assert (stats.processed, stats.duplicates_by_database) == (1, 1)
    assert count_rows(outbox.database_engine(app), outbox.message_log) == 0


def test_a_failing_handler_is_rolled_back_and_retried_until_it_succeeds(make_app, fake_clock):
    app = make_app(clock=fake_clock)
    calls: list[str] = []
    _register_ledger_handler(app, calls, fail_first=2)
    message_id = _send_stub(app)
    _publish(app, message_id)
    InlineRunner(app).run_until_idle(advance_clock=True)

    assert calls == [message_id] * 3
    assert count_rows(outbox.database_engine(app), ledger) == 1  # two rolled-back inserts
    assert _stub(app, message_id)["status"] == "confirmed"
    stats = _middleware(app).stats
    assert (stats.failures, stats.processed) == (2, 1)
    assert _middleware(app).guard.stats.held == 0  # each failure released its mark


def test_marks_are_token_fenced(redis_url):
    guard = RedisGuard(redis.Redis.from_url(redis_url), ttl_ms=60_000, done_ttl_ms=120_000)
    client = redis.Redis.from_url(redis_url)
    key = guard.key("g", "m1")
    assert guard.acquire("g", "m1", "token-a") is GuardState.ACQUIRED
    assert guard.acquire("g", "m1", "token-b") is GuardState.HELD
    guard.release("g", "m1", "token-b")  # not ours: nothing happens
    guard.mark_done("g", "m1", "token-b")
    assert client.get(key) == b"token-a"
    assert 0 < client.pttl(key) <= 60_000
    guard.mark_done("g", "m1", "token-a")
    assert client.get(key) == b"done:token-a"
    assert 60_000 < client.pttl(key) <= 120_000
    guard.release("g", "m1", "token-a")  # a done mark is no longer the attempt's to delete
    assert client.get(key) == b"done:token-a"
    assert guard.acquire("g2", "m1", "x") is GuardState.ACQUIRED  # keyed by group too


def test_a_redis_error_is_never_read_as_duplicate(make_app, fake_clock, caplog):
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    app = make_app(clock=fake_clock, redis=dead_redis)
    calls: list[str] = []
    _register_ledger_handler(app, calls)
    ids = [_send_stub(app) for _ in range(5)]
    for message_id in ids:
        _publish(app, message_id, copies=2)
    with caplog.at_level(logging.WARNING):
        InlineRunner(app).run_until_idle(advance_clock=True)

    assert sorted(calls) == sorted(ids)
    assert count_rows(outbox.database_engine(app), ledger) == 5
    middleware = _middleware(app)
    assert middleware.stats.duplicates_by_database == 5
    assert middleware.guard.stats.acquired == 0 and middleware.guard.stats.unavailable == 10
    assert "Redis is unavailable" in caplog.text


def test_redis_stopped_mid_run_then_restarted(make_app, fake_clock, redis_process, monkeypatch):
    app = make_app(clock=fake_clock, redis=redis_process.url)
    calls: list[str] = []
    _register_ledger_handler(app, calls)
    runner = InlineRunner(app)
    guard = _middleware(app).guard
    guard.retry_after_error_ms = 50

    first = [_send_stub(app) for _ in range(3)]
    for message_id in first:
        _publish(app, message_id)
    runner.run_until_idle(advance_clock=True)
    assert guard.stats.acquired == 3

    redis_process.stop()
    second = [_send_stub(app) for _ in range(3)]
    for message_id in second + first:  # new messages and duplicates of the first ones
        _publish(app, message_id)
    runner.run_until_idle(advance_clock=True)
    assert guard.stats.acquired == 3 and guard.stats.unavailable >= 1

    redis_process.start()
    guard._down_until_s = 0.0  # don't wait out the back-off interval in a test
    third = [_send_stub(app) for _ in range(3)]
    for message_id in third + second:
        _publish(app, message_id)
    runner.run_until_idle(advance_clock=True)

    # the fast path resumed: the third batch and the second's duplicates (whose marks were
    # never set while Redis was down, so the database rejected them) went through Redis
    assert guard.stats.acquired == 9
    assert _middleware(app).stats.duplicates_by_database == 6
    assert sorted(calls) == sorted(first + second + third)
    assert count_rows(outbox.database_engine(app), ledger) == 9
    assert count_rows(outbox.database_engine(app), outbox.message_log) == 0


def test_an_unreachable_database_means_retry_later_and_nothing_is_lost(
        make_app, fake_clock, migrated_database_url):
    backend = database_backend(migrated_database_url)
    engine_url = make_engine_url = migrated_database_url
    proxy = None
    if backend != "sqlite":
        url = create_engine(migrated_database_url).url
        proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432).start()
        make_engine_url = url.set(host="127.0.0.1", port=proxy.port).render_as_string(False)
    app = make_app(clock=fake_clock, database=make_engine_url)
    calls: list[str] = []
    _register_ledger_handler(app, calls)
    message_id = _send_stub(app)
    _publish(app, message_id)
    runner = InlineRunner(app)
    middleware = _middleware(app)

    if proxy is not None:
        proxy.stop()
        outage = None
    else:  # SQLite: a writer holding the database lock makes it unavailable for writes
        middleware.engine = outbox.create_database_engine(engine_url,
                                                          sqlite_busy_timeout_s=0.05)
        outage = create_engine(engine_url).connect()
        outage.exec_driver_sql("BEGIN EXCLUSIVE")
    for _ in range(5):
        runner.run_once()
    assert middleware.stats.database_errors >= 1
    assert calls == []

    if proxy is not None:
        proxy.start()
    else:
        outage.rollback()
        outage.close()
    runner.run_until_idle(advance_clock=True)
    assert calls == [message_id]
    assert count_rows(outbox.database_engine(app), ledger) == 1
    assert _stub(app, message_id)["status"] == "confirmed"
    if proxy is not None:
        proxy.stop()


def test_a_message_without_a_message_id_goes_to_the_dlq(make_app, fake_clock):
    app = make_app(clock=fake_clock)
    calls: list[str] = []
    _register_ledger_handler(app, calls)
    runner = InlineRunner(app)
    app.broker.send(Message("orders", b"from a client that sets no UNIQ_KEY"))
    runner.run_until_idle(advance_clock=True)

    assert calls == []
    dead = app.broker.dead_letters("billing")
    assert len(dead) == 1 and "no message id" in dead[0].properties.get("DLQ_REASON", "")
    assert count_rows(outbox.database_engine(app), outbox.message_log) == 0


def test_each_consumer_group_takes_effect_once(make_app, fake_clock):
    app = make_app(clock=fake_clock)
    effects.create(outbox.database_engine(app))
    for group in ("billing", "shipping"):
        @app.handler(topic="orders", consumer_group=group, consume_from="first",
                     idempotent=True)
        def record(message, session, group=group) -> None:
            session.execute(insert(effects).values(consumer_group=group,
                                                   message_id=message.msg_id))
    message_id = _send_stub(app)
    _publish(app, message_id, copies=2)
    InlineRunner(app).run_until_idle(advance_clock=True)

    with outbox.database_engine(app).connect() as connection:
        rows = connection.execute(select(effects.c.consumer_group).order_by(
            effects.c.consumer_group)).scalars().all()
    assert rows == ["billing", "shipping"]


def test_a_stub_in_another_database_is_recorded_in_the_consumers_own(
        make_app, fake_clock, tmp_path):
    producer_url = f"sqlite:///{tmp_path / 'producer.db'}"
    producer_engine = outbox.create_database_engine(producer_url)
    outbox.metadata.create_all(producer_engine)
    app = make_app(clock=fake_clock)
    calls: list[str] = []
    _register_ledger_handler(app, calls)
    with producer_engine.begin() as connection:
        message_id = outbox.send(connection, "orders", b"order")
    _publish(app, message_id, copies=2)
    InlineRunner(app).run_until_idle(advance_clock=True)

    assert calls == [message_id]
    with outbox.database_engine(app).connect() as connection:
        processed = connection.execute(select(outbox.message_processed.c.message_id)).all()
    assert processed == [(message_id,)]
    with producer_engine.connect() as connection:  # the producer's stub is judged elsewhere
        assert connection.execute(select(outbox.message_stub.c.status)).scalar() == \
            "unconfirmed"


def test_the_handler_outcomes_still_apply(make_app, fake_clock):
    app = make_app(clock=fake_clock)

    @app.handler(topic="orders", consumer_group="billing", consume_from="first",
                 idempotent=True, reconsume_count_max=2)
    def bill(message, session) -> None:
        session.execute(insert(ledger).values(message_id=message.msg_id, pid="1"))
        if message.text == "dead":
            raise DeadLetter("refused")
        raise RetryLater()

    for body in ("dead", "retry"):
        with outbox.database_engine(app).begin() as connection:
            message_id = outbox.send(connection, "orders", body)
        app.producer.send("orders", body, unique_key=message_id)
    InlineRunner(app).run_until_idle(advance_clock=True)

    assert len(app.broker.dead_letters("billing")) == 2
    assert count_rows(outbox.database_engine(app), ledger) == 0  # every attempt rolled back
    assert count_rows(outbox.database_engine(app), outbox.message_processed) == 0


def test_start_fails_clearly_without_the_tables(tmp_path, database_url, redis_url):
    app = App(store_url=str(tmp_path / "store"), database_url=database_url,
              redis_url=redis_url)

    @app.handler(topic="orders", consumer_group="billing", idempotent=True)
    def bill(message, session) -> None:
        pass

    with pytest.raises(ConfigurationError, match="postbox db upgrade"):
        app.start()
    app.stop()


def test_an_idempotent_handler_needs_a_database(tmp_path):
    app = App(store_url=str(tmp_path / "store"))

    @app.handler(topic="orders", consumer_group="billing", idempotent=True)
    def bill(message, session) -> None:
        pass

    with pytest.raises(ConfigurationError, match="database_url"):
        app.start()
    app.stop()


def test_an_idempotent_handler_takes_one_message_per_call(tmp_path):
    app = App(store_url=str(tmp_path / "store"))
    with pytest.raises(ConfigurationError, match="batch_size=1"):
        app.handler(topic="orders", consumer_group="billing", idempotent=True,
                    batch_size=8)(lambda messages, session: None)


def test_idempotent_must_be_a_bool(tmp_path):
    app = App(store_url=str(tmp_path / "store"))
    with pytest.raises(ConfigurationError, match="idempotent= must be True or False"):
        app.handler(topic="orders", consumer_group="billing",
                    idempotent="yes")(lambda message, session: None)
    assert app.handlers == []


def test_the_middleware_is_found_by_entry_point_and_built_once(make_app, fake_clock):
    """``idempotent=True`` alone gets the registered middleware, built from the app at start;
    one added by the application serves the handlers instead."""
    app = make_app(clock=fake_clock)
    calls: list[str] = []
    _register_ledger_handler(app, calls)
    assert dict(app.handlers[0].options) == {"idempotent": True}
    app.start(threads=False)
    [layer] = [each for each in app.middleware if isinstance(each, IdempotencyMiddleware)]
    assert app.middleware[-1] is layer  # innermost (tracing, when installed, is outermost)
    assert layer.engine is outbox.database_engine(app)
    app.stop()

    own = IdempotencyMiddleware(outbox.database_engine(app))
    chosen = make_app(clock=fake_clock, name="other")
    chosen.add_middleware(own)
    _register_ledger_handler(chosen, calls)
    chosen.start(threads=False)
    assert [each for each in chosen.middleware
            if isinstance(each, IdempotencyMiddleware)] == [own]
    message_id = _send_stub(chosen)
    _publish(chosen, message_id)
    InlineRunner(chosen).run_until_idle()
    assert calls == [message_id]
    assert own.stats.processed == 1


def test_the_database_check_runs_in_the_handlers_transaction(make_app, fake_clock):
    """The session the handler gets is the one whose commit confirms the stub: a business row,
    the processed row, the confirmation and the log row's deletion become visible together."""
    app = make_app(clock=fake_clock)
    outside = create_engine(outbox.database_engine(app).url)  # plain: reads what is committed
    seen: list[tuple[str, ...]] = []
    query = {"status": "SELECT status FROM message_stub WHERE message_id = :id",
             "processed": "SELECT count(*) FROM message_processed WHERE message_id = :id",
             "logged": "SELECT count(*) FROM message_log WHERE message_id = :id"}

    @app.handler(topic="orders", consumer_group="billing", consume_from="first",
                 idempotent=True)
    def bill(message, session) -> None:
        session.execute(insert(ledger).values(message_id=message.msg_id, pid="1"))
        inside = [str(session.execute(text(sql), {"id": message.msg_id}).scalar())
                  for sql in query.values()]
        with outside.connect() as connection:
            committed = [str(connection.execute(text(sql), {"id": message.msg_id}).scalar())
                         for sql in query.values()]
        seen.append((*inside, *committed))

    message_id = _send_stub(app)
    _publish(app, message_id)
    try:
        InlineRunner(app).run_until_idle(advance_clock=True)
    finally:
        outside.dispose()
    # the handler's transaction claimed, confirmed and forgot; nothing of it committed yet
    assert seen == [("confirmed", "1", "0", "unconfirmed", "0", "1")]
    assert _stub(app, message_id)["status"] == "confirmed"


class _Base(DeclarativeBase):
    pass


class LedgerEntry(_Base):
    __table__ = ledger


def test_a_handlers_own_integrity_error_is_a_failure_not_a_duplicate(make_app, fake_clock):
    """A business unique key the handler violates surfaces at flush; the message is retried
    (here: to the DLQ), never acknowledged as if another attempt had done it."""
    app = make_app(clock=fake_clock)

    @app.handler(topic="orders", consumer_group="billing", consume_from="first",
                 idempotent=True, reconsume_count_max=1)
    def bill(message, session) -> None:
        session.add(LedgerEntry(message_id="always-the-same", pid="1"))  # flushed later

    with outbox.database_engine(app).begin() as connection:
        connection.execute(insert(ledger).values(message_id="always-the-same", pid="0"))
    message_id = _send_stub(app)
    _publish(app, message_id)
    InlineRunner(app).run_until_idle(advance_clock=True)

    stats = _middleware(app).stats
    assert stats.duplicates_by_database == 0 and stats.failures == 2
    assert len(app.broker.dead_letters("billing")) == 1
    assert _stub(app, message_id)["status"] == "unconfirmed"
    assert count_rows(outbox.database_engine(app), outbox.message_processed) == 0


def test_a_message_an_outer_middleware_skips_leaves_no_receipt_row(make_app, fake_clock):
    """The consume task's receipts are written before any middleware runs per message; a
    message that never reaches the decision flow must not stay "in flight" for the resend
    rule (the payments example loses messages this way)."""
    app = make_app(clock=fake_clock)

    class Lose(Middleware):
        def before_consume(self, context) -> None:
            raise SkipMessage("lost on purpose")

    app.add_middleware(Lose())
    calls: list[str] = []
    _register_ledger_handler(app, calls)
    message_id = _send_stub(app)
    _publish(app, message_id)
    InlineRunner(app).run_until_idle(advance_clock=True)
    assert calls == []
    assert count_rows(outbox.database_engine(app), outbox.message_log) == 0
    assert _stub(app, message_id)["status"] == "unconfirmed"


# ---- the handler's signature, checked at registration ----------------------------------------

def test_a_session_parameter_without_idempotent_is_refused_at_registration(tmp_path):
    """Without ``idempotent=True`` nothing passes a session: the handler would raise
    TypeError on every delivery until its messages were dead-lettered."""
    app = App(store_url=str(tmp_path / "store"))

    def bill(message, session) -> None:
        pass

    with pytest.raises(ConfigurationError, match=r"bill\(message, session\).*called as "
                       r"bill\(message\).*idempotent=True"):
        app.handler(topic="orders", consumer_group="billing")(bill)
    assert app.handlers == []
    app.handler(topic="orders", consumer_group="billing", idempotent=True)(bill)  # accepted


@pytest.mark.parametrize("handler", [lambda message: None, lambda: None,
                                     lambda message, session, extra: None])
def test_idempotent_without_a_session_parameter_is_refused_at_registration(tmp_path, handler):
    app = App(store_url=str(tmp_path / "store"))
    with pytest.raises(ConfigurationError, match=r"called as <lambda>\(message, session\).*"
                       r"session from IdempotencyMiddleware \(idempotent=True\)"):
        app.handler(topic="orders", consumer_group="billing", idempotent=True)(handler)
    assert app.handlers == []


def test_async_and_defaulted_session_parameters_are_accepted(tmp_path):
    app = App(store_url=str(tmp_path / "store"))

    async def ship(message, session) -> None:
        pass

    def audit(message, session=None) -> None:
        pass

    app.handler(topic="orders", consumer_group="shipping", idempotent=True)(ship)
    app.handler(topic="orders", consumer_group="audit", idempotent=False)(audit)
    app.handler(topic="orders", consumer_group="audit-2", idempotent=True)(audit)
    assert len(app.handlers) == 3
