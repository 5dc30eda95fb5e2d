"""``HAMasterService``: a master's HA port — accepts slaves, feeds them, counts their acks.

The service thread accepts connections on ``ha.ha_listen`` (port 0: any free port, published
in ``listen_address``) and starts one ``SlaveConnection`` per slave. The put path calls
``notify_appended`` after every append so the writers send at once, and a SYNC_MASTER put asks
``slave_available`` and then ``wait_acked`` (``PositionWaiters``: one heap pop per released put).

A slave is *available* (RocketMQ's ``isSlaveOK``) when at least one connection is past its first
report and the highest acknowledged position is within ``ha.slave_fall_behind_max_bytes`` of the
master's log end.

Thread-safety: every public method may be called from any thread; the connection list is
replaced, never mutated in place, so the put path reads it without a lock. Failure of this
service never stops writes (it is not a durability path): SYNC_MASTER puts then report
``SLAVE_NOT_AVAILABLE``.
"""

from __future__ import annotations

import logging
import socket
import threading
from typing import Self

from ..clock import Clock
from ..config import HAConfig
from ..errors import StorageIOError
from ..group_commit import PositionWaiters
from ..service import Service
from .connection import SlaveConnection
from .log_port import ReplicatedLog

log = logging.getLogger(__name__)

ACCEPT_POLL_MS = 100
LISTEN_BACKLOG = 16


class HAMasterService(Service):
    """Listens for slaves and streams the commit log to them."""

    name = "ha-master"
    interval_ms = 1

    def __init__(self, commit_log: ReplicatedLog, config: HAConfig, clock: Clock) -> None:
        super().__init__(clock)
        self._commit_log = commit_log
        self._config = config
        self.acks = PositionWaiters()
        self.connections: tuple[SlaveConnection, ...] = ()
        self._connections_lock = threading.Lock()
        self._closed: list[SlaveConnection] = []
        self._listener: socket.socket | None = None
        self.listen_address: tuple[str, int] | None = None
        """Where the service listens (the real port when ``ha_listen`` asked for 0)."""

    def start(self) -> Self:
        """Bind the listening socket, then start accepting; returns the service."""
        if self._listener is None:
            assert self._config.listen_address is not None  # the store starts it for ha_listen
            host, port = self._config.listen_address
            listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            try:
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                listener.bind((host, port))
                listener.listen(LISTEN_BACKLOG)
            except OSError as error:
                listener.close()
                raise StorageIOError(f"cannot listen for slaves on {host}:{port} "
                                     f"(ha.ha_listen / haListenPort): {error}") from error
            listener.settimeout(ACCEPT_POLL_MS / 1000)
            self._listener = listener
            self.listen_address = listener.getsockname()[:2]
            log.info("[ha] master listening for slaves on %s:%d", *self.listen_address)
        return super().start()

    def run_once(self, now_ms: int) -> int:
        """Accept at most one slave (waiting up to ``ACCEPT_POLL_MS``); reap closed ones."""
        self._reap()
        assert self._listener is not None  # bound by start()
        try:
            sock, address = self._listener.accept()
        except TimeoutError:
            return 0
        except OSError:
            if self._stopping.is_set():
                return 0
            raise
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = f"{address[0]}:{address[1]}"
        connection = SlaveConnection(sock, peer, self._commit_log, self._config, self.acks,
                                     self.clock, self._on_closed)
        with self._connections_lock:
            self.connections = (*self.connections, connection)
        log.info("[ha] slave %s connected", peer)
        connection.start()
        return 1

    def _on_closed(self, connection: SlaveConnection) -> None:
        with self._connections_lock:
            self.connections = tuple(c for c in self.connections if c is not connection)
            self._closed.append(connection)

    def _reap(self) -> None:
        """Join the threads of connections that closed."""
        with self._connections_lock:
            closed, self._closed = self._closed, []
        for connection in closed:
            connection.join()

    def stop(self, timeout_ms: int = 10_000) -> None:
        """Stop accepting, close every connection, wake every waiting put."""
        super().stop(timeout_ms)
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for connection in self.connections:
            connection.close("master stopping")
        self._reap()
        self.acks.release_all()

    # ---- the put path ------------------------------------------------------------------------

    def notify_appended(self, *, push: bool = False) -> None:
        """The log grew: wake every connection's writer, or (``push``, SYNC_MASTER puts) let
        the calling thread send the new frames itself where that cannot block."""
        for connection in self.connections:
            if push:
                connection.push()
            else:
                connection.notify_data()

    def slave_available(self, master_end: int) -> bool:
        """Whether a SYNC_MASTER put should wait for a slave (RocketMQ ``isSlaveOK``)."""
        if not any(c.is_ready for c in self.connections):
            return False
        return master_end - self.acks.position < self._config.slave_fall_behind_max_bytes

    def wait_acked(self, position: int, timeout_ms: int) -> bool:
        """Block until a slave acknowledged ``position``; False after ``timeout_ms``."""
        return self.acks.wait(position, timeout_ms)

    def status(self) -> dict:
        """JSON-able state: listen address, slaves and their acknowledged positions."""
        address = self.listen_address
        return {"ha_listen": None if address is None else f"{address[0]}:{address[1]}",
                "acked_position": self.acks.position,
                "waiting_puts": self.acks.waiting_count,
                "slaves": [c.status() for c in self.connections if c.is_ready]}
