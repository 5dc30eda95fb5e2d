"""The Redis fast path: an advisory "someone has this message" mark per (group, message id).

``acquire`` is one atomic ``SET key token NX PX ttl`` (never SETNX then EXPIRE, which leaves
immortal keys when the second call is lost). The token is unique per attempt, so ``release``
(after a failed handler) and ``mark_done`` (after a commit) are compare-and-act scripts that
touch the key only while it still holds our token: an attempt whose mark expired and was taken
over can never delete or overwrite its successor's.

``acquire_many`` and ``settle`` do the same for many messages in one round trip each (a
non-transactional pipeline: every command still stands alone, as a single call would);
``acquire_many`` can carry earlier attempts' settlements in the same round trip.

The mark is a hint and nothing more. A Redis error is never read as "duplicate": it answers
``UNAVAILABLE`` and the caller decides on the database alone. After an error Redis is left alone
for ``retry_after_error_ms`` so a dead server costs one failed call per interval rather than one
per message; the first success afterwards is logged as the fast path resuming.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import redis

log = logging.getLogger(__name__)

_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) " \
    "end return 0"
_MARK_DONE = "if redis.call('get', KEYS[1]) == ARGV[1] then " \
    "return redis.call('set', KEYS[1], 'done:' .. ARGV[1], 'PX', ARGV[2]) end return 0"


class GuardState(enum.Enum):
    """What ``acquire`` found."""

    ACQUIRED = "acquired"
    HELD = "held"
    """Another attempt (live, finished, or dead with its mark not yet expired) set the key."""
    UNAVAILABLE = "unavailable"


class Mark(NamedTuple):
    """One attempt's mark: the key's (group, message id) and the attempt's token."""

    consumer_group: str
    message_id: str
    token: str


class Settlement(NamedTuple):
    """What becomes of a mark after its attempt: ``done`` → ``mark_done``, else ``release``."""

    mark: Mark
    done: bool


@dataclass
class GuardStats:
    """Counters and ``acquire`` latencies (seconds) since the guard was made."""

    acquired: int = 0
    held: int = 0
    unavailable: int = 0
    errors: int = 0
    acquire_latencies_s: list[float] = field(default_factory=list)
    max_latency_samples: int = 100_000


