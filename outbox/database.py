"""Database engines set up the way the outbox and idempotency rely on.

- SQLite: WAL journal (readers never block the writer), a busy timeout instead of instant
  "database is locked" errors, and ``BEGIN IMMEDIATE`` for every transaction: SQLite has no row
  locks, so a transaction that reads a stub and then writes it must hold the write lock from its
  first statement, or two of them can both read "unconfirmed". A wait for that lock longer
  than ``SQLITE_LOCK_WAIT_LOG_S`` (5 s) is logged with what holds it (``outbox.sqlite_lock``).
  An in-memory URL shares one connection between threads.
- MySQL/MariaDB: ``READ COMMITTED``, so a transaction that waited for a row lock reads the row
  as committed by its holder (InnoDB's default ``REPEATABLE READ`` would read its old snapshot).
- A pool of ``POOL_SIZE`` connections (SQLAlchemy's default is 5): consume threads (8 by
  default), the relay, the consumer admission rounds and the application's own threads use one
  engine at once, and a checkout beyond ``pool_size`` opens an overflow connection that is
  *closed* on return — every transaction of those threads paid a new connection. Measured with
  ``bench/outbox_bench.py``'s pipeline on PostgreSQL: 600 connections opened for 3 100 messages
  and 302 msgs/s with 5; 17 and 358 msgs/s with 16. ``database_engine(app)`` sizes it for the
  app's consume threads; pass ``pool_size=`` for more.
- No ``pool_pre_ping``: it costs a round trip on every checkout (measured in
  ``bench/outbox_bench.py``: 184 → 274 msgs/s on PostgreSQL without it). After a server restart
  the first use of a stale pooled connection fails, SQLAlchemy invalidates the pool, and the
  failed work is retried like any database error (the relay's next pass, the consumer's
  retry topic), so nothing is lost.

``database_engine(app)`` gives every layer of one app the same engine (created from
``app.database_url`` on first use, disposed at ``app.stop()``).

URLs: ``normalize_database_url`` maps the driverless forms people paste from elsewhere to the
drivers Postbox installs: ``postgres://`` and ``postgresql://`` mean ``postgresql+psycopg://``
(psycopg 3, the ``postgres`` extra; SQLAlchemy would otherwise look for psycopg2, or fail on
``postgres``), ``mysql://`` and ``mariadb://`` mean ``mysql+pymysql://`` / ``mariadb+pymysql://``.
A URL that names its driver is kept as it is. A URL whose dialect SQLAlchemy does not know, or
whose driver is not installed, raises ``DatabaseDriverError`` naming the URL forms that work and
the ``postbox`` extra that installs the driver (``DRIVER_EXTRAS``).

Missing schema: ``explaining_missing_tables`` turns the database's "no such table/column"
(SQLite's message, PostgreSQL's SQLSTATE 42P01/42703, MySQL's 1146/1054) into
``MissingTablesError`` saying to run ``postbox db upgrade`` — raised by ``outbox.send`` and the
outbox worker's tasks (``relay_pending``, ``resend_due``, ``cleanup``) instead of a driver error.
"""

from __future__ import annotations

import contextlib
import functools
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError, NoSuchModuleError
from sqlalchemy.pool import StaticPool

from postbox.framework import App, ConfigurationError

from .errors import DatabaseDriverError, MissingTablesError
from .sqlite_lock import HOLDERS, SQLITE_LOCK_WAIT_LOG_S, begin_immediate, database_key

SQLITE_BUSY_TIMEOUT_S = 30.0
POOL_SIZE = 16
"""Connections an engine keeps open: the default consume threads (8) plus relay, admission and
application threads (see the module docstring)."""
POOL_HEADROOM = 8
"""``database_engine(app)``: pool connections beyond the app's consume threads."""
ENGINE_RESOURCE = "postbox.database"
TRANSACTION_ATTEMPTS = 5
"""How often ``run_transaction`` runs a transaction the database rolled back on a deadlock."""
_DEADLOCK_CODES = frozenset({1213})  # MySQL/MariaDB ER_LOCK_DEADLOCK
_DEADLOCK_SQLSTATES = frozenset({"40P01"})  # PostgreSQL deadlock_detected

T = TypeVar("T")
P = ParamSpec("P")

DEFAULT_DRIVERS = {"postgres": "postgresql+psycopg", "postgresql": "postgresql+psycopg",
                   "mysql": "mysql+pymysql", "mariadb": "mariadb+pymysql"}
"""Driverless URL schemes and the driver Postbox uses for them."""
URL_FORMS = ("sqlite:///path/app.db, postgresql+psycopg://user:pass@host/db (postgres:// and "
             "postgresql:// mean this), mysql+pymysql://user:pass@host/db (mysql:// and "
             "mariadb:// mean this)")
