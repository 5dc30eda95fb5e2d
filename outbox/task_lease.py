"""One run at a time per periodic task, whatever fires it: a lease row per task in ``outbox_task``.

Celery beat must run once per deployment, yet two beats are a common misconfiguration, and a
task whose run outlives the broker's visibility timeout is delivered twice. Each periodic task
therefore starts by taking its row's lease in one guarded ``UPDATE``:

- the lease is free (``lease_until`` is NULL or past) — no other run of the task is working, and
- the last run started at least ``min_interval`` ago — a second beat, firing the same schedule
  at another phase, finds the task freshly run and is skipped (counted in ``skipped``).

A run that got the lease finishes by clearing it (fenced by its token, so a run that outlived
its lease changes nothing) and may store a small JSON ``state`` (the dead-letter scan keeps its
cursors there). A run that dies keeps the lease until ``lease_until``; nothing else is needed
for recovery. The rows the tasks then work on are claimed one by one anyway
(``claims.claim_stubs``), so the lease bounds wasted work and log noise; correctness never
depends on it.

When a skipped run names a different scheduler than the run that holds the task, a warning says
that two schedulers are firing it.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from .clock import NowFunction, utc_now
from .database import run_transaction
from .tables import outbox_task

log = logging.getLogger(__name__)
task = outbox_task.c


@dataclass(frozen=True)
class TaskRun:
    """A run that holds its task's lease."""

    name: str
    token: str
    started_at: datetime
    state: dict[str, Any]
    """The state the previous run stored (``{}`` at first)."""


class TaskLease:
    """Leases on ``outbox_task`` rows of one database.

    Args:
        engine: the database with the outbox tables.
        owner: a name for the lease holder (host and pid by default).
        now: database time source (naive UTC).
    """

    def __init__(self, engine: Engine, *, owner: str, now: NowFunction = utc_now) -> None:
        self.engine = engine
        self.owner = owner
        self._now = now
        self._known: set[str] = set()
        """Task rows this object has seen exist (rows are never deleted)."""

    def begin(self, name: str, *, lease: timedelta, min_interval: timedelta = timedelta(0),
              scheduler: str | None = None) -> TaskRun | None:
        """Take the lease of task ``name``; None when another run holds it or ran too
        recently (the skip is counted)."""
        self._ensure_row(name)
        token = f"{self.owner[:40]}:{uuid.uuid4().hex[:16]}"
        now = self._now()

        def take(connection: Connection) -> TaskRun | None:
            taken = connection.execute(update(outbox_task).where(
                task.name == name,
                or_(task.lease_until.is_(None), task.lease_until < now),
                or_(task.last_started_at.is_(None), task.last_started_at <= now - min_interval),
            ).values(lease_owner=token, lease_until=now + lease, last_started_at=now,
                     last_scheduler=scheduler, runs=task.runs + 1, updated_at=now))
            if taken.rowcount:
                state = connection.execute(select(task.state).where(task.name == name)).scalar()
                return TaskRun(name, token, now, json.loads(state) if state else {})
            connection.execute(update(outbox_task).where(task.name == name).values(
                skipped=task.skipped + 1))
            holder = connection.execute(select(task.last_scheduler, task.last_started_at).where(
                task.name == name)).one()
            if scheduler and holder.last_scheduler and holder.last_scheduler != scheduler:
                log.warning("task %s was fired by scheduler %s while %s fired it at %s: two "
                            "schedulers (celery beats) are running; only one run acts",
                            name, scheduler, holder.last_scheduler, holder.last_started_at)
            return None

        run = run_transaction(self.engine, take)
        if run is None:
            log.info("task %s skipped: another run holds it or ran less than %s ago", name,
                     min_interval)
        return run

    def finish(self, run: TaskRun, state: dict[str, Any] | None = None) -> bool:
        """Release the lease (and store ``state`` when given); False if the lease was lost."""
        now = self._now()
        values: dict[str, Any] = {"lease_owner": None, "lease_until": None,
                                  "last_finished_at": now, "updated_at": now}
        if state is not None:
            values["state"] = json.dumps(state, sort_keys=True)
        released = run_transaction(self.engine, lambda connection: connection.execute(
            update(outbox_task).where(task.name == run.name, task.lease_owner == run.token)
            .values(**values)).rowcount)
        if not released:
            log.warning("task %s ran past its lease; its results stand, its state was not "
                        "stored", run.name)
        return bool(released)

    @contextmanager
    def hold(self, name: str, *, lease: timedelta, min_interval: timedelta = timedelta(0),
             scheduler: str | None = None) -> Iterator[TaskRun | None]:
        """``begin`` … ``finish`` around a block (the block sees None when skipped). The block
        may put a new state in ``run.state`` (it is stored when the block succeeds)."""
        run = self.begin(name, lease=lease, min_interval=min_interval, scheduler=scheduler)
        if run is None:
            yield None
            return
        try:
            yield run
        except BaseException:
            self.finish(run)
            raise
        self.finish(run, run.state)

    def _ensure_row(self, name: str) -> None:
        if name in self._known:
            return
        with self.engine.connect() as connection:
            if not connection.execute(select(task.name).where(task.name == name)).first():
                try:
                    connection.execute(insert(outbox_task).values(name=name,
                                                                  updated_at=self._now()))
                    connection.commit()
                except IntegrityError:  # another process inserted it first
                    connection.rollback()
        self._known.add(name)


__all__ = ["TaskLease", "TaskRun"]
