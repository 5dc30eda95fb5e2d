"""``HASlaveClient``: a slave's connection to its master (reference §14.1), with reconnects.

Loop (``run_once``, one bounded step at a time): connect to ``ha.master_address`` and report the
log end (8 bytes); then receive frames and append each body at its start position
(``CommitLog.append_replicated``), report the new log end after every batch of frames applied,
and at least every ``ha.heartbeat_interval_ms``. A frame whose start is not this log's end
(unless the log is empty) breaks the protocol: the connection is closed and the client
reconnects after ``reconnect_delay_ms``, reporting its end again so the master restarts from
there. A master silent for ``ha.housekeeping_interval_ms`` (it sends heartbeats when idle) is
disconnected the same way; so is one that closes or cannot be reached.

After each batch of frames is applied and reported, ``on_applied`` runs (the store wakes its
dispatch and flusher: the slave's own dispatch builds its consume queues and key index from the
copied bytes).

Thread-safety: runs on its service thread; ``status`` may be read from any thread. What
survives a crash: the copied bytes, as for any store (the slave's flush mode applies); recovery
truncates a torn or partial tail and the client resumes from the recovered end. An error that
puts the store into fail-stop ends the loop (the service failure is logged).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

from ..clock import Clock
from ..config import HAConfig
from ..errors import ReplicationError, StorageError, StoreNotWritableError
from ..service import Service
from .log_port import ReplicatedLog
from .protocol import FrameDecoder, encode_report

log = logging.getLogger(__name__)

RECEIVE_BYTES_MAX = 256 * 1024
CONNECT_TIMEOUT_MS = 3_000


class HASlaveClient(Service):
    """Copies the master's commit log into this store's."""

    name = "ha-slave"
    interval_ms = 50  # between reconnect checks while disconnected
    reconnect_delay_ms = 1_000

    def __init__(self, commit_log: ReplicatedLog, config: HAConfig, clock: Clock,
                 on_applied: Callable[[], None]) -> None:
        super().__init__(clock)
        self._commit_log = commit_log
        self._config = config
        self._master = config.master_host_port
        self._on_applied = on_applied
        self._sock: socket.socket | None = None
        self._decoder: FrameDecoder | None = None
        self._closing = False
        self._next_connect_ms = 0
        self._last_read_ms = 0
        self._last_report_ms = 0
        self.connect_count = 0
        self.applied_bytes = 0
        self.last_frame_ms: int | None = None
        self.last_error = ""

    # ---- the loop ----------------------------------------------------------------------------

    def run_once(self, now_ms: int) -> int:
        """Connect when due, else receive and apply what arrived (one socket read)."""
        if self._sock is None:
            if self._closing or now_ms < self._next_connect_ms:
                return 0
            return 1 if self._connect(now_ms) else 0
        return self._receive(now_ms)

    def _connect(self, now_ms: int) -> bool:
        assert self._master is not None  # the store runs a slave client only with a master
        try:
            sock = socket.create_connection(self._master, timeout=CONNECT_TIMEOUT_MS / 1000)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as error:
            self._disconnect(f"cannot connect to master {self._config.master_address}: {error}",
                             quiet=self.last_error.startswith("cannot connect"))
            return False
        self._sock = sock
        self._decoder = FrameDecoder(self._commit_log.config.segment_size_bytes)
        self._last_read_ms = now_ms
        self.connect_count += 1
        self.last_error = ""
        log.info("[ha] slave connected to master %s, log ends at position=%d",
                 self._config.master_address, self._commit_log.max_position)
        return self._report(now_ms)

    def _receive(self, now_ms: int) -> int:
        config = self._config
        silent_ms = now_ms - self._last_read_ms
        if silent_ms >= config.housekeeping_interval_ms:
            self._disconnect(f"master silent for {silent_ms} ms")
            return 0
        wait_ms = min(self._last_report_ms + config.heartbeat_interval_ms,
                      self._last_read_ms + config.housekeeping_interval_ms) - now_ms
        if wait_ms <= 0:
            return 1 if self._report(now_ms) else 0
        sock = self._sock
        assert sock is not None  # run_once connects first
        try:
            sock.settimeout(wait_ms / 1000)
            data = sock.recv(RECEIVE_BYTES_MAX)
        except TimeoutError:
            return 1
        except OSError as error:
            self._disconnect(f"receive failed: {error}")
            return 0
        if not data:
            self._disconnect("closed by the master")
            return 0
        now_ms = self._last_read_ms = self.clock.now_ms()
        try:
            applied = self._apply_all(data)
        except (ReplicationError, ValueError) as error:
            self._disconnect(f"protocol error: {error}")
            return 0
        except StoreNotWritableError:
            self._disconnect("the store stopped accepting writes")
            raise
        except StorageError as error:  # e.g. no room for a new segment: try again later
            log.error("[ha] cannot apply data from the master: %s", error)
            self._disconnect(f"apply failed: {error}")
            return 0
        if applied:
            self.last_frame_ms = now_ms
            reported = self._report(now_ms)
            self._on_applied()  # after the report: a SYNC_MASTER put is waiting for it
            return 1 if reported else 0
        return 1

    def _apply_all(self, data: bytes) -> bool:
        """Apply every frame completed by ``data``; True when bytes were appended."""
        applied = False
        assert self._decoder is not None  # made on connecting
        for start, body in self._decoder.feed(data):
            applied = self.apply_frame(start, body) or applied
        return applied

    def apply_frame(self, start_position: int, body: bytes) -> bool:
        """Append one frame's body (reference §14.1 rule); True when bytes were appended.

        The caller runs ``on_applied`` once its batch of frames is applied and reported.

        Raises:
            ReplicationError: ``start_position`` is not this log's end (and the log is not
                empty).
        """
        end = self._commit_log.max_position
        if end != 0 and start_position != end:
            raise ReplicationError(f"frame at position={start_position} but this slave's log "
                                   f"ends at {end}", log_position=start_position)
        if not body:
            return False  # heartbeat
        self._commit_log.append_replicated(start_position, body)
        self.applied_bytes += len(body)
        return True

    def _report(self, now_ms: int) -> bool:
        """Send the log end to the master; False (disconnected) when that failed."""
        assert self._sock is not None  # reports go over a connection
        try:
            self._sock.sendall(encode_report(self._commit_log.max_position))
        except OSError as error:
            self._disconnect(f"report failed: {error}")
            return False
        self._last_report_ms = now_ms
        return True

    def _disconnect(self, reason: str, *, quiet: bool = False) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        self._decoder = None
        self._next_connect_ms = self.clock.now_ms() + self.reconnect_delay_ms
        self.last_error = reason
        if not self._closing:
            (log.debug if quiet else log.warning)(
                "[ha] slave: %s; reconnecting in %d ms", reason, self.reconnect_delay_ms)

    # ---- lifecycle and state -----------------------------------------------------------------

    def stop(self, timeout_ms: int = 10_000) -> None:
        """Close the connection and stop the loop."""
        self._closing = True
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        super().stop(timeout_ms)
        if self._sock is not None:
            self._disconnect("slave stopping")

    @property
    def connected(self) -> bool:
        """Whether a connection to the master is up."""
        return self._sock is not None

    def status(self) -> dict:
        """JSON-able state of the replication from the slave's side."""
        return {"master_address": self._config.master_address, "connected": self.connected,
                "connect_count": self.connect_count, "applied_bytes": self.applied_bytes,
                "last_frame_ms": self.last_frame_ms, "last_error": self.last_error}
