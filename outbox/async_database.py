"""Async database engines (SQLAlchemy asyncio) set up as ``outbox.database`` sets up sync ones.

An application that writes with an ``AsyncSession`` uses an ``AsyncEngine``; the outbox's relay
keeps its own sync engine on the same database. ``async_database_url`` derives the async URL
from the sync one, so one ``database_url`` configures both:

    postgresql+psycopg:// (postgresql://, postgres://, +psycopg2)  →  postgresql+asyncpg://
    sqlite:///path (+pysqlite)                                      →  sqlite+aiosqlite:///path
    mysql+pymysql:// (mysql://)          →  mysql+aiomysql://    (mariadb+… likewise)

A URL that names an async driver already is kept. The drivers come with the ``asyncio`` extra.
libpq's ``?options=-csearch_path=…`` (a psycopg URL's way to set server settings) becomes
asyncpg's ``server_settings``.

``create_async_database_engine`` applies the same settings as ``create_database_engine``: on
SQLite the WAL journal, busy timeout and ``BEGIN IMMEDIATE`` (the events go on the engine's
``sync_engine``; aiosqlite runs each call in its own thread, so a lock wait never blocks the
event loop), ``READ COMMITTED`` on MySQL/MariaDB, a pool of ``POOL_SIZE``. In-memory SQLite is
refused: it cannot be shared with the relay's engine.

aiomysql with PyMySQL >= 1.2.3: aiomysql 0.3 calls ``pymysql.converters.escape_bytes_prefixed``,
which PyMySQL turned into a placeholder string, so every ``bytes`` parameter (a stub's body)
fails with "'str' object is not callable" (aio-libs/aiomysql#1080, open). When that name is not
callable, ``create_async_database_engine`` points aiomysql at PyMySQL's ``escape_bytes`` (which
gives the same ``_binary X'…'`` literal since 1.2.3); with a fixed aiomysql nothing changes.

Loops: an ``AsyncEngine``'s pooled connections belong to the event loop that opened them
(asyncpg and aiomysql check it), so one engine serves one loop; dispose it on that loop
(``await engine.dispose()``), e.g. at the end of a FastAPI lifespan.
"""

from __future__ import annotations

import importlib
from typing import Any

from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from postbox.framework import ConfigurationError

from .database import (
    POOL_SIZE,
    SQLITE_BUSY_TIMEOUT_S,
    configure_sqlite,
    explaining_driver_errors,
    normalize_database_url,
)

ASYNC_DRIVERS = {
    "postgresql+psycopg": "postgresql+asyncpg", "postgresql+psycopg2": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
    "sqlite": "sqlite+aiosqlite", "sqlite+pysqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "mysql+pymysql": "mysql+aiomysql", "mysql+aiomysql": "mysql+aiomysql",
    "mariadb+pymysql": "mariadb+aiomysql", "mariadb+aiomysql": "mariadb+aiomysql",
}
"""Sync driver (after ``normalize_database_url``) → the async driver Postbox uses for it."""


def async_database_url(url: str | URL) -> URL:
    """The async form of the database URL ``url`` (see the module docstring). Raises
    ``ConfigurationError`` for a driver without a known async counterpart."""
    parsed = make_url(normalize_database_url(url))
    driver = ASYNC_DRIVERS.get(parsed.drivername)
    if driver is None:
        raise ConfigurationError(
            f"no async driver known for a {parsed.drivername!r} URL; pass an async URL "
            f"({', '.join(sorted(set(ASYNC_DRIVERS.values())))}) explicitly")
    return parsed.set(drivername=driver)


def create_async_database_engine(url: str | URL, *,
                                 sqlite_busy_timeout_s: float = SQLITE_BUSY_TIMEOUT_S,
                                 **engine_options: Any) -> AsyncEngine:
    """An ``AsyncEngine`` for ``url`` (a sync or async URL: ``async_database_url`` first) with
    the settings of the module docstring; ``engine_options`` go to ``create_async_engine``."""
    parsed = async_database_url(url)
    backend = parsed.get_backend_name()
    options: dict[str, Any] = {"pool_size": POOL_SIZE}
    if parsed.get_driver_name() == "asyncpg" and "options" in parsed.query:
        parsed, options["connect_args"] = _libpq_options_as_server_settings(parsed)
    if backend == "sqlite":
        if parsed.database in (None, "", ":memory:") or parsed.database.startswith("file:"):
            raise ConfigurationError("an async engine needs a file-backed SQLite database (an "
                                     "in-memory one cannot be shared with the relay)")
        options["connect_args"] = {"timeout": sqlite_busy_timeout_s}
    elif backend in ("mysql", "mariadb"):
        options["isolation_level"] = "READ COMMITTED"
    options.update(engine_options)
    with explaining_driver_errors(parsed):  # a driver not installed: name its extra
        if parsed.get_driver_name() == "aiomysql":
            _repair_aiomysql_bytes()
        engine = create_async_engine(parsed, **options)
    if backend == "sqlite":
        configure_sqlite(engine.sync_engine, sqlite_busy_timeout_s, wal=True)
    return engine


def _libpq_options_as_server_settings(url: URL) -> tuple[URL, dict[str, Any]]:
    """libpq's ``?options=-csearch_path=app -c…`` (psycopg URLs) as asyncpg's
    ``server_settings``, which asyncpg takes instead (it refuses an ``options`` argument)."""
    raw = url.query["options"]
    text = raw if isinstance(raw, str) else " ".join(raw)
    settings: dict[str, str] = {}
    for word in text.replace("-c ", "-c").split():
        name, equals, value = word.removeprefix("-c").partition("=")
        if not word.startswith("-c") or not equals:
            raise ConfigurationError(f"cannot pass libpq option {word!r} to asyncpg: give "
                                     "the async URL explicitly")
        settings[name] = value
    return url.difference_update_query(["options"]), {"server_settings": settings}


def _repair_aiomysql_bytes() -> None:
    """See "aiomysql with PyMySQL >= 1.2.3" in the module docstring."""
    connection = importlib.import_module("aiomysql.connection")  # untyped packages
    if not callable(getattr(connection, "escape_bytes_prefixed", None)):
        escape_bytes = importlib.import_module("pymysql.converters").escape_bytes
        setattr(connection, "escape_bytes_prefixed", escape_bytes)  # noqa: B010


__all__ = ["ASYNC_DRIVERS", "async_database_url", "create_async_database_engine"]