"""The database URL forms that work with the drivers Postbox installs (for error messages)."""
DRIVER_EXTRAS = {"psycopg": "postgres", "pymysql": "mysql", "asyncpg": "asyncio",
                 "aiosqlite": "asyncio", "aiomysql": "asyncio"}
"""Database drivers Postbox supports and the ``postbox`` extra that installs each."""
UPGRADE_HINT = "run `postbox db upgrade --db URL` (or `migrations.upgrade(URL)`) first"
_MISSING_SCHEMA_SQLSTATES = frozenset({"42P01", "42703"})  # undefined_table, undefined_column
_MISSING_SCHEMA_CODES = frozenset({1146, 1054})  # ER_NO_SUCH_TABLE, ER_BAD_FIELD_ERROR
_MISSING_SCHEMA_TEXT = ("no such table", "no such column")  # SQLite's messages


def normalize_database_url(url: str | URL) -> str | URL:
    """``url`` with a driverless PostgreSQL/MySQL scheme given its driver (``DEFAULT_DRIVERS``);
    anything else unchanged. Raises what ``make_url`` raises for an unparsable URL."""
    parsed = make_url(url)
    driver = DEFAULT_DRIVERS.get(parsed.drivername)
    if driver is None:
        return url
    parsed = parsed.set(drivername=driver)
    return parsed if isinstance(url, URL) else parsed.render_as_string(hide_password=False)


def create_database_engine(url: str | URL, *,
                           sqlite_busy_timeout_s: float = SQLITE_BUSY_TIMEOUT_S,
                           sqlite_lock_wait_log_s: float = SQLITE_LOCK_WAIT_LOG_S,
                           **engine_options: Any) -> Engine:
    """An engine for ``url`` with the settings described in the module docstring
    (``engine_options`` go to ``sqlalchemy.create_engine``; ``normalize_database_url`` first)."""
    parsed = make_url(normalize_database_url(url))
    with explaining_driver_errors(parsed):
        backend = parsed.get_backend_name()
        if backend == "sqlite":
            engine = _sqlite_engine(parsed, sqlite_busy_timeout_s, engine_options)
            configure_sqlite(engine, sqlite_busy_timeout_s, wal=_sqlite_file_backed(parsed),
                             lock_wait_log_s=sqlite_lock_wait_log_s)
            return engine
        options: dict[str, Any] = {"pool_size": POOL_SIZE}
        if backend in ("mysql", "mariadb"):
            options["isolation_level"] = "READ COMMITTED"
        options.update(engine_options)
        return create_engine(parsed, **options)


@contextlib.contextmanager
def explaining_driver_errors(url: URL) -> Iterator[None]:
    """Turn SQLAlchemy's "unknown dialect" and a driver's ``ImportError`` for ``url`` into a
    ``DatabaseDriverError`` naming the extra to install and the URL forms that work."""
    try:
        yield
    except (NoSuchModuleError, ImportError) as error:
        shown = url.render_as_string(hide_password=True)
        driver = url.drivername.partition("+")[2]  # get_driver_name() loads the dialect
        extra = DRIVER_EXTRAS.get(driver)
        install = (f"install its driver: pip install 'postbox[{extra}]'; " if extra
                   else "")
        raise DatabaseDriverError(f"cannot use database URL {shown!r} ({error}); {install}"
                                  f"URL forms that work: {URL_FORMS}") from error


def is_missing_schema(error: DBAPIError) -> bool:
    """Whether ``error`` is the database saying a table or column does not exist."""
    orig = error.orig
    code = orig.args[0] if orig is not None and orig.args else None
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return (sqlstate in _MISSING_SCHEMA_SQLSTATES or code in _MISSING_SCHEMA_CODES
            or any(text in str(orig) for text in _MISSING_SCHEMA_TEXT))


@contextlib.contextmanager
def explaining_missing_tables(action: str) -> Iterator[None]:
    """Turn the database's "no such table/column" inside the block into
    ``MissingTablesError`` saying to run ``postbox db upgrade`` (``action``: what failed)."""
    try:
        yield
    except DBAPIError as error:
        if not is_missing_schema(error):
            raise
        said = (str(error.orig).strip().splitlines() or [""])[0]  # PostgreSQL adds the SQL
        raise MissingTablesError(f"{action}: the database lacks the outbox tables or columns "
                                 f"({said}); {UPGRADE_HINT}") from error


