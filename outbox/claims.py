"""Claiming stubs: a short lease that lets exactly one relay (or resend run) work on a stub.

A claim is one transaction that picks stubs matching a condition whose lease is free, increments
their ``send_count`` (before the attempt: a crash in the middle still counts, so a stub that
kills its sender cannot loop forever) and stamps them with a fresh claim token and
``lease_until``. Whatever the caller then records about the attempt is fenced by that token:
if the lease ran out and someone else claimed the stub, the late writer changes nothing.

Candidates are taken in ``next_resend_at`` order, which the ``(status, next_resend_at)`` index
serves, so a claim locks only the rows it takes. Two strategies, one result:
- PostgreSQL, MySQL 8 and MariaDB 10.6+: ``SELECT … FOR UPDATE SKIP LOCKED`` then ``UPDATE``
  by id, so concurrent claimers take disjoint rows without waiting for each other.
- SQLite (and any other database): one ``UPDATE … WHERE <condition> AND message_id IN
  (SELECT … LIMIT n)`` — a single statement holds the write lock, so two claimers can never
  both take a row — then the claimed rows are read back by token.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, Connection, Engine, RowMapping, and_, or_, select, update

from .database import run_transaction, supports_skip_locked
from .tables import StubStatus, message_stub

stub = message_stub.c


@dataclass(frozen=True, slots=True)
class ClaimedStub:
    """A stub a claimer now holds, with what it needs to publish it."""

    message_id: str
    topic: str
    tags: str | None
    keys: str | None
    content: bytes
    properties: dict[str, str]
    delay_level: int | None
    send_count: int
    """Attempts so far, this one included."""
    queue_id: int | None
    queue_offset: int | None
    token: str
    """The claim token; fence every later write with ``lease_owner == token``."""


def lease_free(now: datetime) -> ColumnElement[bool]:
    """Stubs nobody holds a live lease on."""
    return or_(stub.lease_until.is_(None), stub.lease_until < now)


def unpublished_due(now: datetime, max_send_count: int) -> ColumnElement[bool]:
    """Unconfirmed stubs never stored in the broker, due for an attempt."""
    return and_(stub.status == StubStatus.UNCONFIRMED.value, stub.published_at.is_(None),
                stub.send_count < max_send_count,
                or_(stub.next_resend_at.is_(None), stub.next_resend_at <= now))


def claim_stubs(engine: Engine, condition: ColumnElement[bool], *, owner: str, now: datetime,
                lease: timedelta, limit: int,
                message_ids: Sequence[str] | None = None) -> list[ClaimedStub]:
    """Claim up to ``limit`` stubs matching ``condition`` (and ``message_ids`` when given)."""
    token = f"{owner[:40]}:{uuid.uuid4().hex[:16]}"
    wanted = and_(condition, lease_free(now))
    if message_ids is not None:
        if not message_ids:
            return []
        wanted = and_(wanted, stub.message_id.in_(list(message_ids)))
    stamp = {"send_count": stub.send_count + 1, "lease_owner": token,
             "lease_until": now + lease, "updated_at": now}

    def claim(connection: Connection) -> Sequence[RowMapping]:
        if supports_skip_locked(engine):
            picked = connection.execute(
                select(stub.message_id).where(wanted).order_by(stub.next_resend_at).limit(limit)
                .with_for_update(skip_locked=True)).scalars().all()
            if not picked:
                return []
            connection.execute(update(message_stub)
                               .where(stub.message_id.in_(picked)).values(**stamp))
        else:
            candidates = select(stub.message_id).where(wanted).order_by(
                stub.next_resend_at).limit(limit).scalar_subquery()
            result = connection.execute(update(message_stub).where(
                wanted, stub.message_id.in_(candidates)).values(**stamp))
            if not result.rowcount:
                return []
        return connection.execute(
            select(stub.message_id, stub.topic, stub.tags, stub["keys"], stub.content,
                   stub.properties, stub.delay_level, stub.send_count, stub.queue_id,
                   stub.queue_offset)
            .where(stub.lease_owner == token).order_by(stub.next_resend_at)).mappings().all()

    rows = run_transaction(engine, claim)
    return [ClaimedStub(row["message_id"], row["topic"], row["tags"], row["keys"],
                        bytes(row["content"]),
                        json.loads(row["properties"]) if row["properties"] else {},
                        row["delay_level"], row["send_count"], row["queue_id"],
                        row["queue_offset"], token)
            for row in rows]


__all__ = ["ClaimedStub", "claim_stubs", "lease_free", "unpublished_due"]
