"""``OutboxWorker``: the outbox's periodic work for one app — ``relay_pending``, ``resend_due``
and ``cleanup`` — each safe to fire from any number of schedulers and processes.

Every task first takes its lease in ``outbox_task`` (``task_lease``): one run at a time, and no
run sooner than ``min_interval`` after the previous one started, so a second Celery beat (or a
manual call racing the beat) finds the task done and is skipped. Inside, rows are claimed in
the database one by one, so even two overlapping runs would never send a stub twice.

- ``relay_pending``: publish stubs the after-commit hook did not (a crash after commit, sends
  from processes that do not run the broker, failed attempts due again) — the polling relay.
- ``resend_due``: void the stubs of dead-lettered messages (alert ``dead_lettered``), then apply
  the resend rule (``resend.Resender``): resend lost stubs, void exhausted ones (alert
  ``exhausted``).
- ``cleanup``: delete confirmed stubs and orphaned log and processed rows past retention, in
  bounded batches (``cleanup.run_cleanup``).

Configuration is checked when the worker is built: cleanup's retention must exceed the longest
time a message can still be redelivered (``resend.retention_horizon``), or deduplication
records would vanish while duplicates can still arrive.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine

from postbox.framework import App

from .alerts import Alerter, AlertSettings
from .cleanup import CleanupPolicy, run_cleanup
from .clock import NowFunction, utc_now
from .database import database_engine, explaining_missing_tables
from .metrics import outbox_metrics
from .options import RelayOptions, ResendRules
from .relay import Relay
from .resend import Resender, retention_horizon
from .task_lease import TaskLease

log = logging.getLogger(__name__)

DEFAULT_CONSUMER_RETRY = timedelta(hours=4, minutes=45, seconds=40)
"""RocketMQ's default retry schedule (delay levels 3…18, 16 retries) end to end."""
MAX_PASSES_PER_RUN = 20
"""Batches one run of ``relay_pending`` or ``resend_due`` works through at most."""


@dataclass(frozen=True)
class TaskSchedule:
    """How often the beat fires each task, in seconds (UTC intervals)."""

    relay_pending_s: float = 5.0
    resend_due_s: float = 30.0
    cleanup_s: float = 3600.0
    min_interval_ratio: float = 0.8
    """A run starting sooner than this share of its period after the previous one is skipped
    (a second beat, or a manual call racing the beat)."""

    def period_s(self, task_name: str) -> float:
        """The period of ``task_name``."""
        return float(getattr(self, f"{task_name}_s"))

    def min_interval(self, task_name: str) -> timedelta:
        """The shortest gap between two runs of ``task_name``."""
        return timedelta(seconds=self.period_s(task_name) * self.min_interval_ratio)


TASK_NAMES = ("relay_pending", "resend_due", "cleanup")


