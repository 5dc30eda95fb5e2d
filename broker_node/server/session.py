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

Answers owed: the server counts the requests it has read and not answered at once
(``expect_answer``: a request on a worker, a parked long poll) until their answer is written by
``send_response`` (or ``answer_settled`` for one that gets none). ``hold_reading``
tells the server whether the connection has too much in flight (owed answers, unsent output) to
read more; settling an answer wakes the server when it is holding.

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

from postbox.network.protocol.codes import FLAG_RESPONSE, ResponseCode
from postbox.network.protocol.wire import RemotingCommand, encode, next_opaque

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
                 is_io_thread: Callable[[], bool], peer_host: str = "") -> None:
        self.sock = sock
        self.peer_address = peer_address
        self.peer_host = peer_host or peer_address.rpartition(":")[0]
        self.proven = False  # a request of this connection passed the access check
        self.probation = False  # its first request must pass the access check (Admission)
        self.frame_started: float | None = None  # when the unfinished frame's first byte came
        self.holding = False  # the server stopped reading: too much in flight (IO thread sets)
        self.watched_events = 0  # the selector events the IO thread registered (0: none)
        self._owed = 0  # requests read and not yet answered
        self.language = "OTHER"
        self.version = 0
        self.client_id: str | None = None
        self.attributes: dict[str, Any] = {}  # handlers' per-connection state (e.g. groups)
        self.last_read = time.monotonic()  # when the peer last sent bytes (idle expiry)
        self.last_sent = self.last_read  # since when unsent output waits, or last went out
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
        """Write the answer to a request read earlier (``expect_answer``); dropped when the
        session is closed. An answer that cannot be encoded is sent as 1 SYSTEM_ERROR."""
        self.write(encode_answer(response))
        self.answer_settled()

    def expect_answer(self) -> None:
        """Count a request read from this connection as owed an answer."""
        with self._lock:
            self._owed += 1

    def answer_settled(self) -> None:
        """One owed answer is written (or none is due); wakes a holding server."""
        with self._lock:  # may go below 0 for a moment: a parked pull answered before the
            self._owed -= 1  # IO thread counted it (``expect_answer`` after the handler)
            wake = self.holding
        if wake:
            self._on_pending_write(self)

    @property
    def owed_answers(self) -> int:
        """Requests read and not yet answered."""
        return self._owed

    def hold_reading(self, max_output_bytes: int, max_owed_answers: int) -> bool:
        """Whether reading must wait (sets ``holding``): over ``max_output_bytes`` unsent, or
        ``max_owed_answers`` requests not yet answered."""
        if not self.holding and len(self._out) <= max_output_bytes \
                and self._owed < max_owed_answers:
            return False  # the common case, without the lock: only the IO thread sets holding
        with self._lock:
            self.holding = (len(self._out) > max_output_bytes
                            or self._owed >= max_owed_answers)
            return self.holding

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
                self.last_sent = time.monotonic()  # output waits from now
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
                self.last_sent = time.monotonic()
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
            if sent:
                self.last_sent = time.monotonic()
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


def encode_answer(response: RemotingCommand) -> bytes:
    """``response`` encoded; one that cannot be (a header past the 24-bit length) becomes a
    1 SYSTEM_ERROR with its opaque, so the request still ends with an answer."""
    try:
        return encode(response)
    except Exception as error:
        log.error("[remoting] answer code %d opaque %d cannot be encoded: %s", response.code,
                  response.opaque, error)
        return encode(RemotingCommand(
            code=ResponseCode.SYSTEM_ERROR, opaque=response.opaque, flag=FLAG_RESPONSE,
            remark=f"the answer cannot be encoded: {type(error).__name__}",
            version=response.version))
