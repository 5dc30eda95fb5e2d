"""One TCP connection to a name server or a broker, and the set of them a client keeps.

``Connection`` carries many calls at once (pipelined): the caller's thread encodes and writes
its frame (under a send lock, so frames never interleave), and one reader thread per socket
decodes the answers and completes the matching pending call. Pending calls are keyed by an
opaque unique **per connection** and removed atomically (under the connection's lock) by
whichever comes first: the answer, the caller's timeout, or the socket's failure — so a late
answer after a timeout is dropped, never delivered to another call (reference §9.1).

Requests the peer sends us (a broker's NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE,
GET_CONSUMER_RUNNING_INFO, ...) are handed to ``on_request(command, connection)`` on a separate
worker thread (never on the reader, which must keep reading answers); a request that expects an
answer gets what the handler returns, or REQUEST_CODE_NOT_SUPPORTED when it returns None, or
SYSTEM_ERROR when it raises. Oneway requests are never answered (reference §9.2).

Failures: a socket error, a malformed frame (``WireError``: a header nested too deeply
included) or any other failure reading an answer closes that socket and fails every call
pending on it with ``ConnectionClosedError`` (the reader never dies leaving calls to time out);
the next call opens a new socket (reconnect on demand, no background thread). ``close()`` is
final.

Thread safety: every public method may be called from any thread.
"""

from __future__ import annotations

import itertools
import logging
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import replace

from ..protocol.codes import FLAG_ONEWAY, ResponseCode
from ..protocol.wire import (
    DEFAULT_LIMITS,
    FrameDecoder,
    FrameLimits,
    RemotingCommand,
    WireError,
    encode,
)
from .errors import (
    ConnectFailedError,
    ConnectionClosedError,
    RemotingClientError,
    RemotingTimeoutError,
)

log = logging.getLogger(__name__)

RequestHandler = Callable[[RemotingCommand, "Connection"], RemotingCommand | None]
BeforeSend = Callable[[RemotingCommand], RemotingCommand]
_READ_BYTES = 256 * 1024
_MAX_OPAQUE = 2**31 - 1


def split_address(address: str) -> tuple[str, int]:
    """``(host, port)`` of ``host:port`` (``[v6]:port`` too); ``ValueError`` when malformed."""
    host, sep, port_text = address.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"address {address!r} is not host:port")
    return host, int(port_text)


class PendingCall:
    """A call waiting for its answer; ``opaque`` is its key on the connection.

    The part of ``concurrent.futures.Future`` a call needs, lighter (two plain locks, no
    condition, no waiter lock per wait: every send and pull makes one): completed once (the
    first outcome wins), ``result(timeout)`` waits, and a callback runs on the thread that
    completes the call (the connection's reader) or at once when the call is already done.
    """

    __slots__ = ("_answer", "_callbacks", "_done", "_error", "_finished", "_guard", "opaque")

    def __init__(self, opaque: int) -> None:
        self.opaque = opaque
        self._answer: RemotingCommand | None = None
        self._error: BaseException | None = None
        self._finished = False
        self._callbacks: list[Callable[[PendingCall], object]] = []
        self._guard = threading.Lock()  # the outcome and the callbacks
        self._done = threading.Lock()  # held until the outcome is set
        self._done.acquire()

    def set_result(self, answer: RemotingCommand) -> None:
        """Complete with the peer's answer (ignored when already complete)."""
        self._complete(answer, None)

    def set_exception(self, error: BaseException) -> None:
        """Complete with a failure (ignored when already complete)."""
        self._complete(None, error)

    def _complete(self, answer: RemotingCommand | None, error: BaseException | None) -> None:
        with self._guard:
            if self._finished:
                return
            self._answer, self._error, self._finished = answer, error, True
            callbacks, self._callbacks = self._callbacks, []
        self._done.release()
        for callback in callbacks:
            self._run(callback)

    def _run(self, callback: Callable[[PendingCall], object]) -> None:
        try:
            callback(self)
        except Exception:  # as Future does: one failing callback does not stop the others
            log.exception("remoting call %d: a completion callback failed", self.opaque)

    def add_done_callback(self, callback: Callable[[PendingCall], object]) -> None:
        """Call ``callback(self)`` once complete (now, when it already is)."""
        with self._guard:
            if not self._finished:
                self._callbacks.append(callback)
                return
        self._run(callback)

    def done(self) -> bool:
        """Whether the call is complete."""
        return self._finished

    def result(self, timeout: float | None = None) -> RemotingCommand:
        """The answer, waiting up to ``timeout`` seconds (None: no limit).

        Raises:
            TimeoutError: not complete in time (``concurrent.futures.TimeoutError``).
            Exception: the failure the call completed with.
        """
        if not self._finished:
            if not self._done.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
                raise FutureTimeoutError(f"remoting call {self.opaque} is not answered yet")
            self._done.release()  # open for every other waiter
        if self._error is not None:
            raise self._error
        assert self._answer is not None
        return self._answer


