"""``ServerLimits``: every bound of one remoting server (connections, frames, in flight, idle),
validated on creation. ``docs/remoting.md`` (Limits) names the broker.conf key of each; the
server (``server.py``) and its admission (``admission.py``) enforce them."""

from __future__ import annotations

from dataclasses import dataclass, field

from postbox.network.protocol.wire import DEFAULT_LIMITS, FrameLimits


@dataclass(frozen=True)
class ServerLimits:
    """Bounds of one server (DESIGN §9: every request is bounded). ``docs/remoting.md``
    (Limits) names the broker.conf key of each."""

    frame: FrameLimits = field(default_factory=lambda: DEFAULT_LIMITS)
    max_connections: int = 1024
    max_connections_per_peer: int = 128
    """Open connections from one source IP address."""
    reserved_connections: int = 64
    """The last slots under ``max_connections``, kept for peers already served; half of them
    also take new peers on probation (their first request must pass the access check)."""
    probation_timeout_ms: int = 5_000
    """A connection on probation must send its first whole frame within this time."""
    frame_read_timeout_ms: int = 30_000
    """A frame must arrive whole within this time of its first byte, however slowly its bytes
    trickle in (a connection that sends nothing is ``idle_timeout_ms``'s)."""
    workers: int = 4
    queue_max: int = 4096
    max_output_bytes: int = 16 * 1024 * 1024
    """Unsent answers of one connection past which the server stops reading from it."""
    max_owed_answers: int = 1024
    """Requests of one connection read and not yet answered (on a worker, or a parked long
    poll) past which the server stops reading from it."""
    idle_timeout_ms: int = 120_000
    """A connection that sends nothing for this long is closed (RocketMQ's broker closes
    channels idle for 120 s; clients send a heartbeat every 30 s)."""

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_connections_per_peer", "frame_read_timeout_ms",
                     "probation_timeout_ms",
                     "workers", "queue_max", "max_output_bytes", "max_owed_answers",
                     "idle_timeout_ms"):
            if getattr(self, name) < 1:
                raise ValueError(f"ServerLimits.{name} must be at least 1")
        if not 0 <= self.reserved_connections < self.max_connections:
            raise ValueError("ServerLimits.reserved_connections must be at least 0 and under "
                             "max_connections")
