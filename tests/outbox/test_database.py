"""Engine set-up of ``outbox.database``: a connection pool sized for the framework's threads."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from sqlalchemy import Engine, event

from postbox.framework import App, ConsumerOptions
from postbox.outbox import database_engine
from postbox.outbox.database import (
    POOL_HEADROOM,
    POOL_SIZE,
    create_database_engine,
    normalize_database_url,
)


def connections_opened(engine: Engine) -> Callable[[], int]:
    """A counter of the connections the engine's pool opens from now on."""
    opened = [0]

    @event.listens_for(engine, "connect")
    def count(_dbapi_connection, _record) -> None:
        opened[0] += 1

    return lambda: opened[0]


def concurrent_checkouts(engine: Engine, threads: int) -> None:
    """``threads`` pooled connections checked out at the same moment (no transaction: SQLite's
    ``BEGIN IMMEDIATE`` would let only one hold one)."""
    barrier = threading.Barrier(threads, timeout=30)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            with engine.connect():
                barrier.wait()
        except BaseException as error:  # reported below
            errors.append(error)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors, errors


def test_threads_up_to_the_pool_size_reuse_their_connections(make_engine) -> None:
    """12 threads holding a connection at once (more than SQLAlchemy's default pool of 5): the
    first round opens their connections, later rounds open none (an overflow connection would be
    closed on return and opened again, once per transaction)."""
    engine = make_engine()
    opened = connections_opened(engine)
    threads = 12
    assert threads <= POOL_SIZE
    concurrent_checkouts(engine, threads)
    first_round = opened()
    assert first_round == threads
    for _ in range(3):
        concurrent_checkouts(engine, threads)
    assert opened() == first_round
    assert engine.pool.size() == POOL_SIZE


def test_an_apps_engine_has_room_for_its_consume_threads(migrated_database_url: str,
                                                        tmp_path) -> None:
    threads = POOL_SIZE  # more consume threads than the default pool has room for
    app = App(tmp_path / "store", database_url=migrated_database_url,
              consumer_options=ConsumerOptions(consume_thread_count=threads))
    try:
        engine = database_engine(app)
        assert engine.pool.size() == threads + POOL_HEADROOM
    finally:
        app.stop()


@pytest.mark.parametrize(("url", "expected"), [
    ("postgres://app:secret@db/app", "postgresql+psycopg://app:secret@db/app"),
    ("postgresql://app@db:5433/app", "postgresql+psycopg://app@db:5433/app"),
    ("mysql://root@127.0.0.1/test", "mysql+pymysql://root@127.0.0.1/test"),
    ("mariadb://root@127.0.0.1/test", "mariadb+pymysql://root@127.0.0.1/test"),
    ("postgresql+psycopg://app@db/app", "postgresql+psycopg://app@db/app"),
    ("sqlite:///relative/app.db", "sqlite:///relative/app.db"),
])
def test_driverless_urls_get_the_installed_driver(url: str, expected: str):
    assert normalize_database_url(url) == expected


def test_an_app_engine_accepts_a_postgres_url():
    """``postgres://`` (Heroku-style) used to fail with NoSuchModuleError."""
    engine = create_database_engine("postgres://app@127.0.0.1:1/app")
    try:
        assert (engine.dialect.name, engine.dialect.driver) == ("postgresql", "psycopg")
    finally:
        engine.dispose()
