"""The outbox's Celery tasks and beat schedule: ``make_celery(build_worker)``.

    # myapp/celery_app.py
    from postbox.outbox.celery_app import make_celery
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
With ``metrics_listen="HOST:PORT"`` (default: the ``POSTBOX_METRICS_LISTEN`` environment
variable) that process then serves the app's Prometheus metrics there (``app.metrics_server``;
the outbox's relay, resend and alert counters, stubs by status, the store); the worker runs a
``solo`` or ``threads`` pool, so the tasks count in that same process. Beat serves nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery import Celery, signals

from postbox.framework import App, environment
from postbox.framework.contrib.celery import create_celery, host_app, scheduler_identity

from .worker import TASK_NAMES, OutboxWorker, TaskSchedule

TASK_PREFIX = "postbox.outbox."
METRICS_LISTEN_ENV_VAR = environment.METRICS_LISTEN.name
log = logging.getLogger(__name__)


def make_celery(name: str, build_worker: Callable[[], OutboxWorker], *,
                schedule: TaskSchedule | None = None, broker_url: str | None = None,
                metrics_listen: str | None = None, **settings: Any) -> Celery:
    """A Celery app with the three outbox tasks and their beat schedule.

    Args:
        name: the Celery app's name.
        build_worker: makes the ``OutboxWorker`` (and its ``App``) in the worker process.
        schedule: task periods for the beat (default ``TaskSchedule()``).
        broker_url: the Celery broker (default ``POSTBOX_REDIS_URL`` or embedded Redis).
        metrics_listen: ``HOST:PORT`` of the worker's metrics endpoint (default
            ``POSTBOX_METRICS_LISTEN``; unset: none).
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
    _serve_metrics(celery, current_app,
                   metrics_listen or environment.env_value(environment.METRICS_LISTEN))

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


def _serve_metrics(celery: Celery, current_app: Callable[[], App], listen: str | None) -> None:
    """At ``worker_ready`` (after the app started), serve its metrics on ``listen``."""
    if listen is None:
        return
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{METRICS_LISTEN_ENV_VAR} / metrics_listen {listen!r} is not HOST:PORT")

    @signals.worker_ready.connect(weak=False)
    def serve(sender: Any = None, **_: Any) -> None:
        if sender is None or sender.app is not celery:
            return
        server = current_app().metrics_server(int(port), host)
        log.info("metrics listening on %s:%d", host, server.port)


def _register(celery: Celery, task_name: str,
              current_worker: Callable[[], OutboxWorker]) -> None:
    def run(scheduler: str | None = None, scheduled: bool = True) -> dict[str, Any]:
        return current_worker().run(task_name, scheduler=scheduler, scheduled=scheduled)

    run.__name__ = task_name
    run.__doc__ = getattr(OutboxWorker, task_name).__doc__
    celery.task(name=TASK_PREFIX + task_name)(run)


__all__ = ["TASK_PREFIX", "make_celery"]
