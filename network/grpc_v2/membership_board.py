"""``MembershipBoard``: a version number per consumer group, bumped whenever the group's
members change, that remote clients long-poll to hear of rebalances.

The service registers ``on_change`` as the broker's membership listener. A client watches the
groups it has members in by sending the versions it knows; ``wait`` returns as soon as one of
them differs (or at the timeout, or when ``cancel()`` turns true, checked at least every
``CANCEL_CHECK_INTERVAL_MS``). ``epoch`` is random per board: a client that sees another epoch
knows the broker restarted and every version it held is meaningless.

Thread-safety: every method may be called from any thread (one condition). Nothing survives a
restart (membership does not either).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Mapping

CANCEL_CHECK_INTERVAL_MS = 100


class MembershipBoard:
    """{group: version} with waiters."""

    def __init__(self) -> None:
        self.epoch = secrets.token_hex(8)
        self._condition = threading.Condition()
        self._versions: dict[str, int] = {}

    def on_change(self, group: str) -> None:
        """Broker membership listener: bump ``group``'s version and wake the watchers."""
        with self._condition:
            self._versions[group] = self._versions.get(group, 0) + 1
            self._condition.notify_all()

    def version(self, group: str) -> int:
        """The group's current version (0 before its first change)."""
        with self._condition:
            return self._versions.get(group, 0)

    def wait(self, known: Mapping[str, int], timeout_ms: int,
             cancel: Callable[[], bool] | None = None) -> dict[str, int]:
        """Block until some group's version differs from ``known`` (at most ``timeout_ms``);
        return the current version of every group in ``known``."""
        deadline_s = time.monotonic() + max(0, timeout_ms) / 1000
        with self._condition:
            while True:
                current = {group: self._versions.get(group, 0) for group in known}
                if current != dict(known) or (cancel is not None and cancel()):
                    return current
                remaining_s = deadline_s - time.monotonic()
                if remaining_s <= 0:
                    return current
                self._condition.wait(min(remaining_s, CANCEL_CHECK_INTERVAL_MS / 1000))


__all__ = ["MembershipBoard"]
