"""``ClientSessions``: what the server knows about each connected RocketMQ client.

Keyed by the ``x-mq-client-id`` metadata of its calls: client type, consumer group and
subscribed topics (from the settings it sends on the Telemetry stream), and when it was last
heard from (any call). A client is *alive* while it was heard from within ``alive_ms``
(clients heartbeat every 10 s) and has not sent ``NotifyClientTermination``; the lease expiry
renews a push consumer's leases only while it is alive.

Limits: at most ``session_count_max`` sessions; when full, sessions not heard from within
``alive_ms`` are dropped first, and a new client beyond that is not tracked (it still works,
its leases are simply not auto-renewed).

Thread-safety: every method may be called from any thread (one lock). Nothing survives a
restart: clients re-send their settings when their stream reconnects.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

SESSION_COUNT_MAX = 100_000
ALIVE_MS = 60_000


@dataclass
class ClientSession:
    """One client as last described by its calls."""

    client_id: str
    last_seen_ms: int
    client_type: int = 0
    group: str | None = None
    topics: tuple[str, ...] = field(default_factory=tuple)


class ClientSessions:
    """The table of client sessions."""

    def __init__(self, *, alive_ms: int = ALIVE_MS,
                 session_count_max: int = SESSION_COUNT_MAX) -> None:
        self.alive_ms = alive_ms
        self._session_count_max = session_count_max
        self._lock = threading.Lock()
        self._sessions: dict[str, ClientSession] = {}

    def touch(self, client_id: str | None, now_ms: int) -> None:
        """Record that ``client_id`` made a call."""
        if client_id is None:
            return
        with self._lock:
            session = self._sessions.get(client_id)
            if session is not None:
                session.last_seen_ms = now_ms
            elif self._make_room(now_ms):
                self._sessions[client_id] = ClientSession(client_id, now_ms)

    def describe(self, client_id: str, now_ms: int, *, client_type: int, group: str | None,
                 topics: tuple[str, ...]) -> None:
        """Record a client's settings (sent on its Telemetry stream)."""
        with self._lock:
            if client_id not in self._sessions and not self._make_room(now_ms):
                return
            self._sessions[client_id] = ClientSession(client_id, now_ms, client_type, group,
                                                      topics)

    def topics(self, client_id: str) -> tuple[str, ...]:
        """Topics the client subscribes to (as its settings said), or ()."""
        with self._lock:
            session = self._sessions.get(client_id)
            return session.topics if session is not None else ()

    def terminate(self, client_id: str) -> None:
        """Forget a client that said goodbye."""
        with self._lock:
            self._sessions.pop(client_id, None)

    def is_alive(self, client_id: str, now_ms: int) -> bool:
        """Heard from within ``alive_ms`` and not terminated."""
        with self._lock:
            session = self._sessions.get(client_id)
            return session is not None and now_ms - session.last_seen_ms <= self.alive_ms

    def count(self) -> int:
        """How many sessions are tracked."""
        with self._lock:
            return len(self._sessions)

    def _make_room(self, now_ms: int) -> bool:
        """Whether one more session fits (dropping silent ones first); lock held."""
        if len(self._sessions) < self._session_count_max:
            return True
        silent = [client_id for client_id, session in self._sessions.items()
                  if now_ms - session.last_seen_ms > self.alive_ms]
        for client_id in silent:
            del self._sessions[client_id]
        return len(self._sessions) < self._session_count_max


__all__ = ["ALIVE_MS", "ClientSession", "ClientSessions"]
