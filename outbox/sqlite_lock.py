"""SQLite's write lock: every transaction takes it at ``BEGIN IMMEDIATE``; a long wait for it is
logged with what holds it.

SQLite has one writer at a time per database file. A transaction that waits for the lock waits
silently up to the busy timeout (``SQLITE_BUSY_TIMEOUT_S``, 30 s) and then fails "database is
locked" — and the usual cause, a transaction left open (a handler that blocks inside its
transaction, a script holding a session), is invisible. So ``begin_immediate`` waits in two
steps: up to ``lock_wait_log_s`` (``SQLITE_LOCK_WAIT_LOG_S``, 5 s) with the connection's busy
timeout set to that, then — after one WARNING naming the holder — for the rest of the busy
timeout, and logs an INFO line when it got the lock. The normal path costs nothing extra: one
``BEGIN IMMEDIATE`` that does not wait.

The holder: ``WriteLockHolders`` records, per database file, which connection of this process
holds the write lock (its thread, since when), from its ``BEGIN IMMEDIATE`` to its commit or
rollback. The warning names that thread, how long it has held the lock and the line of
application code that thread is running now (``sys._current_frames``); when no connection of
this process holds it, the holder is another process (``postbox db``, a second app, the
``sqlite3`` shell). Thread-safe; nothing survives a restart (a crashed holder's lock is released
by SQLite itself).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import OperationalError

log = logging.getLogger(__name__)

SQLITE_LOCK_WAIT_LOG_S = 5.0
"""A wait for SQLite's write lock longer than this is logged with what holds it."""
_LIBRARY_FILES = ("/sqlalchemy/", "/threading.py", "/contextlib.py", "/concurrent/futures/",
                  str(Path(__file__)), "/outbox/database.py")
"""Frames skipped when naming the line a holder thread is running (not application code)."""


@dataclass(frozen=True)
class Holder:
    """The connection of this process that holds a database's write lock."""

    connection_id: int
    thread_id: int
    thread_name: str
    since_s: float
    """``time.monotonic()`` when it took the lock."""


class WriteLockHolders:
    """Database file → the connection of this process holding its write lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders: dict[str, Holder] = {}

    def took(self, database: str, connection: Connection) -> None:
        """``connection`` (in the current thread) holds ``database``'s write lock."""
        thread = threading.current_thread()
        holder = Holder(id(connection), thread.ident or 0, thread.name, time.monotonic())
        with self._lock:
            self._holders[database] = holder

    def released(self, database: str, connection: Connection) -> None:
        """``connection`` ended its transaction (nothing if another one is the holder)."""
        with self._lock:
            holder = self._holders.get(database)
            if holder is not None and holder.connection_id == id(connection):
                del self._holders[database]

    def describe(self, database: str) -> str:
        """Who holds ``database``'s write lock, for a log line."""
        with self._lock:
            holder = self._holders.get(database)
        if holder is None:
            return "another process (no connection of this process is in a transaction)"
        frame = sys._current_frames().get(holder.thread_id)
        where = application_line(frame)
        return (f"thread {holder.thread_name!r} of this process, in its transaction for "
                f"{time.monotonic() - holder.since_s:.1f} s"
                + (f", now at {where}" if where else ""))


HOLDERS = WriteLockHolders()
"""The holders of every SQLite database this process opened through ``outbox.database``."""


def application_line(frame: FrameType | None) -> str | None:
    """``file.py:123 in function`` of the innermost frame of ``frame``'s stack that is not in
    SQLAlchemy, threading or this module (None when there is none)."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if not any(part in filename for part in _LIBRARY_FILES):
            return f"{filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return None


def database_key(engine_url: Any) -> str:
    """The registry key of an engine's database: its file as written (or ``:memory:``)."""
    return str(getattr(engine_url, "database", None) or ":memory:")


def begin_immediate(connection: Connection, database: str, *, busy_timeout_s: float,
                    lock_wait_log_s: float) -> None:
    """``BEGIN IMMEDIATE`` on ``connection`` (whose busy timeout is ``lock_wait_log_s`` when
    that is the shorter one), logging a longer wait with the holder (module docstring)."""
    if lock_wait_log_s >= busy_timeout_s:
        connection.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        started_s = time.monotonic()
        try:
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        except OperationalError as error:
            if "locked" not in str(error.orig):
                raise
            _wait_longer(connection, database, started_s, busy_timeout_s, lock_wait_log_s)
    HOLDERS.took(database, connection)


def _wait_longer(connection: Connection, database: str, started_s: float,
                 busy_timeout_s: float, lock_wait_log_s: float) -> None:
    waited_s = time.monotonic() - started_s
    log.warning("[sqlite] waited %.1f s for the write lock of %s, held by %s; waiting up to "
                "%.1f s more (busy timeout %.0f s)", waited_s, database,
                HOLDERS.describe(database), busy_timeout_s - waited_s, busy_timeout_s)
    remaining_ms = max(1, int((busy_timeout_s - waited_s) * 1000))
    connection.exec_driver_sql(f"PRAGMA busy_timeout={remaining_ms}")
    try:
        connection.exec_driver_sql("BEGIN IMMEDIATE")
    finally:
        connection.exec_driver_sql(f"PRAGMA busy_timeout={int(lock_wait_log_s * 1000)}")
    log.info("[sqlite] got the write lock of %s after %.1f s", database,
             time.monotonic() - started_s)


__all__ = ["HOLDERS", "SQLITE_LOCK_WAIT_LOG_S", "Holder", "WriteLockHolders",
           "application_line", "begin_immediate", "database_key"]