class OutboxWorker:
    """The periodic outbox tasks of ``app``.

    Args:
        app: the application (its broker holds the messages; its database has the stubs).
        engine: the stub database (default: the app's shared engine).
        rules: the resend rule.
        cleanup: retention and batch sizes for ``cleanup``.
        alerter: alert sinks (default: from ``POSTBOX_ALERT_*`` environment variables).
        schedule: task periods (used for the lease's ``min_interval``).
        relay_options: polling-relay tuning (it follows ``rules``: their ``max_send_count``).
        log_engine: the consumers' database when it is not the stub database.
        consumer_retry: how long the consumers' own retries can last (for the retention
            check).
        now: database time source (naive UTC).
    """

    def __init__(self, app: App, *, engine: Engine | None = None,
                 rules: ResendRules | None = None, cleanup: CleanupPolicy | None = None,
                 alerter: Alerter | None = None, schedule: TaskSchedule | None = None,
                 relay_options: RelayOptions | None = None, log_engine: Engine | None = None,
                 consumer_retry: timedelta = DEFAULT_CONSUMER_RETRY,
                 now: NowFunction = utc_now) -> None:
        self.app = app
        self.engine = engine if engine is not None else database_engine(app)
        self.rules = rules or ResendRules()
        self.cleanup_policy = cleanup or CleanupPolicy()
        self.cleanup_policy.validate(retention_horizon(self.rules, consumer_retry))
        self.alerter = alerter or AlertSettings.from_env().build()
        self.schedule = schedule or TaskSchedule()
        self.owner = f"{socket.gethostname()[:24]}:{os.getpid()}"
        self.relay = Relay(lambda: app.producer, self.engine,
                           options=self.rules.relay_options(relay_options),
                           owner=self.owner, now=now)
        self.resender = Resender(app, self.engine, self.relay, rules=self.rules,
                                 alerter=self.alerter, log_engine=log_engine, owner=self.owner,
                                 now=now)
        self.relay.on_void = self.resender.relay_voided
        metrics = outbox_metrics(app)
        metrics.add_relay(self.relay)
        metrics.add_resender(self.resender)
        self.leases = TaskLease(self.engine, owner=self.owner, now=now)
        self._now = now

    def run(self, task_name: str, *, scheduler: str | None = None,
            scheduled: bool = True) -> dict[str, Any]:
        """Run one task by name under its lease; ``scheduled=False`` (a manual run) skips the
        minimum-interval check but still waits for no other run to hold the lease. A database
        without the outbox tables raises ``MissingTablesError`` (run ``postbox db upgrade``)."""
        if task_name not in TASK_NAMES:
            raise ValueError(f"unknown outbox task {task_name!r}; tasks: {', '.join(TASK_NAMES)}")
        lease = timedelta(seconds=max(self.schedule.period_s(task_name) * 4, 60))
        min_interval = self.schedule.min_interval(task_name) if scheduled else timedelta(0)
        with explaining_missing_tables(f"outbox task {task_name}"), self.leases.hold(
                task_name, lease=lease, min_interval=min_interval, scheduler=scheduler) as run:
            if run is None:
                return {"task": task_name, "skipped": True}
            result = getattr(self, f"_{task_name}")(run.state)
        return {"task": task_name, "skipped": False, **result}

    def relay_pending(self, **kwargs: Any) -> dict[str, Any]:
        """Publish stubs still waiting for their first publish."""
        return self.run("relay_pending", **kwargs)

    def resend_due(self, **kwargs: Any) -> dict[str, Any]:
        """Void dead-lettered stubs, then resend lost ones and void exhausted ones."""
        return self.run("resend_due", **kwargs)

    def cleanup(self, **kwargs: Any) -> dict[str, Any]:
        """Delete confirmed stubs and orphaned rows past retention, in bounded batches."""
        return self.run("cleanup", **kwargs)

    # ---- the tasks' bodies ---------------------------------------------------------------------

    def _relay_pending(self, state: dict[str, Any]) -> dict[str, Any]:
        published = 0
        failed_before = self.relay.stats.failed  # the relay's counters span all its runs
        for _ in range(MAX_PASSES_PER_RUN):
            count = self.relay.publish_due()
            published += count
            if count < self.relay.options.batch_size:
                break
        return {"published": published, "failed": self.relay.stats.failed - failed_before}

    def _resend_due(self, state: dict[str, Any]) -> dict[str, Any]:
        cursors = state.setdefault("dead_letter_cursors", {})
        letters = self.resender.void_dead_lettered(cursors)
        totals: dict[str, Any] = {"dead_lettered": letters.dead_lettered, "resent": 0,
                                  "exhausted": 0, "confirmed": 0, "grace_started": 0,
                                  "waiting": 0, "examined": 0}
        failed_alerts = [name for report in letters.alerts for name in report.failed]
        for _ in range(MAX_PASSES_PER_RUN):
            report = self.resender.resend_due()
            for name in ("resent", "exhausted", "confirmed", "grace_started", "waiting",
                         "examined"):
                totals[name] += getattr(report, name)
            failed_alerts += [name for alert in report.alerts for name in alert.failed]
            if report.examined < self.rules.batch_size:
                break
        totals["alert_failures"] = sorted(set(failed_alerts))
        return totals

    def _cleanup(self, state: dict[str, Any]) -> dict[str, Any]:
        report = run_cleanup(self.engine, self.cleanup_policy, now=self._now())
        return asdict(report)


__all__ = ["DEFAULT_CONSUMER_RETRY", "TASK_NAMES", "OutboxWorker", "TaskSchedule"]
