"""Operator functions on the outbox's stubs: look at them, count them, and repair them by hand.

Reading:
- ``list_stubs`` / ``get_stub``: stubs as ``StubRow`` values (every column but the content and
  properties), newest created first; ``before`` pages backwards by ``created_at``.
- ``stub_stats``: counts by status and by topic, what is due or waiting, the oldest unconfirmed
  stub and the periodic tasks' state, all from aggregate queries (``GROUP BY``, ``COUNT``,
  ``MIN``/``MAX``) — never by loading stub rows, so it costs the same on a million stubs.

Repairing (each one transaction, all-or-nothing):
- ``rearm``: ``void`` → ``unconfirmed`` with ``send_count`` 0 and ``published_at`` NULL, due
  now: the relay's next poll publishes it again with a full set of attempts.
- ``void``: ``unconfirmed`` → ``void`` with the operator's reason in ``last_error``.
- ``schedule_resend``: an ``unconfirmed`` (or ``void``) stub made due for publishing now; its
  ``send_count`` is kept, but capped at ``max_send_count - 1`` so exactly one more attempt is
  allowed when it had none left.

Every change clears the stub's lease (``lease_owner``/``lease_until``) and, where the stub goes
back to the relay, ``overtaken_at``. A relay holding a lease on a changed stub loses it: its
late record is fenced by the claim token and writes nothing, so the operator's change stands.

Invariants: the stubs named are all read (``FOR UPDATE`` where the database has row locks;
SQLite's ``BEGIN IMMEDIATE`` holds the write lock already) and checked before any is written,
and the ``UPDATE`` repeats the status condition and must touch exactly those rows; a stub in
the wrong state, or missing, raises ``AdminError`` naming it and nothing changes. Ids are read
and written in chunks of ``BATCH_SIZE`` (one ``IN`` list each); ``rearm(all_void=True)`` walks
the void stubs in ``message_id`` order, one transaction per batch of ``BATCH_SIZE``, so it never
holds locks on more than one batch and visits each stub at most once.

The functions take an ``Engine`` and hold no state: they are safe to call from several threads
and processes at once (the row locks decide who goes first). Times are naive UTC (``now``
defaults to ``clock.utc_now()``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    RowMapping,
    and_,
    case,
    func,
    select,
    update,
)

from .clock import utc_now
from .database import run_transaction
from .errors import OutboxError
from .options import ResendRules
from .tables import StubStatus, message_log, message_processed, message_stub, outbox_task

stub = message_stub.c

BATCH_SIZE = 500
"""Stub ids per ``IN`` list, and void stubs per transaction of ``rearm(all_void=True)``."""
LIST_LIMIT_MAX = 1_000
"""Most stubs one ``list_stubs`` call returns (page with ``before`` for more)."""
REASON_MAX_CHARS = 1_000
"""Longest operator reason ``void`` accepts."""
ERROR_IDS_SHOWN = 10
"""Ids an ``AdminError`` names before it says "and N more"."""
DEFAULT_MAX_SEND_COUNT = ResendRules.max_send_count
"""The default ``max_send_count`` (``ResendRules``, which the relay follows), for
``schedule_resend``."""

UNCONFIRMED = StubStatus.UNCONFIRMED.value
VOID = StubStatus.VOID.value


class AdminError(OutboxError):
    """An operator change that cannot be made as asked; nothing was changed.

    ``message_ids`` names the stubs that stood in the way (empty for a bad argument).
    """

    def __init__(self, message: str, message_ids: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.message_ids = tuple(message_ids)


@dataclass(frozen=True)
class StubRow:
    """One stub as an operator sees it: every column except ``content`` and ``properties``."""

    message_id: str
    topic: str
    tags: str | None
    keys: str | None
    status: StubStatus
    send_count: int
    queue_id: int | None
    queue_offset: int | None
    delay_level: int | None
    created_at: datetime
    updated_at: datetime
    published_at: datetime | None
    next_resend_at: datetime | None
    confirmed_at: datetime | None
    last_error: str | None
    log_position: int | None = None
    offset_msg_id: str | None = None
    lease_owner: str | None = None
    lease_until: datetime | None = None
    overtaken_at: datetime | None = None
    expected_groups: str | None = None
    """The consumer groups that must handle it before it is confirmed (space-separated; None:
    the first group that handles it confirms it)."""


@dataclass(frozen=True)
class TaskStatus:
    """One periodic outbox task's row of ``outbox_task`` (without its private ``state``)."""

    name: str
    runs: int
    skipped: int
    last_started_at: datetime | None
    last_finished_at: datetime | None
    lease_owner: str | None
    lease_until: datetime | None
    last_scheduler: str | None


