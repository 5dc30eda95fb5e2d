"""``QueueLockTable``: which client of a group may consume each queue in order.

RocketMQ's ``RebalanceLockManager`` (reference §10.5): an orderly consumer locks the queues it
was allocated before consuming them and renews the locks periodically (every 20 s on the
client). A lock is held by (group, client id) and lapses ``expiry_ms`` after its last renewal
(``broker.queue_lock_expiry_ms``, RocketMQ's 60 s); a lapsed lock may be taken by anyone, a live
one only renewed by its owner. Postbox also releases a client's locks when it leaves its group
(unregistered or expired), so a successor need not wait for the lapse.

Thread-safety: every method may be called from any thread (one lock). Locks live in memory only;
after a restart every client re-locks on its next rebalance.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from ..contract.rules import QueueKey, validate_queue_key


class QueueLockTable:
    """{group: {queue: (client id, last renewal ms)}}."""

    def __init__(self, expiry_ms: int) -> None:
        self._expiry_ms = expiry_ms
        self._lock = threading.Lock()
        self._locks: dict[str, dict[QueueKey, tuple[str, int]]] = {}

    def lock(self, group: str, client_id: str, queues: Iterable[QueueKey],
             now_ms: int) -> set[QueueKey]:
        """Lock or renew each queue for ``client_id``; return the ones it now holds."""
        keys = [validate_queue_key(queue) for queue in queues]
        granted: set[QueueKey] = set()
        with self._lock:
            table = self._locks.setdefault(group, {})
            for key in keys:
                holder = table.get(key)
                if holder is None or holder[0] == client_id or self._lapsed(holder, now_ms):
                    table[key] = (client_id, now_ms)
                    granted.add(key)
            if not table:
                del self._locks[group]
        return granted

    def unlock(self, group: str, client_id: str, queues: Iterable[QueueKey]) -> None:
        """Release the given queues where ``client_id`` holds them (others are untouched)."""
        keys = [validate_queue_key(queue) for queue in queues]
        with self._lock:
            table = self._locks.get(group, {})
            for key in keys:
                holder = table.get(key)
                if holder is not None and holder[0] == client_id:
                    del table[key]
            if not table:
                self._locks.pop(group, None)

    def release_client(self, group: str, client_id: str) -> int:
        """Release every lock ``client_id`` holds in ``group``; return how many."""
        with self._lock:
            table = self._locks.get(group, {})
            mine = [key for key, holder in table.items() if holder[0] == client_id]
            for key in mine:
                del table[key]
            if not table:
                self._locks.pop(group, None)
        return len(mine)

    def holder(self, group: str, queue: QueueKey, now_ms: int) -> str | None:
        """The client holding a live lock on ``queue`` in ``group``, or None."""
        with self._lock:
            holder = self._locks.get(group, {}).get(queue)
            if holder is None or self._lapsed(holder, now_ms):
                return None
            return holder[0]

    def _lapsed(self, holder: tuple[str, int], now_ms: int) -> bool:
        return now_ms - holder[1] > self._expiry_ms


__all__ = ["QueueKey", "QueueLockTable", "validate_queue_key"]
