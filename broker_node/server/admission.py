"""Who gets a connection: ``Admission`` applies the connection bounds of ``ServerLimits``, and
``ThrottledLog`` keeps a flood of refusals (or of failed accepts) to one log line per interval.

Three bounds, checked in order when a connection is accepted:

1. ``max_connections``: the hard cap on open connections;
2. ``max_connections_per_peer``: open connections from one source IP;
3. ``reserved_connections``: the last slots under the cap are kept for **proven** peers — a
   source IP from which a request has passed the access check (with ACL: a signed request of a
   known key; without ACL: any well-formed request). A flood of sockets from addresses that
   never sent a whole request cannot take those slots, so a client that was served before the
   flood can still reconnect. Half of them (``probation_slots``) also take peers not proven yet
   **on probation**: such a connection must send, as its first frame and within the frame
   deadline of connecting, a request that passes the access check (a new client signing with
   its ACL key), else it is closed (the server enforces this; ``Session.probation``).

Proven peers are remembered in a bounded LRU (``PROVEN_PEERS_MAX`` addresses); ``ProvingAccess``
wraps the server's access control to mark a session proven. ``Admission`` is used by the
server's IO thread only: not thread-safe.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any

PROVEN_PEERS_MAX = 4096


class Admission:
    """Open connections per source IP, proven peers, and the accept decision."""

    def __init__(self, max_connections: int, max_per_peer: int, reserved: int) -> None:
        self._max, self._max_per_peer, self._reserved = max_connections, max_per_peer, reserved
        self._by_host: Counter[str] = Counter()
        self._proven: OrderedDict[str, None] = OrderedDict()
        self.open = 0
        self.on_probation = 0
        self.probation_slots = reserved // 2

    def refusal(self, host: str) -> tuple[str, str] | None:
        """Why a new connection from ``host`` is refused: (the bound's setting, a sentence
        naming it), or None."""
        if self.open >= self._max:
            return "max_connections", (
                f"{self.open} connections open, the most ServerLimits.max_connections "
                "(remotingMaxConnections) allows")
        if self._by_host[host] >= self._max_per_peer:
            return "max_connections_per_peer", (
                f"{self._by_host[host]} connections open from {host}, the most "
                "ServerLimits.max_connections_per_peer (remotingMaxConnectionsPerPeer) allows")
        if (self.open >= self._max - self._reserved and not self.is_proven(host)
                and self.on_probation >= self.probation_slots):
            return "reserved_connections", (
                f"{self.open} connections open; the last {self._reserved} are kept for peers "
                "already served (ServerLimits.reserved_connections, "
                "remotingReservedConnections)")
        return None

    def must_prove(self, host: str) -> bool:
        """Whether a connection ``refusal`` lets in from ``host`` comes on probation (it takes
        a reserved slot and its address is not proven)."""
        return self.open >= self._max - self._reserved and not self.is_proven(host)

    def opened(self, host: str, probation: bool = False) -> None:
        """Count a connection accepted from ``host`` (on probation or not)."""
        self.open += 1
        self._by_host[host] += 1
        self.on_probation += probation

    def end_probation(self) -> None:
        """A connection on probation proved itself, or closed."""
        self.on_probation -= 1

    def closed(self, host: str) -> None:
        """Count a connection from ``host`` closed."""
        self.open -= 1
        self._by_host[host] -= 1
        if self._by_host[host] <= 0:
            del self._by_host[host]

    def prove(self, host: str) -> None:
        """Remember ``host`` as a peer that was served."""
        self._proven[host] = None
        self._proven.move_to_end(host)
        if len(self._proven) > PROVEN_PEERS_MAX:
            self._proven.popitem(last=False)

    def is_proven(self, host: str) -> bool:
        """Whether ``host`` was served before."""
        return host in self._proven


class ThrottledLog:
    """At most one warning per ``interval_s`` for one kind of event; the next line says how
    many were left out."""

    def __init__(self, logger: logging.Logger, interval_s: float) -> None:
        self._log, self._interval_s = logger, interval_s
        self._next = 0.0
        self._skipped = 0

    def warning(self, message: str, *args: object) -> None:
        """Log ``message % args`` unless one was logged less than ``interval_s`` ago."""
        now = time.monotonic()
        if now < self._next:
            self._skipped += 1
            return
        skipped, self._skipped, self._next = self._skipped, 0, now + self._interval_s
        suffix = f" ({skipped} more like it since the last line)" if skipped else ""
        self._log.warning(message + suffix, *args)


class ProvingAccess:
    """The server's access control (``current()``: read at each call, tests and admin replace
    it), marking the session proven when a request passes it."""

    def __init__(self, current: Callable[[], Any]) -> None:
        self._current = current

    def check(self, request: Any, session: Any) -> object:
        """``current().check``; the session is proven when it returns."""
        result = self._current().check(request, session)
        session.proven = True
        return result
