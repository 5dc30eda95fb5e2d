"""``PaymentsConfig``: everything the example needs, from arguments or the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from postbox.outbox.resend import ResendRules
from postbox.outbox.worker import TaskSchedule

FAST_DELAY_LEVELS = " ".join(f"{40 * level}ms" for level in range(1, 19))
"""Delay levels in milliseconds, so retries and dead letters happen within the demo."""


@dataclass(frozen=True)
class PaymentsConfig:
    """Where the example keeps its store and database, and how fast it retries.

    ``fast`` swaps RocketMQ's 1 s … 2 h delay levels for 40 ms steps and uses second-scale
    resend rules, so the whole story plays out in seconds.
    """

    store_dir: Path = Path(".postbox/payments-store")
    database_url: str = "sqlite:///.postbox/payments.db"
    redis_url: str | None = None
    fast: bool = True
    reconsume_count_max: int = 3
    rules: ResendRules = field(default_factory=lambda: ResendRules(
        grace_ms=500, backoff_ms=1_000, backoff_max_ms=4_000, recheck_ms=500))
    schedule: TaskSchedule = field(default_factory=lambda: TaskSchedule(
        relay_pending_s=2.0, resend_due_s=2.0, cleanup_s=60.0))
    cleanup_batch_size: int = 500
    cleanup_max_batches: int = 200

    @property
    def broker_conf(self) -> dict[str, str]:
        """broker.conf keys for the example's store."""
        return {"messageDelayLevel": FAST_DELAY_LEVELS} if self.fast else {}

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> PaymentsConfig:
        """``POSTBOX_STORE``, ``POSTBOX_DATABASE_URL``, ``POSTBOX_REDIS_URL``,
        ``PAYMENTS_FAST`` (1/0), ``PAYMENTS_TASK_PERIOD_S`` (relay and resend period),
        ``PAYMENTS_CLEANUP_PERIOD_S``, ``PAYMENTS_CLEANUP_BATCH_SIZE`` and
        ``PAYMENTS_CLEANUP_MAX_BATCHES``."""
        default = cls()
        period = float(env.get("PAYMENTS_TASK_PERIOD_S", default.schedule.resend_due_s))
        return cls(store_dir=Path(env.get("POSTBOX_STORE", default.store_dir)),
                   database_url=env.get("POSTBOX_DATABASE_URL", default.database_url),
                   redis_url=env.get("POSTBOX_REDIS_URL") or None,
                   fast=env.get("PAYMENTS_FAST", "1") != "0",
                   schedule=TaskSchedule(relay_pending_s=period, resend_due_s=period,
                                         cleanup_s=float(env.get("PAYMENTS_CLEANUP_PERIOD_S",
                                                                 default.schedule.cleanup_s))),
                   cleanup_batch_size=int(env.get("PAYMENTS_CLEANUP_BATCH_SIZE",
                                                  default.cleanup_batch_size)),
                   cleanup_max_batches=int(env.get("PAYMENTS_CLEANUP_MAX_BATCHES",
                                                   default.cleanup_max_batches)))


__all__ = ["FAST_DELAY_LEVELS", "PaymentsConfig"]
