"""A wait for SQLite's write lock longer than ``sqlite_lock_wait_log_s`` is logged with what
holds it: a thread of this process (its name and the line it is running) or another process;
the waiter still gets the lock when the holder lets go, within the busy timeout."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading

import pytest
from sqlalchemy import text

from tests.support.polling import wait_until

LOG_AFTER_S = 0.2


@pytest.fixture
def engine(make_engine, tmp_path):
    """A SQLite engine (whatever database the run uses) that logs lock waits after
    ``LOG_AFTER_S``."""
    engine = make_engine(f"sqlite:///{tmp_path / 'app.db'}", sqlite_lock_wait_log_s=LOG_AFTER_S)
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE orders (id INTEGER PRIMARY KEY)"))
    return engine


def insert_in_thread(engine, order_id: int) -> tuple[threading.Thread, list[BaseException]]:
    """A thread named ``waiter`` that inserts one order in its own transaction."""
    errors: list[BaseException] = []

    def insert() -> None:
        try:
            with engine.begin() as connection:
                connection.execute(text("INSERT INTO orders VALUES (:id)"), {"id": order_id})
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=insert, name="waiter")
    thread.start()
    return thread, errors


def lock_messages(caplog) -> list[tuple[str, str]]:
    return [(record.levelname, record.getMessage()) for record in caplog.records
            if record.name == "postbox.outbox.sqlite_lock"]


def hold_the_lock(engine, held: threading.Event, release: threading.Event) -> None:
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO orders VALUES (1)"))
        held.set()
        release.wait(30)


def test_a_long_wait_names_the_thread_of_this_process_holding_the_lock(engine, caplog):
    held, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=hold_the_lock, args=(engine, held, release),
                              name="slow-handler")
    holder.start()
    assert held.wait(10)
    with caplog.at_level(logging.INFO, logger="postbox.outbox.sqlite_lock"):
        waiter, errors = insert_in_thread(engine, 2)
        wait_until(lambda: lock_messages(caplog), what="the lock-wait warning")
        release.set()
        holder.join(10)
        waiter.join(30)
    assert errors == []
    (level, warning), (info_level, got) = lock_messages(caplog)
    assert level == "WARNING" and info_level == "INFO"
    assert "for the write lock of" in warning and "app.db" in warning
    assert "held by thread 'slow-handler' of this process" in warning
    assert "test_sqlite_lock_wait.py" in warning and "in hold_the_lock" in warning
    assert got.startswith("[sqlite] got the write lock of")
    with engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM orders")).scalar_one() == 2


def test_a_lock_held_by_another_process_is_named_so(engine, tmp_path, caplog):
    program = ("import sqlite3, sys\n"
               f"db = sqlite3.connect({str(tmp_path / 'app.db')!r}, isolation_level=None)\n"
               "db.execute('BEGIN IMMEDIATE')\n"
               "print('held', flush=True)\n"
               "sys.stdin.readline()\n"
               "db.execute('COMMIT')\n")
    other = subprocess.Popen([sys.executable, "-c", program], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout is not None and other.stdout.readline() == "held\n"
        with caplog.at_level(logging.INFO, logger="postbox.outbox.sqlite_lock"):
            waiter, errors = insert_in_thread(engine, 3)
            wait_until(lambda: lock_messages(caplog), what="the lock-wait warning")
            assert other.stdin is not None
            other.stdin.write("\n")
            other.stdin.flush()
            waiter.join(30)
    finally:
        other.wait(10)
    assert errors == []
    [(level, warning), (_, got)] = lock_messages(caplog)
    assert level == "WARNING" and "held by another process" in warning
    assert "got the write lock" in got


def test_a_short_wait_logs_nothing(engine, caplog):
    with caplog.at_level(logging.DEBUG, logger="postbox.outbox.sqlite_lock"):
        for order_id in range(10, 20):
            with engine.begin() as connection:
                connection.execute(text("INSERT INTO orders VALUES (:id)"), {"id": order_id})
    assert lock_messages(caplog) == []