def explains_missing_tables(action: str) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """``explaining_missing_tables(action)`` around every call of the decorated function."""

    def decorate(function: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            with explaining_missing_tables(action):
                return function(*args, **kwargs)

        return wrapper

    return decorate


def database_engine(app: App) -> Engine:
    """The app's shared engine, from ``app.database_url``."""
    url = app.database_url
    if not url:
        raise ConfigurationError("this needs a database: App(..., database_url=...)")
    pool_size = max(POOL_SIZE, app.consumer_options.consume_thread_count + POOL_HEADROOM)
    return app.resource(ENGINE_RESOURCE, lambda: create_database_engine(
        url, pool_size=pool_size), close=Engine.dispose)


def dialect_name(engine: Engine) -> str:
    """``sqlite``, ``postgresql``, ``mysql`` (MariaDB included) or another dialect's name."""
    name = engine.dialect.name
    return "mysql" if name == "mariadb" else name


def supports_skip_locked(engine: Engine) -> bool:
    """Whether ``SELECT … FOR UPDATE SKIP LOCKED`` exists (PostgreSQL, MySQL 8, MariaDB 10.6)."""
    return dialect_name(engine) in ("postgresql", "mysql")


def run_transaction(engine: Engine, work: Callable[[Connection], T]) -> T:
    """``work(connection)`` in a transaction of its own, run again (up to
    ``TRANSACTION_ATTEMPTS`` times) when the database broke a deadlock by rolling it back.

    MariaDB's ``FOR UPDATE SKIP LOCKED`` still waits for the secondary-index entries another
    relay's record ``UPDATE`` just wrote, so claims and records can deadlock; the rolled-back
    one wrote nothing and is safe to repeat.
    """
    for attempt in range(1, TRANSACTION_ATTEMPTS + 1):
        try:
            with engine.begin() as connection:
                return work(connection)
        except DBAPIError as error:
            if attempt == TRANSACTION_ATTEMPTS or not is_deadlock(error):
                raise
            time.sleep(random.uniform(0, 0.005 * attempt))
    raise AssertionError("unreachable")


def is_deadlock(error: DBAPIError) -> bool:
    """Whether ``error`` is the database rolling the transaction back to break a deadlock."""
    orig = error.orig
    code = orig.args[0] if orig is not None and orig.args else None
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return code in _DEADLOCK_CODES or sqlstate in _DEADLOCK_SQLSTATES


def sqlite_file(url: str | URL) -> Path | None:
    """The database file of a file-backed SQLite URL (as written: maybe relative); None for
    other databases, in-memory SQLite and ``file:`` URIs. Raises what ``make_url`` raises."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") or \
            database.startswith("file:"):
        return None
    return Path(database)


def _sqlite_engine(url: URL, busy_timeout_s: float, engine_options: dict[str, Any]) -> Engine:
    in_memory = url.database in (None, "", ":memory:")
    options: dict[str, Any] = {
        "connect_args": {"timeout": busy_timeout_s, "check_same_thread": False},
    }
    if in_memory:
        options["poolclass"] = StaticPool
    else:
        options["pool_size"] = POOL_SIZE
    options.update(engine_options)
    if in_memory:
        options.pop("pool_size", None)  # one shared connection: nothing to size
    return create_engine(url, **options)


def _sqlite_file_backed(url: URL) -> bool:
    return url.database not in (None, "", ":memory:")


def configure_sqlite(engine: Engine, busy_timeout_s: float, *, wal: bool,
                     lock_wait_log_s: float = SQLITE_LOCK_WAIT_LOG_S) -> None:
    """WAL journal (when ``wal``), the busy timeout and ``BEGIN IMMEDIATE`` on every connection
    of ``engine`` (a sync engine, or an async engine's ``sync_engine``: the events are the
    same); a wait for the write lock longer than ``lock_wait_log_s`` is logged with its holder
    (``outbox.sqlite_lock``)."""
    database = database_key(engine.url)
    step_ms = int(min(busy_timeout_s, lock_wait_log_s) * 1000)

    @event.listens_for(engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy issues BEGIN itself (below)
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        if wal:
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={step_ms}")  # BEGIN IMMEDIATE waits in steps
        cursor.close()

    @event.listens_for(engine, "begin")
    def on_begin(connection: Connection) -> None:
        begin_immediate(connection, database, busy_timeout_s=busy_timeout_s,
                        lock_wait_log_s=lock_wait_log_s)

    @event.listens_for(engine, "commit")
    @event.listens_for(engine, "rollback")
    def on_end(connection: Connection) -> None:
        HOLDERS.released(database, connection)


__all__ = [
    "DEFAULT_DRIVERS", "DRIVER_EXTRAS", "ENGINE_RESOURCE", "POOL_HEADROOM", "POOL_SIZE",
    "SQLITE_BUSY_TIMEOUT_S", "SQLITE_LOCK_WAIT_LOG_S", "TRANSACTION_ATTEMPTS", "UPGRADE_HINT",
    "URL_FORMS", "configure_sqlite",
    "create_database_engine", "database_engine", "dialect_name", "explaining_driver_errors",
    "explaining_missing_tables", "explains_missing_tables", "is_deadlock", "is_missing_schema",
    "normalize_database_url", "run_transaction", "sqlite_file", "supports_skip_locked",
]
