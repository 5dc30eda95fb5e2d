"""Exactly-once handler middleware: Redis SET NX hint plus database authority (DESIGN §5).

``@app.handler(..., idempotent=True)`` is all an application writes: ``App.start()`` loads
``middleware_for_app`` through the ``postbox.middleware`` entry point. Build
``IdempotencyMiddleware`` directly to choose the engine or Redis client yourself.

May import ``framework`` and ``outbox.tables`` / ``outbox.database``.
"""

from .app_factory import middleware_for_app
from .middleware import IdempotencyMiddleware, IdempotencyStats
from .redis_guard import GuardState, GuardStats, RedisGuard

__all__ = ["GuardState", "GuardStats", "IdempotencyMiddleware", "IdempotencyStats",
           "RedisGuard", "middleware_for_app"]