class Connection:
    """One TCP connection; see the module docstring."""

    def __init__(self, address: str, *, limits: FrameLimits = DEFAULT_LIMITS,
                 on_request: RequestHandler | None = None, connect_timeout_ms: int = 3000,
                 before_send: BeforeSend | None = None) -> None:
        self._host, self._port = split_address(address)
        self.address = address
        self._limits = limits
        self._on_request = on_request
        self._before_send = before_send
        self._connect_timeout_ms = connect_timeout_ms
        self._lock = threading.Lock()  # socket, pending, closed
        self._send_lock = threading.Lock()
        self._open_lock = threading.Lock()  # one connect at a time
        self._socket: socket.socket | None = None
        self._pending: dict[int, PendingCall] = {}
        self._closed = False
        self._opaques = itertools.count(1)
        self._readers: list[threading.Thread] = []
        self._worker: ThreadPoolExecutor | None = None

    # -- calls ---------------------------------------------------------------------------

    def call(self, command: RemotingCommand, timeout_ms: int) -> RemotingCommand:
        """Send ``command`` and wait for its answer (any response code is returned)."""
        pending = self.call_async(command)
        try:
            return pending.result(timeout=timeout_ms / 1000)
        except FutureTimeoutError:
            if self.forget(pending):
                raise RemotingTimeoutError(
                    f"no answer to request code {command.code} from {self.address} within "
                    f"{timeout_ms} ms", address=self.address) from None
            return pending.result()  # the answer won the race against the timeout

    def call_async(self, command: RemotingCommand) -> PendingCall:
        """Send ``command``; the returned future completes with its answer (or an error).

        The connection sets the command's opaque (its key here): build a new command for each
        call, never send one object twice at once. A caller that stops waiting must call
        ``forget(future)`` so the entry does not stay.
        """
        opaque = next(self._opaques) % _MAX_OPAQUE
        command.opaque, command.flag = opaque, command.flag & ~FLAG_ONEWAY
        frame = self._frame(command)
        pending = PendingCall(opaque)
        sock = self._open()
        with self._lock:
            if self._socket is not sock:
                pending.set_exception(self._closed_error("closed before the request was sent"))
                return pending
            self._pending[opaque] = pending
        try:
            self._write(sock, frame)
        except ConnectionClosedError:
            pass  # the failure already completed ``pending`` with the error
        return pending

    def forget(self, pending: PendingCall) -> bool:
        """Stop waiting for ``pending``; False when its answer already arrived."""
        with self._lock:
            return self._pending.pop(pending.opaque, None) is not None

    def oneway(self, command: RemotingCommand) -> None:
        """Send ``command`` with the oneway flag; nothing comes back."""
        command.opaque = next(self._opaques) % _MAX_OPAQUE
        command.flag |= FLAG_ONEWAY
        frame = self._frame(command)
        self._write(self._open(), frame)

    def respond(self, answer: RemotingCommand) -> None:
        """Write the answer to a request the peer sent (its opaque already set)."""
        self._write(self._open(), encode(answer))

    def _frame(self, command: RemotingCommand) -> bytes:
        if self._before_send is not None:  # on a copy: the caller may send it again
            command = self._before_send(replace(command, ext_fields=dict(command.ext_fields)))
        frame = encode(command)
        if len(frame) - 4 > self._limits.max_frame_bytes:
            raise RemotingClientError(
                f"request code {command.code} is a frame of {len(frame) - 4} bytes, over the "
                f"limit of {self._limits.max_frame_bytes}")
        return frame

    def _write(self, sock: socket.socket, frame: bytes) -> None:
        try:
            with self._send_lock:
                sock.sendall(frame)
        except OSError as error:
            self._fail(sock, f"write failed: {error}")
            raise self._closed_error(f"write failed: {error}") from error

    # -- socket lifecycle ----------------------------------------------------------------

    def _open(self) -> socket.socket:
        sock = self._socket
        if sock is not None:
            return sock
        with self._open_lock:
            with self._lock:
                if self._closed:
                    raise self._closed_error("the connection is closed")
                if self._socket is not None:
                    return self._socket
            try:
                sock = socket.create_connection((self._host, self._port),
                                                timeout=self._connect_timeout_ms / 1000)
            except OSError as error:
                raise ConnectFailedError(f"cannot connect to {self.address}: {error}",
                                            address=self.address) from error
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            reader = threading.Thread(target=self._read_loop, args=(sock,), daemon=True,
                                      name=f"remoting-reader-{self.address}")
            with self._lock:
                if self._closed:
                    sock.close()
                    raise self._closed_error("the connection is closed")
                self._socket = sock
                self._readers = [thread for thread in self._readers if thread.is_alive()]
                self._readers.append(reader)
            reader.start()
            return sock

    def _read_loop(self, sock: socket.socket) -> None:
        decoder = FrameDecoder(self._limits)
        reason = "closed by the peer"
        buffer = bytearray(_READ_BYTES)  # one buffer: a fresh 256 KiB bytes per recv costs
        view = memoryview(buffer)  # an mmap, page faults and a munmap every time
        try:
            while True:
                size = sock.recv_into(buffer)
                if not size:
                    break
                for command in decoder.feed(view[:size]):
                    self._dispatch(command)
        except WireError as error:
            reason = f"malformed frame: {error}"
            log.warning("remoting connection to %s: %s", self.address, reason)
        except OSError as error:
            reason = f"read failed: {error}"
        except Exception as error:  # never a dead reader with calls left waiting forever
            reason = f"reading an answer failed: {type(error).__name__}: {error}"
            log.exception("remoting connection to %s: %s", self.address, reason)
        self._fail(sock, reason)

    def _dispatch(self, command: RemotingCommand) -> None:
        if command.is_response:
            with self._lock:
                pending = self._pending.pop(command.opaque, None)
            if pending is not None:
                pending.set_result(command)
            return
        with self._lock:
            if self._closed:
                return
            if self._worker is None:
                self._worker = ThreadPoolExecutor(
                    1, thread_name_prefix=f"remoting-requests-{self.address}")
            worker = self._worker
        try:
            worker.submit(self._serve, command)
        except RuntimeError:  # shut down by a concurrent close(): the request is moot
            log.debug("remoting request %d from %s dropped: closing", command.code,
                      self.address)

    def _serve(self, request: RemotingCommand) -> None:
        answer: RemotingCommand | None = None
        try:
            if self._on_request is not None:
                answer = self._on_request(request, self)
        except Exception as error:  # a handler's failure is the peer's answer, not ours
            log.exception("remoting request %d from %s failed", request.code, self.address)
            answer = request.response(ResponseCode.SYSTEM_ERROR, remark=str(error)[:512])
        if request.is_oneway:
            return
        if answer is None:
            answer = request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                                      remark=f" request type {request.code} not supported")
        try:
            self.respond(answer)
        except RemotingClientError as error:
            log.info("answer to request %d not sent to %s: %s", request.code, self.address,
                     error)

    def _fail(self, sock: socket.socket, reason: str) -> None:
        with self._lock:
            if self._socket is not sock:
                return
            self._socket = None
            pending, self._pending = self._pending, {}
        _close_socket(sock)
        error = self._closed_error(reason)
        for call in pending.values():
            call.set_exception(error)

    def _closed_error(self, reason: str) -> ConnectionClosedError:
        return ConnectionClosedError(f"connection to {self.address}: {reason}",
                                     address=self.address)

    @property
    def is_open(self) -> bool:
        """Whether a socket is currently connected (a call reconnects when not)."""
        return self._socket is not None

    def local_address(self) -> tuple[str, int] | None:
        """This side's ``(ip, port)`` of the current socket, None when not connected."""
        sock = self._socket
        try:
            return sock.getsockname()[:2] if sock is not None else None
        except OSError:
            return None

    def close(self) -> None:
        """Close the socket, fail pending calls, stop the threads. Final."""
        with self._lock:
            self._closed = True
            sock, worker, readers = self._socket, self._worker, list(self._readers)
        if sock is not None:
            self._fail(sock, "the connection is closed")
        for reader in readers:
            if reader is not threading.current_thread():
                reader.join(timeout=5)
        if worker is not None:
            worker.shutdown(wait=False, cancel_futures=True)


