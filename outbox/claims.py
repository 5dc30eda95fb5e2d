"""Claiming stubs: a short lease that lets exactly one relay (or resend run) work on a stub.

A claim is one transaction that picks stubs matching a condition whose lease is free, counts
the attempt in their ``send_count`` (before it is made) and stamps them with a fresh claim token
and ``lease_until``. Whatever the caller then records about the attempt is fenced by that token:
if the lease ran out and someone else claimed the stub, the late writer changes nothing.

Every recorded outcome clears the lease, so a stub whose lease ran out with ``lease_owner``
still set is an *abandoned* claim: its claimer stopped (killed, or it lost the database) before
it could say what the attempt did, and the broker may never have seen it. Such an attempt says
nothing about the message, so it does not count: the next claim takes its place in
``send_count`` instead of adding to it, and ``unpublished_due`` claims an abandoned stub even at
``max_send_count`` (relays killed during a broker outage must not strand the stubs they held:
never published, never void, no alert). The price: a message that kills every relay that
publishes it is tried again each time its lease runs out, until an operator voids it
(``postbox outbox void``); a message the broker refuses counts, and is voided, as before.

Candidates are taken in ``next_resend_at`` order, which the claim index serves (PostgreSQL,
SQLite: partial, on the unpublished stubs alone; MySQL/MariaDB: ``(status, published_at,
next_resend_at)``), so a claim reads and locks only the rows it takes, however many published
stubs wait for their resend check (``bench/outbox_scale_bench.py``). One statement where the
database can return what it updated, one result either way:
- PostgreSQL: ``WITH claimable AS MATERIALIZED (SELECT … LIMIT n FOR UPDATE SKIP LOCKED)
  UPDATE … WHERE <condition> AND message_id IN (SELECT … FROM claimable) RETURNING …``, so
  concurrent claimers take disjoint rows without waiting for each other (the CTE runs once:
  an ``IN`` subquery may be run again, taking other rows each time).
- SQLite: the same without ``SKIP LOCKED`` — a single statement holds the write lock, so two
  claimers can never both take a row.
- MySQL 8 and MariaDB 10.6+ (no ``UPDATE … RETURNING``): ``SELECT … FOR UPDATE SKIP LOCKED``,
  ``UPDATE`` by id, then the claimed rows read back by id and token (by token alone,
  ``lease_owner`` having no index, the read-back scanned the whole table); any other database:
  the guarded ``UPDATE … IN (SELECT … LIMIT n)``, then the read-back by token.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    RowMapping,
    ScalarSelect,
    Select,
    and_,
    case,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.visitors import InternalTraversal

from postbox.framework.validation import PROPERTY_TIMER_DELIVER_MS

from .database import dialect_name, run_transaction, supports_skip_locked
from .tables import StubStatus, message_stub

stub = message_stub.c

MYSQL_CLAIM_HINT = "IGNORE INDEX (ix_message_stub_status_next_resend_at)"
"""MySQL/MariaDB: the claim never reads the resend scans' index, whose ``unconfirmed`` range
holds every published stub due for its resend check before the unpublished ones."""


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
    deliver_at_ms: int | None = None
    """The timer ``outbox.send`` asked for (stored as the ``TIMER_DELIVER_MS`` property, which
    ``properties`` here leaves out: the relay passes it as ``deliver_at=``)."""
    message_group: str | None = None
    """The FIFO message group (published as ``message_group=``), None: none."""
    created_at: datetime | None = None
    """When it was sent: with the message id, its place in its message group."""


_CLAIMED_COLUMNS = (stub.message_id, stub.topic, stub.tags, stub["keys"], stub.content,
                    stub.properties, stub.delay_level, stub.send_count, stub.queue_id,
                    stub.queue_offset, stub.next_resend_at, stub.message_group,
                    stub.created_at)


def _in_due_order(row: RowMapping) -> tuple[bool, datetime]:
    """Sort key of claimed rows: ``next_resend_at`` order, a NULL (never scheduled) first."""
    due = row["next_resend_at"]
    return due is not None, due or datetime.min


def lease_free(now: datetime) -> ColumnElement[bool]:
    """Stubs nobody holds a live lease on."""
    return or_(stub.lease_until.is_(None), stub.lease_until < now)


def unpublished_due(now: datetime, max_send_count: int) -> ColumnElement[bool]:
    """Unconfirmed stubs never stored in the broker, due for an attempt, first of their
    message group (``group_head``). The status is a
    literal, so that the planner sees the claim index's own condition (``tables.UNPUBLISHED``)
    in the query and may use that partial index."""
    return and_(stub.status == literal_column(f"'{StubStatus.UNCONFIRMED.value}'"),
                stub.published_at.is_(None),
                or_(stub.send_count < max_send_count, abandoned()),
                or_(stub.next_resend_at.is_(None), stub.next_resend_at <= now),
                group_head())


def group_head() -> ColumnElement[bool]:
    """Stubs of no message group, and stubs with no earlier unconfirmed, unpublished stub in
    their group (earlier: ``(created_at, message_id)`` smaller). A group's stubs therefore
    become claimable one at a time, each once its predecessor is published (or void, or
    confirmed); a predecessor held by another claimer, or waiting for its retry, holds them
    back.

    Written as a comparison with the group's earliest such ``created_at`` — the first entry of
    its range in ``ix_message_stub_message_group_status_published_at_created_at`` (``ORDER BY
    published_at, created_at LIMIT 1``: the index's own order, so one seek; none of them has a
    ``published_at``, but planners do not take ``IS NULL`` as an equality that orders) — and,
    for a stub at that very time, an exact-match probe for a smaller id. Not as ``NOT EXISTS``
    an earlier one: PostgreSQL planned that range probe as a scan of the group's rows per
    candidate, growing with the published rows ahead of the head, so one claim over a group's
    backlog of n stubs cost O(n²). The subqueries are plain reads (no row lock, not skipped
    when locked)."""
    return _GROUP_HEAD


GROUP_INDEX = "ix_message_stub_message_group_status_published_at_created_at"


class _GroupRangeOrder(ColumnElement[Any]):
    """``ORDER BY`` a group's range of the group index in the index's own order: ``published_at,
    created_at`` (PostgreSQL does not take ``published_at IS NULL`` as an equality that fixes
    the order, and would sort; SQLite reads the index either way), ``created_at`` on
    MySQL/MariaDB (which sorts when ``published_at`` is named, though it is fixed)."""

    inherit_cache = True
    _traverse_internals = [("published", InternalTraversal.dp_clauseelement),  # noqa: RUF012
                           ("created", InternalTraversal.dp_clauseelement)]

    def __init__(self, published: ColumnElement[Any], created: ColumnElement[Any]) -> None:
        self.published = published
        self.created = created


@compiles(_GroupRangeOrder)
def _order_in_index(element: _GroupRangeOrder, compiler: Any, **kw: Any) -> str:
    return f"{compiler.process(element.published, **kw)}, {compiler.process(element.created, **kw)}"


@compiles(_GroupRangeOrder, "mysql")
def _order_in_index_mysql(element: _GroupRangeOrder, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.created, **kw))


def _group_head() -> ColumnElement[bool]:
    table = message_stub.alias("earlier")
    earlier = table.c
    same_group = (earlier.message_group == stub.message_group,
                  earlier.status == literal_column(f"'{StubStatus.UNCONFIRMED.value}'"),
                  earlier.published_at.is_(None))
    # MariaDB, its statistics thin, would rather read the (status, published_at) prefix of the
    # resend index and sort: told to read the group's range
    hint = f"FORCE INDEX ({GROUP_INDEX})"
    first = select(earlier.created_at).where(*same_group) \
        .order_by(_GroupRangeOrder(earlier.published_at, earlier.created_at)).limit(1) \
        .with_hint(table, hint, dialect_name="mysql").scalar_subquery()
    tied_before = select(earlier.message_id).where(
        *same_group, earlier.created_at == stub.created_at,
        earlier.message_id < stub.message_id).with_hint(table, hint, dialect_name="mysql") \
        .exists()
    return or_(stub.message_group.is_(None), first.is_(None),
               and_(first >= stub.created_at, or_(first > stub.created_at, ~tied_before)))


_GROUP_HEAD = _group_head()
"""Built once (it has no parameters): building the alias and subquery per claim cost more
than the claim's statement."""