@dataclass(frozen=True)
class OutboxStats:
    """The outbox at a glance (``stub_stats``)."""

    by_status: dict[str, int]
    """Stubs per status; all three statuses are always present."""
    by_topic: dict[str, dict[str, int]]
    """Stubs per topic and status (all three statuses per topic), topics in name order."""
    due_for_resend: int
    """Unconfirmed, published stubs whose ``next_resend_at`` has come: the resend check's work."""
    unpublished: int
    """Unconfirmed stubs never stored in the broker (``published_at`` NULL): the relay's work."""
    oldest_unconfirmed_at: datetime | None
    max_send_count_seen: int
    """The highest ``send_count`` of any stub (0 without stubs)."""
    in_flight_logs: int
    """``message_log`` rows: messages received by a consumer group and not yet confirmed."""
    processed: int
    """``message_processed`` rows: (consumer group, message) pairs whose handler committed."""
    tasks: list[TaskStatus]
    """The periodic tasks that have run at least once, by name."""


# ---- reading ---------------------------------------------------------------------------------

_ROW_COLUMNS = (
    stub.message_id, stub.topic, stub.tags, stub["keys"], stub.status, stub.send_count,
    stub.queue_id, stub.queue_offset, stub.delay_level, stub.created_at, stub.updated_at,
    stub.published_at, stub.next_resend_at, stub.confirmed_at, stub.last_error,
    stub.log_position, stub.offset_msg_id, stub.lease_owner, stub.lease_until, stub.overtaken_at,
    stub.expected_groups,
)


def list_stubs(engine: Engine, *, status: StubStatus | None = None, topic: str | None = None,
               limit: int = 50, before: datetime | None = None) -> list[StubRow]:
    """Up to ``limit`` stubs (at most ``LIST_LIMIT_MAX``), newest ``created_at`` first.

    ``before`` keeps stubs created strictly earlier: pass the last row's ``created_at`` to get
    the next page (stubs sharing that exact instant with the last row are skipped).
    """
    if not 1 <= limit <= LIST_LIMIT_MAX:
        raise AdminError(f"limit must be between 1 and {LIST_LIMIT_MAX}, got {limit}")
    query = select(*_ROW_COLUMNS)
    if status is not None:
        query = query.where(stub.status == StubStatus(status).value)
    if topic is not None:
        query = query.where(stub.topic == topic)
    if before is not None:
        query = query.where(stub.created_at < before)
    query = query.order_by(stub.created_at.desc(), stub.message_id.desc()).limit(limit)
    with engine.connect() as connection:
        return [_stub_row(row) for row in connection.execute(query).mappings()]


def get_stub(engine: Engine, message_id: str) -> StubRow | None:
    """The stub ``message_id``, or None when there is none."""
    with engine.connect() as connection:
        row = connection.execute(select(*_ROW_COLUMNS).where(
            stub.message_id == message_id)).mappings().one_or_none()
    return None if row is None else _stub_row(row)


