"""The outbox's Celery tasks and beat schedule: ``make_celery(build_worker)``.

    # myapp/celery_app.py
    from outbox.celery_app import make_celery
    celery = make_celery("myapp", build_worker)   # build_worker() -> outbox.OutboxWorker

    celery -A myapp.celery_app worker --loglevel=info     # hosts the Postbox app (solo pool)
    celery -A myapp.celery_app beat --loglevel=info       # one beat; a second one is harmless

Three tasks, named ``postbox.outbox.relay_pending``, ``postbox.outbox.resend_due`` and
``postbox.outbox.cleanup``, scheduled in UTC at the periods of the worker's ``TaskSchedule``
(read when the beat starts). Each call carries the identity of the beat that scheduled it, so a
run fired by a second beat is recognised and reported; each run takes its database lease first
(``task_lease``), so a second beat changes nothing. Schedules are plain intervals, never
ETA/countdown: the Redis transport redelivers long-delayed tasks (prior art: kombu #337).

The worker process builds the ``OutboxWorker`` — and with it the Postbox ``App`` and its
embedded store — once, at ``worker_ready``, through ``framework.contrib.celery.host_app``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Celery

from framework.contrib.celery import create_celery, host_app, scheduler_identity

from .worker import TASK_NAMES, OutboxWorker, TaskSchedule

TASK_PREFIX = "postbox.outbox."


def make_celery(name: str, build_worker: Callable[[], OutboxWorker], *,
                schedule: TaskSchedule | None = None, broker_url: str | None = None,
                **settings: Any) -> Celery:
    """A Celery app with the three outbox tasks and their beat schedule.

    Args:
        name: the Celery app's name.
        build_worker: makes the ``OutboxWorker`` (and its ``App``) in the worker process.
        schedule: task periods for the beat (default ``TaskSchedule()``).
        broker_url: the Celery broker (default ``POSTBOX_REDIS_URL`` or embedded Redis).
        settings: other Celery settings.
    """
    schedule = schedule or TaskSchedule()
    celery = create_celery(name, broker_url=broker_url, **settings)
    workers: dict[str, OutboxWorker] = {}

    def build_app():
        worker = build_worker()
        workers["worker"] = worker
        return worker.app

    current_app = host_app(celery, build_app)

    def current_worker() -> OutboxWorker:
        current_app()
        return workers["worker"]

    for task_name in TASK_NAMES:
        _register(celery, task_name, current_worker)
    beat_id = scheduler_identity()
    celery.conf.beat_schedule = {
        task_name: {"task": TASK_PREFIX + task_name, "schedule": schedule.period_s(task_name),
                    "kwargs": {"scheduler": beat_id}}
        for task_name in TASK_NAMES}
    celery.current_outbox_worker = current_worker
    return celery


def _register(celery: Celery, task_name: str,
              current_worker: Callable[[], OutboxWorker]) -> None:
    def run(scheduler: str | None = None, scheduled: bool = True) -> dict[str, Any]:
        return current_worker().run(task_name, scheduler=scheduler, scheduled=scheduled)

    run.__name__ = task_name
    run.__doc__ = getattr(OutboxWorker, task_name).__doc__
    celery.task(name=TASK_PREFIX + task_name)(run)


__all__ = ["TASK_PREFIX", "make_celery"]
