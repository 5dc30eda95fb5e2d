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

from datetime import datetime

from sqlalchemy import Connection, Engine, delete, exists, insert, select, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from framework import ConsumedMessage
from outbox.database import dialect_name
from outbox.tables import StubStatus, message_log, message_processed, message_stub

stub = message_stub.c
log_table = message_log.c
processed = message_processed.c


def record_receipt(engine: Engine, consumer_group: str, message: ConsumedMessage,
                   now: datetime) -> None:
    """Insert the message-log row (nothing if it is already there) and commit."""
    values = {"consumer_group": consumer_group, "message_id": message.msg_id,
              "topic": message.stored_topic, "queue_id": message.queue_id,
              "queue_offset": message.queue_offset, "created_at": now}
    dialect = dialect_name(engine)
    if dialect == "postgresql":
        statement = postgresql.insert(message_log).values(values).on_conflict_do_nothing()
    elif dialect == "sqlite":
        statement = insert(message_log).values(values).prefix_with("OR IGNORE")
    elif dialect == "mysql":
        statement = insert(message_log).values(values).prefix_with("IGNORE")
    else:
        statement = insert(message_log).values(values)
    try:
        with engine.begin() as connection:
            connection.execute(statement)
    except IntegrityError:
        pass  # other databases: the row of an earlier delivery is already there


def is_processed(target: Session | Connection, consumer_group: str, message_id: str) -> bool:
    """Whether the group's effect for the message has committed."""
    return bool(target.execute(select(exists().where(
        processed.consumer_group == consumer_group,
        processed.message_id == message_id))).scalar())


def lock_stub(session: Session, message_id: str) -> str | None:
    """Lock the local stub row (where the database can) and return its status, or None."""
    return session.execute(select(stub.status).where(stub.message_id == message_id)
                           .with_for_update()).scalar()


def claim_processing(session: Session, consumer_group: str, message: ConsumedMessage,
                     now: datetime) -> None:
    """Insert the group's processed row; raises ``IntegrityError`` if another attempt did."""
    session.execute(insert(message_processed).values(
        consumer_group=consumer_group, message_id=message.msg_id, topic=message.topic,
        processed_at=now))


def confirm(session: Session, consumer_group: str, message_id: str, now: datetime) -> None:
    """Mark the local stub confirmed and delete the log row (same transaction as the effect)."""
    session.execute(update(message_stub).where(
        stub.message_id == message_id, stub.status != StubStatus.CONFIRMED.value).values(
        status=StubStatus.CONFIRMED.value, confirmed_at=now, updated_at=now))
    forget_receipt(session, consumer_group, message_id)


def forget_receipt(target: Session | Connection, consumer_group: str, message_id: str) -> None:
    """Delete the message-log row."""
    target.execute(delete(message_log).where(log_table.consumer_group == consumer_group,
                                             log_table.message_id == message_id))


__all__ = ["claim_processing", "confirm", "forget_receipt", "is_processed", "lock_stub",
           "record_receipt"]