def stub_stats(engine: Engine, *, now: datetime | None = None) -> OutboxStats:
    """Counts and ages over every stub, log row, processed row and task (aggregates only)."""
    now = now or utc_now()
    unconfirmed = stub.status == UNCONFIRMED
    due = and_(unconfirmed, stub.published_at.is_not(None), stub.next_resend_at <= now)
    waiting = and_(unconfirmed, stub.published_at.is_(None))
    with engine.connect() as connection:
        by_status = _zero_counts()
        by_topic: dict[str, dict[str, int]] = {}
        for topic, status, count in connection.execute(
                select(stub.topic, stub.status, func.count()).group_by(stub.topic, stub.status)
                .order_by(stub.topic)):
            by_topic.setdefault(topic, _zero_counts())[status] = count
            by_status[status] += count
        summary = connection.execute(select(
            _count_where(due), _count_where(waiting),
            func.min(case((unconfirmed, stub.created_at))),
            func.coalesce(func.max(stub.send_count), 0))).one()
        in_flight_logs = connection.execute(
            select(func.count()).select_from(message_log)).scalar_one()
        processed = connection.execute(
            select(func.count()).select_from(message_processed)).scalar_one()
        task = outbox_task.c
        tasks = [TaskStatus(**row) for row in connection.execute(select(
            task.name, task.runs, task.skipped, task.last_started_at, task.last_finished_at,
            task.lease_owner, task.lease_until, task.last_scheduler).order_by(task.name))
            .mappings()]
    return OutboxStats(by_status=by_status, by_topic=by_topic, due_for_resend=int(summary[0]),
                       unpublished=int(summary[1]), oldest_unconfirmed_at=summary[2],
                       max_send_count_seen=int(summary[3]), in_flight_logs=in_flight_logs,
                       processed=processed, tasks=tasks)


# ---- repairing -------------------------------------------------------------------------------

def rearm(engine: Engine, message_ids: Sequence[str] | None = None, *, all_void: bool = False,
          now: datetime | None = None) -> list[str]:
    """Give void stubs a fresh start: ``unconfirmed``, ``send_count`` 0, unpublished, due now.

    Either ``message_ids`` (every one must be void, else ``AdminError`` and nothing changes) or
    ``all_void=True`` (every void stub, ``BATCH_SIZE`` per transaction). ``last_error`` is kept.
    Returns the ids re-armed.
    """
    if all_void and message_ids:
        raise AdminError("give message ids or all_void=True, not both")
    if not all_void and message_ids is None:
        raise AdminError("nothing to re-arm: give message ids or all_void=True")
    now = now or utc_now()
    values = {**_back_to_relay(now), "send_count": 0}
    if not all_void:
        return _change(engine, message_ids or [], frozenset({VOID}), values, "re-arm")
    rearmed: list[str] = []
    after = ""
    while True:
        batch = run_transaction(engine, functools.partial(_rearm_batch, after=after,
                                                          values=values))
        rearmed.extend(batch)
        if len(batch) < BATCH_SIZE:
            return rearmed
        after = batch[-1]


def void(engine: Engine, message_ids: Sequence[str], *, reason: str,
         now: datetime | None = None) -> list[str]:
    """Give up on unconfirmed stubs: ``void`` with ``last_error`` "voided by operator: reason".

    A stub that is confirmed, already void or missing raises ``AdminError`` and nothing
    changes. Returns the ids voided.
    """
    reason = reason.strip()
    if not reason:
        raise AdminError("a reason is required to void stubs")
    if len(reason) > REASON_MAX_CHARS:
        raise AdminError(f"the reason is {len(reason)} characters; at most {REASON_MAX_CHARS}")
    now = now or utc_now()
    values = {"status": VOID, "last_error": f"voided by operator: {reason}",
              "lease_owner": None, "lease_until": None, "updated_at": now}
    return _change(engine, message_ids, frozenset({UNCONFIRMED}), values, "void")


def schedule_resend(engine: Engine, message_ids: Sequence[str], *,
                    max_send_count: int = DEFAULT_MAX_SEND_COUNT,
                    now: datetime | None = None) -> list[str]:
    """Make unconfirmed (or void) stubs due for publishing now; the relay then publishes them.

    ``send_count`` is kept, except that one at or above ``max_send_count`` (the relay's
    ``ResendRules.max_send_count``) becomes ``max_send_count - 1``: exactly one more attempt.
    A confirmed or missing stub raises ``AdminError`` and nothing changes. Returns the ids.
    """
    if max_send_count < 1:
        raise AdminError(f"max_send_count must be >= 1, got {max_send_count}")
    now = now or utc_now()
    values: dict[str, Any] = {
        **_back_to_relay(now),
        "send_count": case((stub.send_count >= max_send_count, max_send_count - 1),
                           else_=stub.send_count),
    }
    return _change(engine, message_ids, frozenset({UNCONFIRMED, VOID}), values,
                   "schedule a resend of")


