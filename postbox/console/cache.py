"""Figures that take long to compute (aggregates over a million outbox stubs, a large
``classification.csv``), kept for a while and computed again in the background.

``Recent.get(key, compute)`` answers the kept value while it is younger than the refresh
interval, or ``REFRESH_FACTOR`` times as long as computing it took when that is longer (so the
console never spends most of its time recomputing); an older value is still answered while a
background thread computes the new one. Only the first read of a key waits for ``compute``.
``clear`` (after every write) makes the next read compute afresh, so a page shows its write.
At most ``KEYS_MAX`` keys are kept (the least recently computed go first).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

REFRESH_FACTOR = 10.0
KEYS_MAX = 32


@dataclasses.dataclass
class Entry:
    """One kept value."""

    value: Any
    computed_at: float
    duration_s: float
    refreshing: bool = False


class Recent:
    """Kept values by key (see the module's doc)."""

    def __init__(self, max_age_s: float) -> None:
        self._max_age_s = max_age_s
        self._lock = threading.Lock()
        self._entries: dict[Hashable, Entry] = {}
        self._generation = 0

    def get(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The kept value of ``key`` (computed now when there is none)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                age = time.monotonic() - entry.computed_at
                if not entry.refreshing and age > max(self._max_age_s,
                                                      REFRESH_FACTOR * entry.duration_s):
                    entry.refreshing = True
                    threading.Thread(target=self._compute, args=(key, compute, self._generation),
                                     name="postbox-console-refresh", daemon=True).start()
                return entry.value
            generation = self._generation
        return self._compute(key, compute, generation)

    def _compute(self, key: Hashable, compute: Callable[[], Any], generation: int) -> Any:
        started = time.monotonic()
        try:
            value = compute()
        except BaseException:
            with self._lock:
                self._entries.pop(key, None)
            raise
        now = time.monotonic()
        with self._lock:
            if generation == self._generation:  # not computed across a write
                self._entries.pop(key, None)
                self._entries[key] = Entry(value, now, now - started)
                while len(self._entries) > KEYS_MAX:
                    del self._entries[next(iter(self._entries))]
        return value

    def clear(self) -> None:
        """Forget every kept value (after a write)."""
        with self._lock:
            self._entries.clear()
            self._generation += 1
