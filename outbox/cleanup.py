"""Cleanup: deleting outbox rows nobody needs any more, in bounded batches.

What goes, each past its own retention (``CleanupPolicy``):
- **confirmed stubs** whose ``confirmed_at`` is older than ``confirmed_retention``;
- **void stubs** whose ``updated_at`` (when they went void, or an operator last touched them)
  is older than ``void_retention`` — only when that is set: by default void stubs wait for an
  operator;
- **orphaned log rows**: ``message_log`` rows whose ``created_at`` is older than
  ``log_retention`` and whose message has no *unconfirmed* stub in this database (the stub is
  confirmed, void, already cleaned, or lives in another database). A log row of an unconfirmed
  stub marks a message still in flight and is never deleted here, however old;
- **dedup records**: ``message_processed`` rows whose ``processed_at`` is older than
  ``processed_retention``;
- **resend records**: ``message_resend`` rows whose ``resent_at`` is older than
  ``log_retention`` and whose message has no *unconfirmed* stub (as for log rows).

Every retention must exceed the redelivery horizon (the longest a message can still arrive
again: resend schedule + consumer retries + margin), checked by ``CleanupPolicy.validate``:
a dedup record deleted while its message can still be redelivered turns that redelivery into a
second effect.

Bounded work, never one unbounded ``DELETE``. Each batch is one short transaction
(``run_transaction``, so a deadlock victim is retried) that picks up to ``batch_size`` rows
matching the condition in the order of the table's time index — from the time where the run's
previous batch ended, so no batch walks again the index entries its predecessors deleted (on
PostgreSQL they stay in the index until vacuum) — and deletes those of them that still match:
a row that changed in between (a stub re-armed, a log row whose stub became unconfirmed) stays.

- **PostgreSQL**: one statement. A CTE picks the rows' physical addresses (``ctid``) and their
  times; a ``DELETE … WHERE ctid = ANY(ARRAY(<picked>)) AND <the condition again>`` in a second
  CTE removes them through a TID scan, and the outer query returns how many were picked and
  deleted and the last time picked. No key travels to the client and back, and no key is
  looked up in the primary key's index: at 2 and 10 million stubs this deletes 3–5× more
  rows a minute than the key lists below (``bench/README.md``). A row another transaction updates
  meanwhile is re-checked on its new version, whose ``ctid`` differs: it stays.
- **Elsewhere**: select the primary keys, then ``DELETE … WHERE <primary key> IN (those keys)
  AND <the condition again>``. Composite keys use row values, ``(consumer_group, message_id)
  IN (…)``, on MySQL/MariaDB and SQLite ≥ 3.15, and an ``OR`` of ``AND``s elsewhere. Deleting
  by primary key under ``READ COMMITTED`` (what ``create_database_engine`` sets on
  MySQL/MariaDB) takes no gap locks on the time index, the usual source of cleanup deadlocks
  (a single ``DELETE … ORDER BY … LIMIT`` measured no faster on MariaDB).

A run stops a table after ``max_batches`` batches and reports ``complete=False``; the next run
carries on from the oldest rows left.

``workers`` > 1 splits the time range of each plain time condition's rows (stubs, void stubs,
dedup records; the orphan sweeps, whose condition is an anti-join, stay one connection) into
that many slices by time and sweeps them on as many threads, each with its own connection and
its own batches as above, sharing ``max_batches``. The slices are disjoint, so the threads
never wait on each other's rows.

Nothing here holds state between calls: ``run_cleanup`` is safe to call from several threads or
processes at once (they delete disjoint rows or find them gone). A crash loses at most the
batch in flight, which rolls back and is found again by the next run. An unreachable database
raises SQLAlchemy's ``OperationalError`` from the first batch; the periodic task layer retries
at its next run.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    Engine,
    Table,
    and_,
    delete,
    exists,
    false,
    func,
    literal_column,
    or_,
    select,
    text,
    tuple_,
)

from postbox.framework import ConfigurationError

from .clock import utc_now
from .database import dialect_name, run_transaction
from .tables import StubStatus, message_log, message_processed, message_resend, message_stub

log = logging.getLogger(__name__)

MAX_BATCH_SIZE = 10_000
"""Upper bound of ``CleanupPolicy.batch_size``: a composite key costs two bind parameters, and
SQLite allows 32 766 per statement; a longer transaction also holds its locks longer."""
MAX_WORKERS = 8
"""Upper bound of ``CleanupPolicy.workers`` (each holds a connection of the engine's pool)."""
_ROW_VALUE_DIALECTS = frozenset({"postgresql", "mysql", "sqlite"})
_SQLITE_ROW_VALUES = (3, 15, 0)

stub = message_stub.c
log_row = message_log.c
processed = message_processed.c
resent = message_resend.c


@dataclass(frozen=True)
class CleanupPolicy:
    """How old rows must be before cleanup deletes them, and how much one run may do.

    Batch limits are checked on creation; the retentions against the redelivery horizon by
    ``validate``, which the caller runs once it knows the horizon.
    """

    confirmed_retention: timedelta = timedelta(days=7)
    """Confirmed stubs whose ``confirmed_at`` is older than this are deleted."""
    log_retention: timedelta = timedelta(days=7)
    """Orphaned ``message_log`` rows whose ``created_at`` is older than this are deleted."""
    processed_retention: timedelta = timedelta(days=7)
    """``message_processed`` rows (dedup records) whose ``processed_at`` is older than this are
    deleted."""
    void_retention: timedelta | None = None
    """Void stubs whose ``updated_at`` is older than this are deleted; None keeps them until an
    operator acts."""
    batch_size: int = 500
    """Rows per ``DELETE`` statement, and per transaction (1 … ``MAX_BATCH_SIZE``)."""
    max_batches: int = 200
    """Batches per table per run, so one run is bounded in time too."""
    workers: int = 1
    """Connections deleting one kind of row at once (1 … ``MAX_WORKERS``), each over its own
    slice of the rows' time range, its own batches on its own thread; ``max_batches`` is shared
    among them. More than one pays where a single connection's deletes leave the database's
    CPUs idle: MariaDB deletes row by row through every index of the table."""

    def __post_init__(self) -> None:
        self._check_limits()

    def validate(self, redelivery_horizon: timedelta) -> None:
        """Raise ``ConfigurationError`` unless every retention exceeds ``redelivery_horizon``
        (the longest time a message can still be redelivered) and the batch limits hold."""
        self._check_limits()
        if redelivery_horizon < timedelta(0):
            raise ConfigurationError(f"redelivery horizon must not be negative, "
                                     f"got {redelivery_horizon}")
        retentions = [("confirmed_retention", self.confirmed_retention),
                      ("log_retention", self.log_retention),
                      ("processed_retention", self.processed_retention)]
        if self.void_retention is not None:
            retentions.append(("void_retention", self.void_retention))
        for name, retention in retentions:
            if retention <= redelivery_horizon:
                raise ConfigurationError(
                    f"CleanupPolicy.{name} ({retention}) must exceed the redelivery horizon "
                    f"({redelivery_horizon}): a row deleted while its message can still be "
                    f"redelivered breaks deduplication; raise {name}")

    def _check_limits(self) -> None:
        for name in ("batch_size", "max_batches", "workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"CleanupPolicy.{name} must be an integer >= 1, "
                                         f"got {value!r}")
        if self.workers > MAX_WORKERS:
            raise ConfigurationError(f"CleanupPolicy.workers must be at most {MAX_WORKERS}, "
                                     f"got {self.workers}")
        if self.batch_size > MAX_BATCH_SIZE:
            raise ConfigurationError(f"CleanupPolicy.batch_size must be at most "
                                     f"{MAX_BATCH_SIZE}, got {self.batch_size}")
        for name in ("confirmed_retention", "log_retention", "processed_retention",
                     "void_retention"):
            value = getattr(self, name)
            if value is None and name == "void_retention":
                continue
            if not isinstance(value, timedelta):
                raise ConfigurationError(f"CleanupPolicy.{name} must be a timedelta, "
                                         f"got {value!r}")


@dataclass
class CleanupReport:
    """What one run deleted (row counts per kind) and how."""

    stubs: int = 0
    """Confirmed stubs."""
    logs: int = 0
    """Orphaned ``message_log`` rows."""
    processed: int = 0
    """``message_processed`` rows."""
    resends: int = 0
    """``message_resend`` rows."""
    void_stubs: int = 0
    batches: int = 0
    """``DELETE`` statements run, over all tables."""
    largest_batch: int = 0
    """Most rows one ``DELETE`` removed."""
    complete: bool = True
    """False when ``max_batches`` stopped some table with rows still due."""

    @property
    def deleted(self) -> int:
        """Rows deleted, all tables together."""
        return self.stubs + self.logs + self.processed + self.resends + self.void_stubs


@dataclass(frozen=True)
class _Sweep:
    """One kind of row to delete: the report field it counts in, its table and primary key,
    the time column whose index orders the batches, and the condition a row must meet."""

    field: str
    table: Table
    key: tuple[Column[Any], ...]
    time_column: Column[Any]
    condition: ColumnElement[bool]
    sliceable: bool = True
    """Whether the oldest and newest matching times are one index probe each (a plain time
    condition; not an anti-join), so workers can split the range between them."""

    def before(self, bound: Any) -> _Sweep:
        """This sweep over the rows whose time is below ``bound`` alone."""
        return replace(self, condition=and_(self.condition, self.time_column < bound))

    def since(self, reached: Any) -> ColumnElement[bool]:
        """The condition, from the time ``reached`` on (None: from the oldest row)."""
        if reached is None:
            return self.condition
        return and_(self.condition, self.time_column >= reached)


@dataclass(frozen=True)
class _Batch:
    selected: int
    deleted: int
    reached: Any = None
    """The time-column value of the last row selected: the next batch starts there."""


def run_cleanup(engine: Engine, policy: CleanupPolicy, *,
                now: datetime | None = None) -> CleanupReport:
    """Delete what ``policy`` says is past retention at ``now`` (naive UTC; default: the current
    time), in batches of at most ``policy.batch_size`` rows, at most ``policy.max_batches`` per
    table. Database errors (``sqlalchemy.exc.OperationalError`` when unreachable) propagate."""
    now = now or utc_now()
    started = time.monotonic()
    report = CleanupReport()
    for sweep in _sweeps(policy, now):
        if policy.workers > 1 and sweep.sliceable:
            _sweep_in_slices(engine, sweep, policy, report)
        else:
            _sweep_table(engine, sweep, policy, report)
    elapsed_ms = (time.monotonic() - started) * 1000
    log.info("[cleanup] deleted stubs=%d void_stubs=%d logs=%d processed=%d resends=%d in "
             "batches=%d largest_batch=%d complete=%s (batch_size=%d max_batches=%d "
             "workers=%d) elapsed_ms=%.0f", report.stubs, report.void_stubs, report.logs,
             report.processed, report.resends, report.batches, report.largest_batch,
             report.complete, policy.batch_size, policy.max_batches, policy.workers,
             elapsed_ms)
    return report


def _sweeps(policy: CleanupPolicy, now: datetime) -> list[_Sweep]:
    """The kinds of rows ``policy`` deletes at ``now``, stubs before the log rows they orphan."""
    in_flight = exists().where(stub.message_id == log_row.message_id,
                               stub.status == StubStatus.UNCONFIRMED.value)
    sweeps = [_Sweep("stubs", message_stub, (stub.message_id,), stub.confirmed_at, and_(
        stub.status == StubStatus.CONFIRMED.value,
        stub.confirmed_at < now - policy.confirmed_retention))]
    if policy.void_retention is not None:
        sweeps.append(_Sweep("void_stubs", message_stub, (stub.message_id,), stub.updated_at,
                             and_(stub.status == StubStatus.VOID.value,
                                  stub.updated_at < now - policy.void_retention)))
    sweeps.append(_Sweep("logs", message_log, (log_row.consumer_group, log_row.message_id),
                         log_row.created_at,
                         and_(log_row.created_at < now - policy.log_retention, ~in_flight),
                         sliceable=False))
    sweeps.append(_Sweep("processed", message_processed,
                         (processed.consumer_group, processed.message_id),
                         processed.processed_at,
                         processed.processed_at < now - policy.processed_retention))
    resent_open = exists().where(stub.message_id == resent.message_id,
                                 stub.status == StubStatus.UNCONFIRMED.value)
    sweeps.append(_Sweep("resends", message_resend, (resent.consumer_group, resent.message_id),
                         resent.resent_at,
                         and_(resent.resent_at < now - policy.log_retention, ~resent_open),
                         sliceable=False))
    return sweeps


def _sweep_in_slices(engine: Engine, sweep: _Sweep, policy: CleanupPolicy,
                     report: CleanupReport) -> None:
    """``sweep`` by ``policy.workers`` threads at once, each over its own slice of the time
    range of the matching rows (split evenly by time), sharing ``max_batches``."""
    with engine.connect() as connection:
        oldest, newest = connection.execute(select(func.min(sweep.time_column),
                                                   func.max(sweep.time_column))
                                            .where(sweep.condition)).one()
    if oldest is None or oldest == newest:
        _sweep_table(engine, sweep, policy, report)
        return
    step = (newest - oldest) / policy.workers
    bounds = [oldest + step * number for number in range(1, policy.workers)]
    slices = [(sweep if upper is None else sweep.before(upper), lower)
              for lower, upper in zip([None, *bounds], [*bounds, None], strict=True)]
    share = -(-policy.max_batches // policy.workers)
    with ThreadPoolExecutor(policy.workers, thread_name_prefix="cleanup") as pool:
        futures = [pool.submit(_slice_report, engine, part, lower, policy, share)
                   for part, lower in slices]
        parts = [future.result() for future in futures]
    for part in parts:
        setattr(report, sweep.field, getattr(report, sweep.field) + getattr(part, sweep.field))
        report.batches += part.batches
        report.largest_batch = max(report.largest_batch, part.largest_batch)
        report.complete = report.complete and part.complete


def _slice_report(engine: Engine, sweep: _Sweep, lower: Any, policy: CleanupPolicy,
                  max_batches: int) -> CleanupReport:
    part = CleanupReport()
    _sweep_table(engine, sweep, policy, part, start=lower, max_batches=max_batches)
    return part


def _sweep_table(engine: Engine, sweep: _Sweep, policy: CleanupPolicy,
                 report: CleanupReport, *, start: Any = None,
                 max_batches: int | None = None) -> None:
    """Run up to ``max_batches`` (default ``policy.max_batches``) batches of ``sweep`` from
    the time ``start`` on (None: the oldest row), adding them to ``report``."""
    reached = start
    if _deletes_by_address(engine):
        one_batch = functools.partial(_delete_batch_by_address, sweep=sweep,
                                      limit=policy.batch_size)
    else:
        one_batch = functools.partial(_delete_batch, sweep=sweep, limit=policy.batch_size,
                                      row_values=_supports_row_values(engine))
    for _ in range(policy.max_batches if max_batches is None else max_batches):
        batch = run_transaction(engine, functools.partial(one_batch, reached=reached))
        reached = batch.reached
        if batch.selected:
            setattr(report, sweep.field, getattr(report, sweep.field) + batch.deleted)
            report.batches += 1
            report.largest_batch = max(report.largest_batch, batch.deleted)
        if batch.selected < policy.batch_size:
            return
    if _has_more(engine, sweep):
        report.complete = False


def _delete_batch(connection: Connection, *, sweep: _Sweep, limit: int, row_values: bool,
                  reached: Any = None) -> _Batch:
    """One batch, in the caller's transaction: pick up to ``limit`` keys (from ``reached``
    on, the time where the previous batch of the run ended), delete those rows that still
    match."""
    picked = connection.execute(select(*sweep.key, sweep.time_column).where(sweep.since(reached))
                                .order_by(sweep.time_column).limit(limit)).all()
    if not picked:
        return _Batch(0, 0)
    assert len(picked) <= limit, (sweep.field, len(picked), limit)
    keys = [tuple(row)[:-1] for row in picked]
    result = connection.execute(delete(sweep.table).where(
        _key_in(sweep.key, keys, row_values), sweep.condition))
    return _Batch(len(picked), result.rowcount, tuple(picked[-1])[-1])


def _delete_batch_by_address(connection: Connection, *, sweep: _Sweep, limit: int,
                             reached: Any = None) -> _Batch:
    """PostgreSQL's batch, one statement: pick up to ``limit`` rows' ``ctid`` (from
    ``reached`` on), delete those that still match through a TID scan."""
    address: ColumnElement[Any] = literal_column(f"{sweep.table.name}.ctid")
    picked = (select(address.label("address"), sweep.time_column.label("at"))
              .where(sweep.since(reached)).order_by(sweep.time_column).limit(limit)
              .cte("picked"))
    # ARRAY(SELECT …) makes the addresses one parameter, which the TID scan takes
    gone = (delete(sweep.table)
            .where(text(f"{sweep.table.name}.ctid = ANY(ARRAY(SELECT address FROM picked))"),
                   sweep.condition)
            .returning(literal_column("1").label("one")).cte("gone"))
    selected, last, deleted = connection.execute(select(
        select(func.count()).select_from(picked).scalar_subquery(),
        select(func.max(picked.c.at)).scalar_subquery(),
        select(func.count()).select_from(gone).scalar_subquery())).one()
    assert selected <= limit, (sweep.field, selected, limit)
    return _Batch(selected, deleted, last)


def _has_more(engine: Engine, sweep: _Sweep) -> bool:
    """Whether some row still matches ``sweep`` (one indexed probe)."""
    with engine.connect() as connection:
        return connection.execute(
            select(sweep.key[0]).where(sweep.condition).limit(1)).first() is not None


def _key_in(columns: tuple[Column[Any], ...], keys: Sequence[Any],
            row_values: bool) -> ColumnElement[bool]:
    """``<primary key> IN keys``: a plain ``IN`` for one column; row values, or an ``OR`` of
    ``AND``s where the database has none, for a composite key."""
    if len(columns) == 1:
        return columns[0].in_([key[0] for key in keys])
    if row_values:
        return tuple_(*columns).in_([tuple(key) for key in keys])
    if not keys:
        return false()
    return or_(*(and_(*(column == value for column, value in zip(columns, key, strict=True)))
                 for key in keys))


def _deletes_by_address(engine: Engine) -> bool:
    """Whether a batch is one statement deleting by ``ctid`` (PostgreSQL)."""
    return dialect_name(engine) == "postgresql"


def _supports_row_values(engine: Engine) -> bool:
    """Whether ``(a, b) IN ((…), (…))`` works on ``engine``'s database."""
    name = dialect_name(engine)
    if name == "sqlite":
        version = getattr(engine.dialect.dbapi, "sqlite_version_info", (0,))
        return tuple(version) >= _SQLITE_ROW_VALUES
    return name in _ROW_VALUE_DIALECTS


__all__ = ["MAX_BATCH_SIZE", "MAX_WORKERS", "CleanupPolicy", "CleanupReport", "run_cleanup"]
