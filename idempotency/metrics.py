"""The idempotency middleware's metric families (added to its app's scrape by
``IdempotencyMiddleware.metric_families``; ``framework.metrics`` explains the collection).

How each message was decided, from ``IdempotencyStats`` and the Redis guard's ``GuardStats``:
- the Redis fast path: a duplicate rejected because Redis held its mark and one database read
  found it processed (``redis_fast_path_hits``);
- database fallbacks: Redis could not decide and the database transaction did — Redis
  unavailable or failing (``reason="redis_unavailable"``), or its mark held by an attempt that
  had not finished the message (``reason="mark_held"``);
- duplicates, by what rejected them (``decided_by="redis"`` or ``"database"``).
Counters since the middleware was made; reading them is thread-safe (plain integers).
"""

from __future__ import annotations

from typing import Any

from framework.metrics import Metric, counter


def idempotency_families(middleware: Any) -> list[Metric]:
    """The families of one ``IdempotencyMiddleware``."""
    stats = middleware.stats
    guard = middleware.guard
    unavailable = 0 if guard is None else guard.stats.unavailable
    return [
        counter("postbox_idempotency_processed", "Messages an idempotent handler processed "
                "(its transaction committed).", [], [((), stats.processed)]),
        counter("postbox_idempotency_duplicates", "Duplicate deliveries rejected, by what "
                "decided.", ["decided_by"], [(("redis",), stats.duplicates_by_redis),
                                              (("database",), stats.duplicates_by_database)]),
        counter("postbox_idempotency_redis_fast_path_hits", "Duplicates rejected on the fast "
                "path: Redis held the mark, one database read confirmed.", [],
                [((), stats.duplicates_by_redis)]),
        counter("postbox_idempotency_database_fallbacks", "Messages the database decided "
                "alone because Redis could not.", ["reason"],
                [(("redis_unavailable",), unavailable), (("mark_held",), stats.taken_over)]),
        counter("postbox_idempotency_database_errors", "Messages retried because the database "
                "failed while deciding them.", [], [((), stats.database_errors)]),
    ]


__all__ = ["idempotency_families"]
