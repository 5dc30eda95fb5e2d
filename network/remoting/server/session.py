"""``Session``: one client connection of the remoting server, as handlers see it.

A session knows its peer (address, the language and version its requests declare, the client
id a heartbeat named), writes frames to the peer (``send_response``, ``send_oneway``) and makes
broker → client calls (``call``: a request with a fresh opaque, answered by a response the IO
thread matches by opaque on this connection only).

Writing: frames are appended to one outgoing buffer under the session's lock. On the server's IO
thread nothing is written at once: the IO loop flushes every session's buffer once per round,
so all the responses of one read leave in one ``send``. From any other thread (a worker, the
long-polling service, a membership notification) the bytes go out at once when the buffer is
empty, and what the socket does not take waits for the IO thread (``wants_write``).

Thread-safety: every public method may be called from any thread. ``closed`` becomes true once
and stays so; a closed session drops writes and fails pending calls with ``SessionClosedError``.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ..wire import RemotingCommand, encode, next_opaque
from .errors import CallTimeoutError, SessionClosedError

log = logging.getLogger(__name__)


class _PendingCall:
    __slots__ = ("event", "response")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.response: RemotingCommand | None = None


class Session:
    """One connection. Created by the server; handlers receive it with each request."""

    def __init__(self, sock: socket.socket, peer_address: str,
                 on_pending_write: Callable[[Session], None],
                 is_io_thread: Callable[[], bool]) -> None:
        self.sock = sock
        self.peer_address = peer_address
        self.language = "OTHER"
        self.version = 0
        self.client_id: str | None = None
        self.attributes: dict[str, Any] = {}  # handlers' per-connection state (e.g. groups)
        self.last_read = time.monotonic()  # when the peer last sent bytes (idle expiry)
        self._lock = threading.Lock()
        self._out = bytearray()
        self._on_pending_write = on_pending_write
        self._is_io_thread = is_io_thread
        self._pending: dict[int, _PendingCall] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"Session({self.peer_address}, client_id={self.client_id!r})"

    @property
    def closed(self) -> bool:
        """Whether the connection is closed."""
        return self._closed

    # ---- writing -----------------------------------------------------------------------------

    def send_response(self, response: RemotingCommand) -> None:
        """Write a response (or any command) to the peer; dropped when the session is closed."""
        self.write(encode(response))

    def send_oneway(self, command: RemotingCommand) -> None:
        """Write a broker → client oneway request (flag bit 1 is set here)."""
        command.flag |= 0x2
        if not command.opaque:
            command.opaque = next_opaque()
        self.write(encode(command))

    def call(self, command: RemotingCommand, timeout_ms: int) -> RemotingCommand:
        """A broker → client request answered by the client: its response.

        Raises:
            CallTimeoutError: no answer within ``timeout_ms``.
            SessionClosedError: the connection is (or gets) closed.
        """
        if self._is_io_thread():
            raise RuntimeError("Session.call would block the IO thread; call it from a worker")
        command.opaque = next_opaque()
        command.flag &= ~0x3
        pending = _PendingCall()
        with self._lock:
            if self._closed:
                raise SessionClosedError(f"connection to {self.peer_address} is closed")
            self._pending[command.opaque] = pending
        try:
            self.write(encode(command))
            if not pending.event.wait(timeout_ms / 1000):
                raise CallTimeoutError(f"{self.peer_address} did not answer request code "
                                       f"{command.code} within {timeout_ms} ms")
        finally:
            with self._lock:
                self._pending.pop(command.opaque, None)
        if pending.response is None:
            raise SessionClosedError(f"connection to {self.peer_address} closed during a call")
        return pending.response

    def write(self, frame: bytes) -> None:
        """Queue (IO thread) or write (other threads) one encoded frame."""
        with self._lock:
            if self._closed:
                return
            if self._out or self._is_io_thread():
                was_empty = not self._out
                self._out += frame
                if not was_empty:
                    return  # already known to the IO thread
            else:
                try:
                    sent = self.sock.send(frame)
                except (BlockingIOError, InterruptedError):
                    sent = 0
                except OSError:
                    sent = len(frame)  # the IO thread sees the broken socket and closes it
                if sent == len(frame):
                    return
                self._out += memoryview(frame)[sent:]
        self._on_pending_write(self)

    # ---- for the server's IO thread ----------------------------------------------------------

    def flush(self) -> bool:
        """Write what the socket takes; True when the buffer is empty afterwards.

        Raises:
            OSError: the connection is broken.
        """
        with self._lock:
            if not self._out:
                return True
            try:
                sent = self.sock.send(self._out)
            except (BlockingIOError, InterruptedError):
                return False
            del self._out[:sent]
            return not self._out

    @property
    def buffered_bytes(self) -> int:
        """Bytes written but not yet taken by the socket."""
        return len(self._out)

    def take_response(self, response: RemotingCommand) -> bool:
        """Hand a response to the ``call`` waiting for its opaque; False if none waits."""
        with self._lock:
            pending = self._pending.get(response.opaque)
        if pending is None:
            return False
        pending.response = response
        pending.event.set()
        return True

    def mark_closed(self) -> bool:
        """Close the session once (True the first time): pending calls fail, writes drop."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
            pending = list(self._pending.values())
            self._out.clear()
        for call in pending:
            call.event.set()
        try:
            self.sock.close()
        except OSError:
            pass
        return True
