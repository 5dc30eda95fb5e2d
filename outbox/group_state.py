"""Per-(message, consumer group) state as the resend and dead-letter rules read and write it.

- done: the group's ``message_processed`` row; in flight: its ``message_log`` row (both in the
  consumers' database, ``group_pairs``);
- resent: its ``message_resend`` row — where the copy sent to that group alone went
  (``resent_copies``, ``record_resends``; in the stub database);
- dead-lettered: named in the stub's ``last_error`` (``with_dead_letter_reason``), one
  ``dead-lettered by consumer group G: reason`` per group.

Stateless functions over a ``Connection`` or an ``Engine``; ``record_resends`` is one
transaction (a deadlock victim is run again by ``run_transaction``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    RowMapping,
    bindparam,
    delete,
    insert,
    select,
    update,
)

from .database import run_transaction
from .tables import StubStatus, message_resend, message_stub

stub = message_stub.c
resent = message_resend.c
LAST_ERROR_MAX_CHARS = 2000


def with_dead_letter_reason(row: RowMapping, reason: str) -> str:
    """The stub's ``last_error`` naming this dead letter too: a stub already void because of
    other groups' dead letters keeps naming them."""
    earlier = row["last_error"] or ""
    if row["status"] != StubStatus.VOID.value or not earlier:
        return reason[:LAST_ERROR_MAX_CHARS]
    return f"{earlier}; {reason}"[:LAST_ERROR_MAX_CHARS]


def resent_copies(connection: Connection, ids: list[str], groups: list[str]
                   ) -> dict[tuple[str, str], tuple[str, int | None, int | None]]:
    """(group, message id) → (topic, queue id, queue offset) of the last copy resent to that
    group alone."""
    if not ids or not groups:
        return {}
    rows = connection.execute(select(
        resent.consumer_group, resent.message_id, resent.topic, resent.queue_id,
        resent.queue_offset).where(resent.message_id.in_(ids), resent.consumer_group.in_(groups)))
    return {(group, message_id): (topic, queue_id, offset)
            for group, message_id, topic, queue_id, offset in rows}


def record_resends(engine: Engine, copies: list[dict[str, Any]],
                    outcomes: list[dict[str, Any]], now: datetime) -> None:
    """One transaction: the copies' ``message_resend`` rows (replacing earlier ones) and each
    claimed stub's release, fenced by its claim token (``b_uncounted`` = 1 gives its claim's
    send back)."""
    release = update(message_stub).where(
        stub.message_id == bindparam("b_id"), stub.lease_owner == bindparam("b_token")).values(
        lease_owner=None, lease_until=None, overtaken_at=None, updated_at=now,
        last_error=bindparam("b_error"), next_resend_at=bindparam("b_next"),
        send_count=stub.send_count - bindparam("b_uncounted"))

    def write(connection: Connection) -> None:
        for copy in copies:
            connection.execute(delete(message_resend).where(
                resent.consumer_group == copy["consumer_group"],
                resent.message_id == copy["message_id"]))
        if copies:
            connection.execute(insert(message_resend), copies)
        if outcomes:
            connection.execute(release, outcomes)

    run_transaction(engine, write)


def group_pairs(connection: Connection, table: Any, ids: list[str],
           groups: list[str]) -> set[tuple[str, str]]:
    """(group, message id) rows of ``table`` among ``ids`` × ``groups``."""
    if not ids or not groups:
        return set()
    columns = table.c
    rows = connection.execute(select(columns.consumer_group, columns.message_id).where(
        columns.message_id.in_(ids), columns.consumer_group.in_(groups)))
    return {(group, message_id) for group, message_id in rows}


__all__ = ["group_pairs", "record_resends", "resent_copies", "with_dead_letter_reason"]