def _close_socket(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class Connections:
    """One ``Connection`` per address, opened on first use and closed together.

    Requests from peers go to the handler registered for their code (``add_handler``); an
    unhandled code is answered REQUEST_CODE_NOT_SUPPORTED. ``before_send`` (ACL signing) is
    applied to every outgoing request.
    """

    def __init__(self, *, limits: FrameLimits = DEFAULT_LIMITS, connect_timeout_ms: int = 3000,
                 before_send: BeforeSend | None = None) -> None:
        self._limits = limits
        self._connect_timeout_ms = connect_timeout_ms
        self._before_send = before_send
        self._lock = threading.Lock()
        self._connections: dict[str, Connection] = {}
        self._handlers: dict[int, RequestHandler] = {}
        self._closed = False

    def add_handler(self, code: int, handler: RequestHandler) -> None:
        """Serve peer requests with ``code`` by ``handler(command, connection)``."""
        with self._lock:
            self._handlers[int(code)] = handler

    def _on_request(self, command: RemotingCommand, connection: Connection
                    ) -> RemotingCommand | None:
        handler = self._handlers.get(command.code)
        return None if handler is None else handler(command, connection)

    def get(self, address: str) -> Connection:
        """The connection to ``address`` (created, not yet connected, on first use)."""
        connection = self._connections.get(address)
        if connection is not None:
            return connection
        with self._lock:
            if self._closed:
                raise ConnectionClosedError("the client is closed", address=address)
            connection = self._connections.get(address)
            if connection is None:
                connection = Connection(address, limits=self._limits,
                                        on_request=self._on_request,
                                        connect_timeout_ms=self._connect_timeout_ms,
                                        before_send=self._before_send)
                self._connections[address] = connection
            return connection

    def call(self, address: str, command: RemotingCommand, timeout_ms: int) -> RemotingCommand:
        """``get(address).call(command, timeout_ms)``."""
        return self.get(address).call(command, timeout_ms)

    def sibling(self) -> Connections:
        """A new, empty set with the same limits, connect timeout, signer and peer handlers
        (its own sockets: RocketMQ's brokers tell consumers apart by connection)."""
        other = Connections(limits=self._limits, connect_timeout_ms=self._connect_timeout_ms,
                            before_send=self._before_send)
        with self._lock:
            other._handlers = dict(self._handlers)
        return other

    def addresses(self) -> list[str]:
        """Addresses with a connection object."""
        with self._lock:
            return list(self._connections)

    def close(self) -> None:
        """Close every connection; later ``get`` calls fail."""
        with self._lock:
            self._closed = True
            connections = list(self._connections.values())
            self._connections.clear()
        for connection in connections:
            connection.close()
