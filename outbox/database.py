"""Database engines set up the way the outbox and idempotency rely on.

- SQLite: WAL journal (readers never block the writer), a busy timeout instead of instant
  "database is locked" errors, and ``BEGIN IMMEDIATE`` for every transaction: SQLite has no row
  locks, so a transaction that reads a stub and then writes it must hold the write lock from its
  first statement, or two of them can both read "unconfirmed". An in-memory URL shares one
  connection between threads.
- MySQL/MariaDB: ``READ COMMITTED``, so a transaction that waited for a row lock reads the row
  as committed by its holder (InnoDB's default ``REPEATABLE READ`` would read its old snapshot).
- Every other database: pre-ping pooled connections, so a restarted server costs one failed
  checkout rather than an error in the middle of a transaction.

``database_engine(app)`` gives every layer of one app the same engine (created from
``app.database_url`` on first use, disposed at ``app.stop()``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import StaticPool

from framework import App, ConfigurationError

SQLITE_BUSY_TIMEOUT_S = 30.0
ENGINE_RESOURCE = "postbox.database"


def create_database_engine(url: str | URL, *,
                           sqlite_busy_timeout_s: float = SQLITE_BUSY_TIMEOUT_S,
                           **engine_options: Any) -> Engine:
    """An engine for ``url`` with the settings described in the module docstring
    (``engine_options`` go to ``sqlalchemy.create_engine``)."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(parsed, sqlite_busy_timeout_s, engine_options)
    options: dict[str, Any] = {"pool_pre_ping": True}
    if backend in ("mysql", "mariadb"):
        options["isolation_level"] = "READ COMMITTED"
    options.update(engine_options)
    return create_engine(parsed, **options)


def database_engine(app: App) -> Engine:
    """The app's shared engine, from ``app.database_url``."""
    if not app.database_url:
        raise ConfigurationError("this needs a database: App(..., database_url=...)")
    return app.resource(ENGINE_RESOURCE, lambda: create_database_engine(app.database_url),
                        close=Engine.dispose)


def dialect_name(engine: Engine) -> str:
    """``sqlite``, ``postgresql``, ``mysql`` (MariaDB included) or another dialect's name."""
    name = engine.dialect.name
    return "mysql" if name == "mariadb" else name


def supports_skip_locked(engine: Engine) -> bool:
    """Whether ``SELECT … FOR UPDATE SKIP LOCKED`` exists (PostgreSQL, MySQL 8, MariaDB 10.6)."""
    return dialect_name(engine) in ("postgresql", "mysql")


def _sqlite_engine(url: URL, busy_timeout_s: float, engine_options: dict[str, Any]) -> Engine:
    in_memory = url.database in (None, "", ":memory:")
    options: dict[str, Any] = {
        "connect_args": {"timeout": busy_timeout_s, "check_same_thread": False},
    }
    if in_memory:
        options["poolclass"] = StaticPool
    options.update(engine_options)
    engine = create_engine(url, **options)

    @event.listens_for(engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy issues BEGIN itself (below)
        cursor = dbapi_connection.cursor()
        if not in_memory:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


__all__ = [
    "ENGINE_RESOURCE", "create_database_engine", "database_engine", "dialect_name",
    "supports_skip_locked",
]