# ---- helpers ---------------------------------------------------------------------------------

def _back_to_relay(now: datetime) -> dict[str, Any]:
    """Column values that hand a stub back to the relay: unpublished, due now, no lease."""
    return {"status": UNCONFIRMED, "published_at": None, "next_resend_at": now,
            "lease_owner": None, "lease_until": None, "overtaken_at": None, "updated_at": now}


def _change(engine: Engine, message_ids: Sequence[str], allowed: frozenset[str],
            values: dict[str, Any], action: str) -> list[str]:
    """Check that every stub of ``message_ids`` has a status in ``allowed``, then set
    ``values`` on them, in one transaction; else ``AdminError`` and nothing written."""
    ids = list(dict.fromkeys(message_ids))  # each id once, in the order given
    if not ids:
        return []

    def work(connection: Connection) -> list[str]:
        found: dict[str, str] = {}
        for chunk in _chunks(ids):
            rows = connection.execute(select(stub.message_id, stub.status).where(
                stub.message_id.in_(chunk)).with_for_update())
            found.update((message_id, status) for message_id, status in rows)
        refused = [message_id for message_id in ids if found.get(message_id) not in allowed]
        if refused:
            raise AdminError(_refusal(action, refused, found, allowed), refused)
        for chunk in _chunks(ids):
            written = connection.execute(update(message_stub).where(
                stub.message_id.in_(chunk), stub.status.in_(sorted(allowed))).values(**values))
            assert written.rowcount == len(chunk), (action, written.rowcount, len(chunk))
        return ids

    return run_transaction(engine, work)


def _rearm_batch(connection: Connection, *, after: str, values: dict[str, Any]) -> list[str]:
    """Re-arm up to ``BATCH_SIZE`` void stubs whose id sorts after ``after``; their ids."""
    picked = list(connection.execute(
        select(stub.message_id).where(stub.status == VOID, stub.message_id > after)
        .order_by(stub.message_id).limit(BATCH_SIZE).with_for_update()).scalars())
    if picked:
        written = connection.execute(update(message_stub).where(
            stub.message_id.in_(picked), stub.status == VOID).values(**values))
        assert written.rowcount == len(picked), (written.rowcount, len(picked))
    return picked


def _refusal(action: str, refused: list[str], found: dict[str, str],
             allowed: frozenset[str]) -> str:
    """``cannot re-arm 2 stubs (only void ones): a (confirmed), b (missing); nothing changed``."""
    shown = ", ".join(f"{message_id} ({found.get(message_id, 'missing')})"
                      for message_id in refused[:ERROR_IDS_SHOWN])
    more = f" and {len(refused) - ERROR_IDS_SHOWN} more" if len(refused) > ERROR_IDS_SHOWN else ""
    plural = "stub" if len(refused) == 1 else "stubs"
    return (f"cannot {action} {len(refused)} {plural} (only {' or '.join(sorted(allowed))} "
            f"ones): {shown}{more}; nothing changed")


def _chunks(ids: list[str]) -> Iterator[list[str]]:
    for start in range(0, len(ids), BATCH_SIZE):
        yield ids[start:start + BATCH_SIZE]


def _count_where(condition: ColumnElement[bool]) -> ColumnElement[Any]:
    """``SUM(CASE WHEN condition THEN 1 ELSE 0 END)``, 0 over no rows."""
    return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)


def _zero_counts() -> dict[str, int]:
    return {status.value: 0 for status in StubStatus}


def _stub_row(row: RowMapping) -> StubRow:
    values = dict(row)
    values["status"] = StubStatus(values["status"])
    return StubRow(**values)


__all__ = [
    "BATCH_SIZE", "DEFAULT_MAX_SEND_COUNT", "LIST_LIMIT_MAX", "REASON_MAX_CHARS", "AdminError",
    "OutboxStats", "StubRow", "TaskStatus", "get_stub", "list_stubs", "rearm", "schedule_resend",
    "stub_stats", "void",
]
