"""The idempotency middleware's metric families (added to its app's scrape by
``IdempotencyMiddleware.metric_families``; ``framework.metrics`` explains the collection).

How each message was decided, per consumer group (label ``group``), from ``IdempotencyStats``:
- the Redis fast path: a duplicate rejected because Redis held its mark and one database read
  found it processed (``redis_fast_path_hits``);
- database fallbacks: Redis could not decide and the database transaction did — Redis
  unavailable or failing (``reason="redis_unavailable"``), or its mark held by an attempt that
  had not finished the message (``reason="mark_held"``);
- duplicates, by what rejected them (``decided_by="redis"`` or ``"database"``).
A group appears once the middleware has decided a message of it, or from the start for the
groups of the app's ``idempotent=True`` handlers (``from_app``). Counters since the middleware
was made; reading them is thread-safe (plain integers; a group added during a scrape waits for
the next one).
"""

from __future__ import annotations

from typing import Any

from postbox.framework.metrics import Metric, counter


def idempotency_families(middleware: Any) -> list[Metric]:
    """The families of one ``IdempotencyMiddleware``, one sample set per consumer group."""
    groups = sorted(dict(middleware.stats.by_group).items())
    return [
        counter("postbox_idempotency_processed", "Messages an idempotent handler processed "
                "(its transaction committed).", ["group"],
                [((group,), counts.processed) for group, counts in groups]),
        counter("postbox_idempotency_duplicates", "Duplicate deliveries rejected, by what "
                "decided.", ["group", "decided_by"],
                [sample for group, counts in groups
                 for sample in (((group, "redis"), counts.duplicates_by_redis),
                                ((group, "database"), counts.duplicates_by_database))]),
        counter("postbox_idempotency_redis_fast_path_hits", "Duplicates rejected on the fast "
                "path: Redis held the mark, one database read confirmed.", ["group"],
                [((group,), counts.duplicates_by_redis) for group, counts in groups]),
        counter("postbox_idempotency_database_fallbacks", "Messages the database decided "
                "alone because Redis could not.", ["group", "reason"],
                [sample for group, counts in groups
                 for sample in (((group, "redis_unavailable"), counts.redis_unavailable),
                                ((group, "mark_held"), counts.taken_over))]),
        counter("postbox_idempotency_database_errors", "Messages retried because the database "
                "failed while deciding them.", ["group"],
                [((group,), counts.database_errors) for group, counts in groups]),
    ]


__all__ = ["idempotency_families"]
