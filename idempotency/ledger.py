"""The database side of idempotency: the three tables as a consumer uses them.

- ``message_log``: written on receipt in its own short transaction (the "in flight" marker
  that the resend rule and reconciliation read), deleted in the transaction that confirms.
- ``message_processed``: the authority, keyed by (consumer group, message id). Inserted at the
  start of the handler's transaction, so a second transaction inserting the same key waits on
  the first (PostgreSQL, MariaDB) and then fails with a duplicate key — or, on SQLite, never
  overlaps it at all (``BEGIN IMMEDIATE``).
- ``message_stub``: when the producer's stub is in this database it is locked (``FOR UPDATE``
  where the database has row locks) before the check and turned ``confirmed`` with the
  handler's effect. When the stub table lives in another database the stub is simply absent
  here: ``message_processed`` alone then records this group's effect, and the producer's stub
  stays for the resend rule and reconciliation to judge by offsets.
"""

from __future__ import annotations

import functools
from datetime import datetime

from sqlalchemy import (
    Connection,
    Engine,
    Insert,
    Table,
    bindparam,
    delete,
    exists,
    insert,
    select,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from framework import ConsumedMessage
from outbox.database import dialect_name
from outbox.tables import StubStatus, message_log, message_processed, message_stub

stub = message_stub.c
log_table = message_log.c
processed = message_processed.c


# Statements are built once with bind parameters: building ``insert(...).values(**literals)``
# per message costs more CPU than the database round trip it describes.
_IS_PROCESSED = select(exists().where(processed.consumer_group == bindparam("consumer_group"),
                                      processed.message_id == bindparam("message_id")))
_LOCK_STUB = select(stub.status).where(stub.message_id == bindparam("message_id")) \
    .with_for_update()
_CONFIRM_STUB = update(message_stub).where(
    stub.message_id == bindparam("b_message_id"),
    stub.status != StubStatus.CONFIRMED.value).values(
    status=StubStatus.CONFIRMED.value, confirmed_at=bindparam("b_now"),
    updated_at=bindparam("b_now"))
_FORGET_RECEIPT = delete(message_log).where(
    log_table.consumer_group == bindparam("consumer_group"),
    log_table.message_id == bindparam("message_id"))


_IGNORING_DIALECTS = frozenset({"postgresql", "sqlite", "mysql"})


@functools.cache
def _insert_ignoring_duplicates(table: Table, dialect: str) -> Insert:
    """``INSERT`` that does nothing when the primary key exists (rowcount 0)."""
    if dialect == "postgresql":  # psycopg reports no rowcount here: RETURNING tells instead
        return postgresql.insert(table).on_conflict_do_nothing().returning(
            *table.primary_key.columns)
    if dialect == "sqlite":
        return insert(table).prefix_with("OR IGNORE")
    if dialect == "mysql":
        return insert(table).prefix_with("IGNORE")
    return insert(table)


def _insert_once(target: Session | Connection, dialect: str, table: Table,
                 values: dict) -> bool:
    """Insert ``values`` unless the key exists; return whether a row was inserted."""
    statement = _insert_ignoring_duplicates(table, dialect)
    if dialect == "postgresql":
        return target.execute(statement, values).first() is not None
    if dialect in _IGNORING_DIALECTS:
        return target.execute(statement, values).rowcount == 1
    try:
        with target.begin_nested():
            target.execute(statement, values)
    except IntegrityError:
        return False
    return True


def record_receipt(engine: Engine, consumer_group: str, message: ConsumedMessage,
                   now: datetime) -> None:
    """Insert the message-log row (nothing if it is already there) and commit."""
    with engine.begin() as connection:
        _insert_once(connection, dialect_name(engine), message_log, {
            "consumer_group": consumer_group, "message_id": message.msg_id,
            "topic": message.stored_topic, "queue_id": message.queue_id,
            "queue_offset": message.queue_offset, "created_at": now})


def is_processed(target: Session | Connection, consumer_group: str, message_id: str) -> bool:
    """Whether the group's effect for the message has committed."""
    return bool(target.execute(_IS_PROCESSED, {"consumer_group": consumer_group,
                                               "message_id": message_id}).scalar())


def lock_stub(session: Session, message_id: str) -> str | None:
    """Lock the local stub row (where the database can) and return its status, or None."""
    return session.execute(_LOCK_STUB, {"message_id": message_id}).scalar()


def claim_processing(session: Session, dialect: str, consumer_group: str,
                     message: ConsumedMessage, now: datetime) -> bool:
    """Insert the group's processed row; False if another attempt's row exists (committed —
    a concurrent uncommitted one is waited for on PostgreSQL and MariaDB)."""
    return _insert_once(session, dialect, message_processed, {
        "consumer_group": consumer_group, "message_id": message.msg_id,
        "topic": message.topic, "processed_at": now})


def confirm(session: Session, consumer_group: str, message_id: str, now: datetime) -> None:
    """Mark the local stub confirmed and delete the log row (same transaction as the effect)."""
    session.execute(_CONFIRM_STUB, {"b_message_id": message_id, "b_now": now})
    forget_receipt(session, consumer_group, message_id)


def forget_receipt(target: Session | Connection, consumer_group: str, message_id: str) -> None:
    """Delete the message-log row."""
    target.execute(_FORGET_RECEIPT, {"consumer_group": consumer_group,
                                     "message_id": message_id})


__all__ = ["claim_processing", "confirm", "forget_receipt", "is_processed", "lock_stub",
           "record_receipt"]
