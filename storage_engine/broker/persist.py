"""``BrokerPersistService``: writes the broker's in-memory tables on RocketMQ's schedule.

Reference §9.3: consumer offsets every ``broker.consumer_offset_persist_interval_ms`` (5 s),
delay offsets every ``broker.delay_offset_persist_interval_ms`` (10 s), each first one interval
after start; topics and subscription groups are written by the broker right after each change
and everything once more at close. The same loop expires consumers whose heartbeats stopped
(``expire_consumers(now_ms)``, which notifies membership listeners) about once a second.

Out of file descriptors, a persist that cannot open its temporary file writes nothing and is
retried on its next interval (``Service.retries_out_of_descriptors``); the service keeps running.

Crash behaviour: committed offsets younger than the last persist are lost with the process, so
consumers re-read a few seconds of messages after a crash (at-least-once, as in RocketMQ).

Thread-safety: ``run_once`` may be called from the service thread and from tests at once; the
schedule is kept under a lock and each table serializes its own persists.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..clock import Clock
from ..config import BrokerConfig
from ..service import Service
from .config_stores import ConfigStores

log = logging.getLogger(__name__)

EXPIRY_CHECK_INTERVAL_MS = 1000


class BrokerPersistService(Service):
    """Periodic persist of consumer and delay offsets, plus consumer expiry."""

    name = "broker-persist"
    retries_out_of_descriptors = True  # a table that cannot open its temp file writes nothing

    def __init__(self, config_stores: ConfigStores, config: BrokerConfig, clock: Clock,
                 expire_consumers: Callable[[int], int]) -> None:
        super().__init__(clock)
        self._tables = config_stores
        self._config = config
        self._expire_consumers = expire_consumers
        self.interval_ms = min(config.consumer_offset_persist_interval_ms,
                               config.delay_offset_persist_interval_ms,
                               EXPIRY_CHECK_INTERVAL_MS)
        self._schedule_lock = threading.Lock()
        now_ms = clock.now_ms()
        self._next_offsets_ms = now_ms + config.consumer_offset_persist_interval_ms
        self._next_delay_ms = now_ms + config.delay_offset_persist_interval_ms
        self.persist_count = 0

    def run_once(self, now_ms: int) -> int:
        """Persist whatever is due and expire stale consumers; return how much was done."""
        done = 0
        if self._due("_next_offsets_ms", self._config.consumer_offset_persist_interval_ms,
                     now_ms):
            self._tables.consumer_offsets.persist()
            done += 1
        if self._due("_next_delay_ms", self._config.delay_offset_persist_interval_ms, now_ms):
            self._tables.delay_offsets.persist()
            done += 1
        self.persist_count += done
        self._expire_consumers(now_ms)  # not counted as work: the loop then sleeps an interval
        return done

    def _due(self, attribute: str, interval_ms: int, now_ms: int) -> bool:
        """Whether the persist named by ``attribute`` is due; if so, schedule the next one."""
        with self._schedule_lock:
            if now_ms < getattr(self, attribute):
                return False
            setattr(self, attribute, now_ms + interval_ms)
            return True


__all__ = ["BrokerPersistService", "EXPIRY_CHECK_INTERVAL_MS"]