def group_heads(engine: Engine, groups: Sequence[str]) -> list[str]:
    """The ids of the first unconfirmed, unpublished stub of each of ``groups`` (none for a
    group with none): per group, the first entry of its index range (ordered by
    ``_GroupRangeOrder``, so that the planner reads the range in the index's order and stops
    at the first entry, as in ``group_head``)."""
    heads: list[str] = []
    with engine.connect() as connection:
        for group in groups:
            heads.extend(connection.execute(
                select(stub.message_id).where(
                    stub.message_group == group,
                    stub.status == literal_column(f"'{StubStatus.UNCONFIRMED.value}'"),
                    stub.published_at.is_(None))  # the first of them is the head
                .order_by(_GroupRangeOrder(stub.published_at, stub.created_at), stub.message_id)
                .limit(1)
            ).scalars())
    return heads


def abandoned() -> ColumnElement[bool]:
    """Stubs whose last claim ended with no outcome recorded (every record clears the lease);
    with ``lease_free``, a claim whose claimer stopped before it could say what happened."""
    return stub.lease_owner.is_not(None)


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
    # an abandoned claim's attempt is replaced, not added to (see the module's docstring)
    stamp = {"send_count": case((abandoned(), stub.send_count), else_=stub.send_count + 1),
             "lease_owner": token,
             "lease_until": now + lease, "updated_at": now}

    candidates = select(stub.message_id).where(wanted).order_by(stub.next_resend_at) \
        .limit(limit)
    if dialect_name(engine) == "mysql":  # with a large backlog the optimizer would rather
        # walk the resend index's range in order than read the claim index's: keep it off
        for name in ("mysql", "mariadb"):
            candidates = candidates.with_hint(message_stub, MYSQL_CLAIM_HINT, name)
    if supports_skip_locked(engine):
        candidates = candidates.with_for_update(skip_locked=True)
        # a CTE runs once; PostgreSQL may re-run an IN subquery, each run skipping other rows
        claimable: Select[Any] | ScalarSelect[Any] = select(
            candidates.cte("claimable").prefix_with("MATERIALIZED"))
    else:
        claimable = candidates.scalar_subquery()
    claimed = update(message_stub).where(wanted, stub.message_id.in_(claimable)) \
        .values(**stamp)

    def claim_returning(connection: Connection) -> list[RowMapping]:
        rows = connection.execute(claimed.returning(*_CLAIMED_COLUMNS)).mappings().all()
        return sorted(rows, key=_in_due_order)

    def claim(connection: Connection) -> Sequence[RowMapping]:
        mine = stub.lease_owner == token
        if supports_skip_locked(engine):
            picked = connection.execute(candidates).scalars().all()
            if not picked:
                return []
            connection.execute(update(message_stub)
                               .where(stub.message_id.in_(picked)).values(**stamp))
            # read back by primary key: lease_owner has no index, a scan of the whole table
            mine = and_(stub.message_id.in_(picked), mine)
        elif not connection.execute(claimed).rowcount:
            return []
        return connection.execute(select(*_CLAIMED_COLUMNS).where(mine)
                                  .order_by(stub.next_resend_at)).mappings().all()

    rows = run_transaction(engine, claim_returning if engine.dialect.update_returning
                           else claim)
    return [_claimed(row, token) for row in rows]


def _claimed(row: Any, token: str) -> ClaimedStub:
    properties = json.loads(row["properties"]) if row["properties"] else {}
    timer = properties.pop(PROPERTY_TIMER_DELIVER_MS, None)
    return ClaimedStub(row["message_id"], row["topic"], row["tags"], row["keys"],
                       bytes(row["content"]), properties, row["delay_level"],
                       row["send_count"], row["queue_id"], row["queue_offset"], token,
                       int(timer) if timer is not None else None, row["message_group"],
                       row["created_at"])


__all__ = ["ClaimedStub", "abandoned", "claim_stubs", "group_head", "group_heads", "lease_free",
           "unpublished_due"]
