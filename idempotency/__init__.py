"""Exactly-once handler middleware: Redis SET NX hint plus database authority.

``@app.handler(..., idempotent=True)`` is all an application writes: ``IdempotencyMiddleware``
declares the ``idempotent`` handler option and is registered in the ``postbox.middleware``
entry-point group, so ``App.start()`` builds it (``IdempotencyMiddleware.from_app``: the app's
database and Redis) for the handlers that set it. Add one yourself with
``app.add_middleware(IdempotencyMiddleware(engine, guard))``, before registering the handlers,
to choose the engine or Redis client. An ``async def`` handler with ``idempotent=True`` gets an
``AsyncSession`` (``idempotency.async_handler``; ``async_database_url=`` / ``async_engine=``
choose its database).

May import ``framework`` and ``outbox.tables`` / ``outbox.database``.
"""

from .middleware import IdempotencyMiddleware, IdempotencyStats
from .redis_guard import GuardState, GuardStats, RedisGuard

__all__ = ["GuardState", "GuardStats", "IdempotencyMiddleware", "IdempotencyStats",
           "RedisGuard"]
