"""``SlaveConnection``: the master's side of one slave connection (reference §14.1).

Two threads per connection, as RocketMQ's HAConnection:

- the **reader** takes the slave's 8-byte reports. The first one is the slave's log end and
  decides where the transfer starts (``transfer_start``: an empty slave gets the master's last
  segment from its start); every report is also an acknowledgement, handed to ``PositionWaiters``.
- the **writer** sends frames of raw log bytes from the transfer position: at most
  ``ha.transfer_batch_bytes`` each, never past the end of the segment that holds their start,
  as soon as the put path signals new data (``notify_data``), and an empty heartbeat frame
  after ``ha.heartbeat_interval_ms`` without data.

A SYNC_MASTER put may instead send the new frames itself (``push``), saving the hand-over to
the writer thread: only when no one else is sending and the socket is writable, and without
ever blocking (what the socket does not take at once is left to the writer, which sends it
before anything else). Sends are serialised by one lock, so frames never interleave.

The socket's timeout is ``ha.housekeeping_interval_ms``: a slave silent that long (no report,
not even a heartbeat) or not reading that long is disconnected. A slave that asks for a position
the master no longer has (retention deleted it) or has not written (the logs diverged) is
refused with an error in the log: it needs an operator (docs/replication.md).

Thread-safety: ``notify_data``, ``close`` and the read-only attributes may be used from any
thread. Nothing is written to disk here; a connection does not survive a restart.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
from collections.abc import Callable

from ..clock import Clock
from ..config import HAConfig
from ..group_commit import PositionWaiters
from .log_port import ReplicatedLog
from .protocol import (
    ReportDecoder,
    encode_frame_header,
    frame_body_size,
    transfer_start,
)

log = logging.getLogger(__name__)

RECEIVE_BYTES_MAX = 4096


class SlaveConnection:
    """One connected slave."""

    def __init__(self, sock: socket.socket, peer: str, commit_log: ReplicatedLog, config: HAConfig,
                 acks: PositionWaiters, clock: Clock,
                 on_closed: Callable[[SlaveConnection], None]) -> None:
        self.peer = peer
        self._sock = sock
        self._commit_log = commit_log
        self._config = config
        self._acks = acks
        self._clock = clock
        self._on_closed = on_closed
        self.request_position: int | None = None  # the slave's first report
        self.acked_position = 0
        self.transfer_position: int | None = None  # next log byte to send (under _send_lock)
        self._send_lock = threading.Lock()
        self._unsent = b""  # the rest of a frame ``push`` sent in part (under _send_lock)
        self._last_sent_ms = 0
        self.connected_ms = clock.now_ms()
        self._ready = threading.Event()  # first report received (or closed)
        self._data = threading.Event()  # the put path wrote something
        self._closed = threading.Event()
        self._close_lock = threading.Lock()
        self.close_reason = ""
        sock.settimeout(config.housekeeping_interval_ms / 1000)
        self._threads = [
            threading.Thread(target=self._read_loop, name=f"postbox-ha-read-{peer}"),
            threading.Thread(target=self._write_loop, name=f"postbox-ha-write-{peer}"),
        ]

    def start(self) -> None:
        """Start the reader and writer threads."""
        for thread in self._threads:
            thread.start()

    @property
    def is_open(self) -> bool:
        """Whether the connection is still up."""
        return not self._closed.is_set()

    @property
    def is_ready(self) -> bool:
        """Open and past the slave's first report (it can acknowledge puts)."""
        return self.request_position is not None and not self._closed.is_set()

    def notify_data(self) -> None:
        """New bytes were appended to the log: wake the writer."""
        self._data.set()

    def push(self) -> None:
        """Send what is new from the calling thread (SYNC put path) if that cannot block;
        otherwise wake the writer."""
        if (self.transfer_position is None or self._unsent
                or not self._send_lock.acquire(blocking=False)):
            self._data.set()
            return
        try:
            while not self._unsent and self._send_frame(blocking=False):
                pass
        except (OSError, ValueError) as error:
            self.close(f"send failed: {error}")
        finally:
            self._send_lock.release()
        if self._unsent:
            self._data.set()

    def close(self, reason: str) -> None:
        """Shut the socket down (both threads then end); idempotent."""
        with self._close_lock:
            if self._closed.is_set():
                return
            self._closed.set()
            self.close_reason = reason
        log.info("[ha] connection to slave %s closed: %s (acked position=%d)", self.peer,
                 reason, self.acked_position)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._ready.set()
        self._data.set()
        self._on_closed(self)

    def join(self, timeout_ms: int = 5_000) -> None:
        """Wait for both threads (after ``close``) and release the socket."""
        for thread in self._threads:
            if thread.ident is not None:
                thread.join(timeout_ms / 1000)
        self._sock.close()

    def status(self) -> dict:
        """JSON-able state of this connection."""
        return {"address": self.peer, "acked_position": self.acked_position,
                "transfer_position": self.transfer_position,
                "behind_bytes": max(0, self._commit_log.max_position - self.acked_position)}

    # ---- reader ------------------------------------------------------------------------------

    def _read_loop(self) -> None:
        decoder = ReportDecoder()
        try:
            while not self._closed.is_set():
                data = self._sock.recv(RECEIVE_BYTES_MAX)
                if not data:
                    self.close("closed by the slave")
                    return
                position = decoder.feed(data)
                if position is not None:
                    self._on_report(position)
        except TimeoutError:
            self.close(f"slave silent for {self._config.housekeeping_interval_ms} ms")
        except OSError as error:
            self.close(f"read failed: {error}")

    def _on_report(self, position: int) -> None:
        self.acked_position = position
        if self.request_position is None:
            self.request_position = position
            self._ready.set()
        # Only bytes the master has can be acknowledged (a diverged slave is refused below).
        self._acks.advance(min(position, self._commit_log.max_position))

    # ---- writer ------------------------------------------------------------------------------

    def _write_loop(self) -> None:
        try:
            self._ready.wait()
            if self._closed.is_set():
                return
            position = self._first_position()
            if position is None:
                return
            self._stream_from(position)
        except (OSError, ValueError) as error:  # ValueError: a segment unmapped by retention
            self.close(f"send failed: {error}")

    def _first_position(self) -> int | None:
        commit_log = self._commit_log
        master_end = commit_log.max_position
        assert self.request_position is not None  # the writer waits for the first report
        position = transfer_start(self.request_position, master_end,
                                  commit_log.config.segment_size_bytes)
        if position > master_end:
            log.error("[ha] slave %s reports position=%d beyond this master's log end %d: the "
                      "logs diverged; rebuild the slave (docs/replication.md)", self.peer,
                      position, master_end)
            self.close("slave ahead of the master")
            return None
        if position < commit_log.min_position:
            log.error("[ha] slave %s needs position=%d but this master's log starts at %d "
                      "(retention deleted it); rebuild the slave (docs/replication.md)",
                      self.peer, position, commit_log.min_position)
            self.close("slave behind the master's first segment")
            return None
        log.info("[ha] slave %s reported position=%d: transfer starts at %d", self.peer,
                 self.request_position, position)
        return position

    def _stream_from(self, position: int) -> None:
        heartbeat_ms = self._config.heartbeat_interval_ms
        clock = self._clock
        self._last_sent_ms = clock.now_ms()
        with self._send_lock:
            self.transfer_position = position
        while not self._closed.is_set():
            self._data.clear()  # before looking: an append after this sets it again
            with self._send_lock:
                if self._unsent:
                    self._sock.sendall(self._unsent)
                    self._unsent = b""
                sent = self._send_frame(blocking=True)
                idle_ms = clock.now_ms() - self._last_sent_ms
                if not sent and idle_ms >= heartbeat_ms:
                    self._sock.sendall(encode_frame_header(self.transfer_position, 0))
                    self._last_sent_ms = clock.now_ms()
                    continue
            if not sent:
                self._data.wait((heartbeat_ms - idle_ms) / 1000)

    def _send_frame(self, *, blocking: bool) -> int:
        """Send one frame from ``transfer_position`` (caller holds ``_send_lock``); returns
        its body size (0: nothing new, or the socket cannot take data without blocking).

        Not blocking, a frame the socket takes only in part leaves the rest in ``_unsent``.
        """
        position = self.transfer_position
        assert position is not None  # set before the first frame
        commit_log = self._commit_log
        if position >= commit_log.max_position:
            return 0
        segment = commit_log.segments.find(position)
        if segment is None:
            raise ValueError(f"position={position} is no longer in the log "
                             f"(starts at {commit_log.min_position})")
        size = frame_body_size(position, segment.base_position, segment.written_position,
                               self._config.transfer_batch_bytes)
        if not size:
            return 0
        offset = position - segment.base_position
        frame = encode_frame_header(position, size) + segment.buffer[offset:offset + size]
        if blocking:
            self._sock.sendall(frame)
        else:
            if not select.select((), (self._sock,), (), 0)[1]:
                return 0
            sent = self._sock.send(frame)  # writable: takes what fits, never waits
            self._unsent = frame[sent:]
        self.transfer_position = position + size
        self._last_sent_ms = self._clock.now_ms()
        return size
