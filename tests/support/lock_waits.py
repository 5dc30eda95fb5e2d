"""Whether a database session waits on a row lock, and what every session is doing, for
tests that hold a row in one transaction while another must wait for it (PostgreSQL,
MySQL/MariaDB)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, text

from postbox.outbox.database import dialect_name


def waiting_on_a_lock(engine: Engine) -> bool:
    """Whether a session of this database waits on a row lock, read in a transaction of its own
    (PostgreSQL's activity view holds still within one). InnoDB refreshes ``innodb_trx`` only
    when it was not read in the last 0.1 s: poll it slower than that."""
    if dialect_name(engine) == "postgresql":
        query = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                 "AND wait_event_type = 'Lock'")
    else:
        query = "SELECT count(*) FROM information_schema.innodb_trx WHERE trx_state = 'LOCK WAIT'"
    with engine.connect() as connection:
        return bool(connection.execute(text(query)).scalar_one())


def sessions(engine: Engine) -> list[Any]:
    """What every session of the database server is doing, for a failure's message."""
    query = ("SELECT pid, state, wait_event_type, wait_event, query FROM pg_stat_activity"
             if dialect_name(engine) == "postgresql" else "SHOW FULL PROCESSLIST")
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(text(query))]