class RedisGuard:
    """Advisory per-message marks in Redis.

    Args:
        client: a ``redis.Redis`` (or a function returning one, called on first use).
        ttl_ms: life of an in-progress mark: longer than a handler normally runs. If a mark
            expires while its handler still runs, a second attempt may start; the database
            check still stops it from committing a second effect.
        done_ttl_ms: life of the mark after a commit (duplicates seen within it cost one
            database read, not a transaction).
    """

    def __init__(self, client: redis.Redis | Callable[[], redis.Redis], *,
                 ttl_ms: int = 60_000, done_ttl_ms: int = 24 * 3_600_000,
                 key_prefix: str = "postbox:idem:", retry_after_error_ms: int = 1_000,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._client_source = client
        self._client: redis.Redis | None = client if isinstance(client, redis.Redis) else None
        self.ttl_ms = ttl_ms
        self.done_ttl_ms = done_ttl_ms
        self.key_prefix = key_prefix
        self.retry_after_error_ms = retry_after_error_ms
        self._monotonic = monotonic
        self._down_until_s = 0.0
        self._down = False
        self._lock = threading.Lock()
        self.stats = GuardStats()

    def key(self, consumer_group: str, message_id: str) -> str:
        """The Redis key of (group, message id); the group's length keeps the pair unambiguous."""
        return f"{self.key_prefix}{len(consumer_group)}:{consumer_group}:{message_id}"

    def acquire(self, consumer_group: str, message_id: str, token: str) -> GuardState:
        """``SET key token NX PX ttl``: ACQUIRED, HELD, or UNAVAILABLE on any Redis error."""
        return self.acquire_many([Mark(consumer_group, message_id, token)])[0]

    def acquire_many(self, attempts: Sequence[Mark], *,
                     settling: Sequence[Settlement] = ()) -> list[GuardState]:
        """``acquire`` for each of ``attempts`` in one round trip, which also carries
        ``settling`` (see ``settle``) ahead of them; every latency sample is that round trip
        (each message waited for it)."""
        if self._skipping():
            self.stats.unavailable += len(attempts)
            return [GuardState.UNAVAILABLE] * len(attempts)
        started = time.perf_counter()
        try:
            pipeline = self._redis().pipeline(transaction=False)
            self._queue_settlements(pipeline, settling)
            for mark in attempts:
                pipeline.set(self.key(mark.consumer_group, mark.message_id), mark.token,
                             nx=True, px=self.ttl_ms)
            created = pipeline.execute()[len(settling):]
        except redis.RedisError as error:
            self._failed(error)
            self.stats.unavailable += len(attempts)
            return [GuardState.UNAVAILABLE] * len(attempts)
        latency_s = time.perf_counter() - started
        states = [GuardState.ACQUIRED if ok else GuardState.HELD for ok in created]
        for state in states:
            self._succeeded(latency_s)
            if state is GuardState.ACQUIRED:
                self.stats.acquired += 1
            else:
                self.stats.held += 1
        return states

    def settle(self, settling: Sequence[Settlement]) -> None:
        """``mark_done`` (``done``) or ``release`` each mark of ``settling``, in one round
        trip."""
        if not settling or self._skipping():
            return
        try:
            pipeline = self._redis().pipeline(transaction=False)
            self._queue_settlements(pipeline, settling)
            pipeline.execute()
        except redis.RedisError as error:
            self._failed(error)

    def _queue_settlements(self, pipeline: redis.client.Pipeline,
                           settling: Sequence[Settlement]) -> None:
        for mark, done in settling:
            key = self.key(mark.consumer_group, mark.message_id)
            if done:
                pipeline.eval(_MARK_DONE, 1, key, mark.token, self.done_ttl_ms)
            else:
                pipeline.eval(_RELEASE, 1, key, mark.token)

    def release(self, consumer_group: str, message_id: str, token: str) -> None:
        """Delete the mark if it is still ours (after a failed attempt)."""
        self._run(_RELEASE, consumer_group, message_id, token)

    def mark_done(self, consumer_group: str, message_id: str, token: str) -> None:
        """Turn our in-progress mark into a "done" mark that lives ``done_ttl_ms``."""
        self._run(_MARK_DONE, consumer_group, message_id, token, self.done_ttl_ms)

    def close(self) -> None:
        """Close the connection pool (reopened on next use)."""
        client, self._client = self._client, None
        if client is not None and not isinstance(self._client_source, redis.Redis):
            client.close()

    def _run(self, script: str, consumer_group: str, message_id: str,
             *args: str | int) -> None:
        if self._skipping():
            return
        try:
            self._redis().eval(script, 1, self.key(consumer_group, message_id), *args)
        except redis.RedisError as error:
            self._failed(error)

    def _redis(self) -> redis.Redis:
        if self._client is None:
            source = self._client_source
            self._client = source if isinstance(source, redis.Redis) else source()
        return self._client

    def _skipping(self) -> bool:
        return self._down and self._monotonic() < self._down_until_s

    def _failed(self, error: Exception) -> None:
        with self._lock:
            self.stats.errors += 1
            if not self._down:
                log.warning("Redis is unavailable (%s): idempotency continues on the database "
                            "alone, retrying Redis every %d ms", error, self.retry_after_error_ms)
            self._down = True
            self._down_until_s = self._monotonic() + self.retry_after_error_ms / 1000

    def _succeeded(self, latency_s: float) -> None:
        if len(self.stats.acquire_latencies_s) < self.stats.max_latency_samples:
            self.stats.acquire_latencies_s.append(latency_s)
        if self._down:
            with self._lock:
                if self._down:
                    self._down = False
                    log.warning("Redis is reachable again: the idempotency fast path resumed")


__all__ = ["GuardState", "GuardStats", "Mark", "RedisGuard", "Settlement"]
