"""The database side of idempotency: the three tables as a consumer uses them.

- ``message_log``: written on receipt in its own short transaction (the "in flight" marker
  that the resend rule and reconciliation read) — one transaction for all the messages of a
  pulled task when the middleware gets them together — and deleted in the transaction that
  confirms.
- ``message_processed``: the authority, keyed by (consumer group, message id). Inserted at the
  start of the handler's transaction, so a second transaction inserting the same key waits on
  the first (PostgreSQL, MariaDB) and then finds the key taken — or, on SQLite, never overlaps
  it at all (``BEGIN IMMEDIATE``).
- ``message_stub``: when the producer's stub is in this database the first statement of the
  handler's transaction locks it (an ``UPDATE``; where the database has row locks, until the
  effect commits or rolls back) and, for a stub without ``expected_groups`` (nothing declared:
  the first group confirms), confirms it. A stub that names its expected groups is confirmed
  by the group whose processed row completes the set: after the processed row is inserted,
  ``UPDATE … SET status='confirmed' WHERE (SELECT count(*) FROM message_processed WHERE
  message_id = … AND consumer_group IN (<expected>)) = <number expected>``. The lock taken
  first is what makes this safe between groups: a second group handling the message at the
  same moment waits for the first one's commit, and its count (a later statement, a fresh
  snapshot under ``READ COMMITTED``) sees the first one's row. When the stub table lives in
  another database the stub is simply absent here: ``message_processed`` alone then records
  this group's effect, and the producer's stub stays for the resend rule and reconciliation
  to judge by offsets.

``claim_message`` opens the handler's transaction with all these changes — stub locked (and
confirmed when that is due), log row deleted, processed row inserted unless present — before
the handler runs; they commit with the handler's effect or roll back with it, so nothing of
them is ever visible without the effect. PostgreSQL locks, deletes and inserts in one
statement (the stub ``UPDATE`` and the log ``DELETE`` as data-modifying CTEs of the processed
``INSERT … ON CONFLICT DO NOTHING RETURNING``, which also returns the stub's expected groups);
the other databases in four; a stub with expected groups costs one more, the count.
Statements are built once with bind parameters: building ``insert(...).values(**literals)``
per message costs more CPU than the database round trip it describes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BindParameter,
    Connection,
    Engine,
    Executable,
    Insert,
    Table,
    bindparam,
    case,
    delete,
    exists,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from postbox.framework import ConsumedMessage
from postbox.outbox.database import dialect_name
from postbox.outbox.tables import (
    StubStatus,
    expected_group_names,
    message_log,
    message_processed,
    message_stub,
)

stub = message_stub.c
log_table = message_log.c
processed = message_processed.c

_IS_PROCESSED = select(exists().where(processed.consumer_group == bindparam("b_group"),
                                      processed.message_id == bindparam("b_id")))
_CONFIRMED = StubStatus.CONFIRMED.value
_CONFIRM_STUB = update(message_stub).where(
    stub.message_id == bindparam("b_id"),
    stub.status != _CONFIRMED).values(
    status=_CONFIRMED, confirmed_at=bindparam("b_now"), updated_at=bindparam("b_now"))
_UNDECLARED = stub.expected_groups.is_(None)
_LOCK_STUB = update(message_stub).where(
    stub.message_id == bindparam("b_id"), stub.status != _CONFIRMED).values(
    status=case((_UNDECLARED, _CONFIRMED), else_=stub.status),
    confirmed_at=case((_UNDECLARED, bindparam("b_now")), else_=stub.confirmed_at),
    updated_at=bindparam("b_now"))
"""Lock the stub (not confirmed yet); confirm it at once when it expects no particular
groups."""
_EXPECTED_GROUPS = select(stub.expected_groups).where(stub.message_id == bindparam("b_id"))
_CONFIRM_IF_COMPLETE = update(message_stub).where(
    stub.message_id == bindparam("b_id"), stub.status != _CONFIRMED,
    select(func.count()).where(
        processed.message_id == bindparam("b_id"),
        processed.consumer_group.in_(bindparam("b_groups", expanding=True)))
    .scalar_subquery() == bindparam("b_count")).values(
    status=_CONFIRMED, confirmed_at=bindparam("b_now"), updated_at=bindparam("b_now"))
"""Confirm the stub when every one of its expected groups (``b_groups``, ``b_count`` of them)
has its processed row."""
_FORGET_RECEIPT = delete(message_log).where(
    log_table.consumer_group == bindparam("b_group"),
    log_table.message_id == bindparam("b_id"))
_PROCESSED_VALUES: dict[str, BindParameter[Any]] = {
    "consumer_group": bindparam("b_group"), "message_id": bindparam("b_id"),
    "topic": bindparam("b_topic"), "processed_at": bindparam("b_now")}
_LOCKED_STUB = _LOCK_STUB.returning(stub.expected_groups).cte("locked_stub")
_CLAIM_POSTGRESQL = postgresql.insert(message_processed).values(_PROCESSED_VALUES) \
    .on_conflict_do_nothing() \
    .returning(processed.message_id,
               select(_LOCKED_STUB.c.expected_groups).scalar_subquery()) \
    .add_cte(_LOCKED_STUB) \
    .add_cte(_FORGET_RECEIPT.returning(log_table.message_id).cte("forgotten_receipt"))
"""``WITH locked_stub AS (UPDATE …), forgotten_receipt AS (DELETE …) INSERT INTO
message_processed … ON CONFLICT DO NOTHING RETURNING message_id, (SELECT expected_groups FROM
locked_stub)``: PostgreSQL runs both CTEs to completion whether or not the ``INSERT`` reads
them; a row comes back only if it inserted."""


_IGNORING_DIALECTS = frozenset({"postgresql", "sqlite", "mysql"})


@functools.cache
def _insert_ignoring_duplicates(table: Table, dialect: str) -> Insert:
    """``INSERT`` that does nothing when the primary key exists (rowcount 0 on SQLite and
    MySQL; PostgreSQL's driver reports no rowcount there, ``claim_message`` uses RETURNING)."""
    if dialect == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing()
    if dialect == "sqlite":
        return insert(table).prefix_with("OR IGNORE")
    if dialect == "mysql":
        return insert(table).prefix_with("IGNORE")
    return insert(table)


def _insert_once(connection: Connection, dialect: str, statement: Executable,
                 values: dict) -> bool:
    """Run the insert of ``values`` unless the key exists; return whether a row was
    inserted (dialects without an ignoring insert catch the duplicate in a savepoint)."""
    if dialect in _IGNORING_DIALECTS:
        return connection.execute(statement, values).rowcount == 1
    try:
        with connection.begin_nested():
            connection.execute(statement, values)
    except IntegrityError:
        return False
    return True


def record_receipts(engine: Engine, messages: Sequence[tuple[str, ConsumedMessage]],
                    now: datetime) -> None:
    """Insert the message-log rows of ``messages`` (consumer group, message) in one
    transaction and commit (a row already there stays)."""
    dialect = dialect_name(engine)
    statement = _insert_ignoring_duplicates(message_log, dialect)
    rows = [{"consumer_group": consumer_group, "message_id": message.msg_id,
             "topic": message.stored_topic, "queue_id": message.queue_id,
             "queue_offset": message.queue_offset, "created_at": now}
            for consumer_group, message in messages]
    with engine.begin() as connection:
        if dialect in _IGNORING_DIALECTS:
            connection.execute(statement, rows)  # one executemany for the whole task
            return
        for row in rows:
            _insert_once(connection, dialect, statement, row)


def forget_receipts(engine: Engine, receipts: Sequence[tuple[str, str]]) -> None:
    """Delete the message-log rows of ``receipts`` (consumer group, message id) in one
    transaction and commit."""
    with engine.begin() as connection:
        connection.execute(_FORGET_RECEIPT, [{"b_group": group, "b_id": message_id}
                                             for group, message_id in receipts])


def is_processed(target: Session | Connection, consumer_group: str, message_id: str) -> bool:
    """Whether the group's effect for the message has committed."""
    return bool(target.execute(_IS_PROCESSED, {"b_group": consumer_group,
                                               "b_id": message_id}).scalar())


def claim_message(connection: Connection, dialect: str, consumer_group: str,
                  message: ConsumedMessage, now: datetime) -> bool:
    """First statements of the handler's transaction: lock the local stub, delete the log
    row, insert the group's processed row and confirm the stub when that completes it.
    Returns False if the processed row exists already — committed, or a concurrent attempt's,
    waited for on PostgreSQL and MariaDB: a duplicate, whose transaction then only commits the
    log row's deletion."""
    values = {"b_group": consumer_group, "b_id": message.msg_id, "b_topic": message.topic,
              "b_now": now}
    if dialect == "postgresql":
        row = connection.execute(_CLAIM_POSTGRESQL, values).first()
        if row is None:
            return False
        expected = row[1]
    else:
        connection.execute(_LOCK_STUB, values)
        expected = connection.execute(_EXPECTED_GROUPS, values).scalar()
        forget_receipt(connection, consumer_group, message.msg_id)
        if not _insert_once(connection, dialect, _claim_statement(dialect), values):
            return False
    groups = expected_group_names(expected)
    if groups:  # a stub that names its groups: confirmed by the one completing the set
        connection.execute(_CONFIRM_IF_COMPLETE, {"b_id": message.msg_id, "b_now": now,
                                                  "b_groups": list(groups),
                                                  "b_count": len(groups)})
    return True


@functools.cache
def _claim_statement(dialect: str) -> Insert:
    """The processed-row insert of ``claim_message`` (bind parameters of ``_PROCESSED_VALUES``)."""
    return _insert_ignoring_duplicates(message_processed, dialect).values(_PROCESSED_VALUES)


def confirm_stub(target: Session | Connection, message_id: str, now: datetime) -> None:
    """Mark the local stub confirmed (nothing if it is absent or confirmed already), whatever
    groups it expects (an operator's or a test's shortcut; consumers use ``claim_message``)."""
    target.execute(_CONFIRM_STUB, {"b_id": message_id, "b_now": now})


def forget_receipt(target: Session | Connection, consumer_group: str, message_id: str) -> None:
    """Delete the message-log row."""
    target.execute(_FORGET_RECEIPT, {"b_group": consumer_group, "b_id": message_id})


__all__ = ["claim_message", "confirm_stub", "forget_receipt", "forget_receipts", "is_processed",
           "record_receipts"]
