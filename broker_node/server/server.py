"""``RemotingServer``: the TCP server of the remoting protocol (name server and broker alike).

Threading model:

* **One IO thread** (``selectors``) owns the listening socket and every connection: it accepts,
  reads, decodes frames (``wire.FrameDecoder``, bounded by ``ServerLimits.frame``), and writes.
  The frames of one read are handled back to back, at most ``FRAMES_PER_ROUND_MAX`` of one
  connection per round (the rest wait in its buffer, unread further, for the next round: a peer
  pipelining thousands of requests cannot make the others, or the listener, wait behind it), and
  a connection whose request its lane refused (OVERLOAD) is not read for ``OVERLOAD_PAUSE_S``
  (backpressure, not decode-and-refuse); *inline* handlers (cheap, non-blocking:
  sends on an asynchronously flushed store, pulls that do not wait, offsets, heartbeats) run
  right there, and their responses collect in each connection's buffer, flushed once at the
  end of the round: one ``send`` for all the answers of one read, no thread hand-off.
* **Small worker pools**, one per lane (``workers.WorkerLanes``: sends, client heartbeats,
  queries and administration; each ``workers`` threads, at most ``queue_max`` queued requests,
  else 2 SYSTEM_BUSY) run the other handlers, each on its code's lane (``HandlerTable.lane``),
  so a flood of one kind cannot starve another; a worker writes its answer straight to the
  socket.
* **Nothing waits on a thread**: a long-polled pull is parked by its handler (the broker's
  ``PullHoldService``) and answered later from whichever thread sees the message arrive or the
  suspend time pass.

Bounds (``ServerLimits``; ``docs/remoting.md``, Limits): frame and header sizes
(``FrameLimits``); connections in all, per source address and the slots kept for peers already
served (``admission.Admission``: the one refused is closed at once); a frame must arrive whole
within ``frame_read_timeout_ms`` of its first byte; queued work. Frames are decoded and handled
**one at a time**: past ``max_output_bytes`` of unsent answers or ``max_owed_answers`` requests
not yet answered (on a worker, or parked), the server stops reading that connection (its frames
wait unread) until answers go out (``Session.hold_reading``). Idle connections close after
``idle_timeout_ms`` without a request, and so do held ones whose peer takes none of its answers
for as long. A malformed frame (``WireError``) closes that connection only, logged; so does any
other failure serving one connection — the IO thread never stops for one. Out of file
descriptors, the listener pauses ``ACCEPT_PAUSE_S``; floods of refusals and failures log one
line per ``LOG_INTERVAL_S``.

Lifecycle: ``start`` binds (port 0 picks a free port; ``address`` tells which) and starts the
threads; ``stop`` closes the listener and every connection (close listeners run), ends the
worker pool and the IO thread; every thread the server started has ended when it returns.
Close listeners (``add_close_listener``) run on the IO thread (or in ``stop``) once per closed
connection; they must not block.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable

from postbox.network.protocol.wire import FrameDecoder, RemotingCommand, WireError

from .admission import Admission, ProvingAccess, ThrottledLog
from .errors import ServerLimitError
from .handlers import AccessControl, AllowAll, HandlerTable, dispatch, error_response
from .limits import ServerLimits
from .session import Session, encode_answer
from .workers import WorkerLanes

log = logging.getLogger(__name__)

READ_CHUNK_BYTES = 256 * 1024
READS_PER_ROUND_MAX = 4  # then other connections get their turn
FRAMES_PER_ROUND_MAX = 32  # frames handled per connection per round; the rest wait buffered
OVERLOAD_PAUSE_S = 0.1  # a connection whose request its lane refused is not read this long
SELECT_TIMEOUT_S = 1.0
ACCEPT_PAUSE_S = 0.1  # out of file descriptors: stop accepting this long
LOG_INTERVAL_S = 10.0  # at most one line per interval for a flood of refusals or failures


class RemotingServer:
    """Serve ``handlers`` on ``host:port`` (port 0: a free port)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *,
                 handlers: HandlerTable | None = None, access: AccessControl | None = None,
                 limits: ServerLimits | None = None, name: str = "remoting") -> None:
        self.handlers = handlers if handlers is not None else HandlerTable()
        self.request_counts: Counter[int] = Counter()
        """Requests received, by code (the IO thread counts; readers copy it)."""
        self.access: AccessControl = access if access is not None else AllowAll()
        self.limits = limits or ServerLimits()
        self._bind = (host, port)
        self._name = name
        self._pool = WorkerLanes(f"{name}-worker", self.limits.workers, self.limits.queue_max)
        self._selector = selectors.DefaultSelector()
        self._listener: socket.socket | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sessions: dict[socket.socket, Session] = {}
        self._decoders: dict[Session, FrameDecoder] = {}
        self._admission = Admission(self.limits.max_connections,
                                    self.limits.max_connections_per_peer,
                                    self.limits.reserved_connections)
        self._refusals = {kind: ThrottledLog(log, LOG_INTERVAL_S) for kind in (
            "max_connections", "max_connections_per_peer", "reserved_connections",
            "frame_read_timeout_ms")}  # one line per interval for each bound
        self._accept_failures = ThrottledLog(log, LOG_INTERVAL_S)
        self._accept_resumes_at = 0.0  # out of file descriptors: accept again from then
        self._proving = ProvingAccess(lambda: self.access)
        self._dirty: set[Session] = set()
        self._deferred: dict[Session, float] = {}  # not read until then (0.0: the next round)
        self._want_write: deque[Session] = deque()
        self._close_listeners: list[Callable[[Session], None]] = []
        self._read_buffer = bytearray(READ_CHUNK_BYTES)  # the IO thread's, reused by every read
        self._read_view = memoryview(self._read_buffer)
        self._thread: threading.Thread | None = None
        self._io_ident: int | None = None
        self._stopping = False
        self.address: tuple[str, int] | None = None

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Bind, listen, and start the IO thread and the worker pool."""
        listener = socket.create_server(self._bind, reuse_port=False, backlog=512)
        listener.setblocking(False)
        self._listener = listener
        host, port = listener.getsockname()[:2]
        self.address = (host, port)
        self._selector.register(listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._pool.start()
        self._thread = threading.Thread(target=self._run, name=f"{self._name}-io", daemon=True)
        self._thread.start()
        log.info("[remoting] %s serving on %s:%d", self._name, host, port)

    def stop(self) -> None:
        """Close everything and end every thread this server started."""
        if self._thread is None:
            return
        self._stopping = True
        self._wake()
        self._thread.join()
        self._thread = None
        self._pool.stop()
        self._wake_r.close()
        self._wake_w.close()
        self._selector.close()

    def __enter__(self) -> RemotingServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def address_text(self) -> str:
        """``host:port`` once started."""
        if self.address is None:
            raise RuntimeError("the server is not started")
        return f"{self.address[0]}:{self.address[1]}"

    def add_close_listener(self, listener: Callable[[Session], None]) -> None:
        """Call ``listener(session)`` once for every connection that closes."""
        self._close_listeners.append(listener)

    def sessions(self) -> list[Session]:
        """The open connections (a snapshot)."""
        return list(self._sessions.values())

    def submit(self, task: Callable[[], None]) -> None:
        """Run ``task`` on the worker pool (``ServerLimitError`` when its queue is full)."""
        self._pool.submit(task)

    def is_io_thread(self) -> bool:
        """Whether the caller runs on this server's IO thread."""
        return threading.get_ident() == self._io_ident

    # ---- IO loop -----------------------------------------------------------------------------

    def _run(self) -> None:
        self._io_ident = threading.get_ident()
        try:
            next_check = time.monotonic() + SELECT_TIMEOUT_S
            while not self._stopping:
                due = self._due_deferred()  # served after this round's events
                for key, mask in self._selector.select(self._select_timeout_s(due)):
                    self._on_event(key, mask)
                self._serve_deferred(due)
                self._flush_dirty()
                now = time.monotonic()
                if self._accept_resumes_at and now >= self._accept_resumes_at:
                    self._resume_accepting()
                if now >= next_check:
                    self._close_expired(now)
                    next_check = now + SELECT_TIMEOUT_S
        except Exception:
            log.exception("[remoting] %s IO loop failed; closing", self._name)
        finally:
            self._close_all()

    def _select_timeout_s(self, due: list[Session]) -> float:
        if due:
            return 0.0
        wake_at = min(self._deferred.values(), default=0.0)
        if self._accept_resumes_at:
            wake_at = min(wake_at or self._accept_resumes_at, self._accept_resumes_at)
        if wake_at:
            return max(0.0, min(SELECT_TIMEOUT_S, wake_at - time.monotonic()))
        return SELECT_TIMEOUT_S

    # ---- fairness: frames left for a later round -------------------------------------------

    def _defer(self, session: Session, delay_s: float) -> None:
        """Stop reading ``session`` for now: its buffered frames wait for a later round (the
        next one, or ``delay_s`` from now), while the other connections are served."""
        if not session.closed:
            self._deferred[session] = time.monotonic() + delay_s if delay_s else 0.0
            self._set_events(session)

    def _due_deferred(self) -> list[Session]:
        if not self._deferred:
            return []
        now = time.monotonic()
        return [session for session, at in self._deferred.items() if at <= now]

    def _serve_deferred(self, due: list[Session]) -> None:
        """One more turn for each deferred connection whose time came: its buffered frames
        (up to ``FRAMES_PER_ROUND_MAX``), then it is read again."""
        for session in due:
            if self._deferred.pop(session, None) is None or session.closed:
                continue
            try:
                if not session.holding:
                    self._handle_buffered(session)
                self._set_events(session)
            except Exception:
                self._failed(session)

    def _on_event(self, key: selectors.SelectorKey, mask: int) -> None:
        data = key.data
        if data == "accept":
            self._accept()
        elif data == "wake":
            self._on_wake()
        else:
            session: Session = data
            try:  # one connection's failure ends that connection, never the IO thread
                if mask & selectors.EVENT_WRITE:
                    self._flush(session)
                if mask & selectors.EVENT_READ and not session.closed:
                    self._read(session)
            except Exception:
                self._failed(session)

    def _failed(self, session: Session) -> None:
        log.exception("[remoting] %s: serving %s failed; closing that connection",
                      self._name, session.peer_address)
        self._close(session)

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                sock, peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:  # e.g. out of file descriptors: pause accepting
                self._accept_failures.warning(
                    "[remoting] %s accept failed, accepting again in %d ms: %s", self._name,
                    int(ACCEPT_PAUSE_S * 1000), error)
                self._pause_accepting()
                return
            try:
                self._admit(sock, peer[0], f"{peer[0]}:{peer[1]}")
            except Exception:
                log.exception("[remoting] %s: accepting %s failed", self._name, peer)
                sock.close()

    def _admit(self, sock: socket.socket, host: str, address: str) -> None:
        refusal = self._admission.refusal(host)
        if refusal is not None:
            self._refusals[refusal[0]].warning("[remoting] %s refused %s: %s", self._name,
                                               address, refusal[1])
            sock.close()
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        session = Session(sock, address, self._on_pending_write, self.is_io_thread, host)
        if self._admission.must_prove(host):  # a reserved slot: its first frame, and soon
            session.probation, session.frame_started = True, time.monotonic()
        self._sessions[sock] = session
        self._decoders[session] = FrameDecoder(self.limits.frame)
        self._admission.opened(host, session.probation)
        self._selector.register(sock, selectors.EVENT_READ, session)
        session.watched_events = selectors.EVENT_READ

    def _pause_accepting(self) -> None:
        assert self._listener is not None
        self._selector.unregister(self._listener)  # else select wakes at once, forever
        self._accept_resumes_at = time.monotonic() + ACCEPT_PAUSE_S

    def _resume_accepting(self) -> None:
        self._accept_resumes_at = 0.0
        if self._listener is not None:
            self._selector.register(self._listener, selectors.EVENT_READ, "accept")

    def _read(self, session: Session) -> None:
        if session in self._deferred:
            return  # its buffered frames first, in a later round
        decoder = self._decoders[session]
        for _ in range(READS_PER_ROUND_MAX):
            try:  # recv_into a reused buffer: recv(256 KiB) would allocate 256 KiB each time
                size = session.sock.recv_into(self._read_buffer)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:
                log.info("[remoting] %s: connection %s broke: %s", self._name,
                         session.peer_address, error)
                self._close(session)
                return
            if not size:
                self._close(session)
                return
            session.last_read = time.monotonic()
            if session.frame_started is None:
                session.frame_started = session.last_read
            decoder.append(self._read_view[:size])
            self._handle_buffered(session)
            if (size < READ_CHUNK_BYTES or session.closed or session.holding
                    or session in self._deferred):
                return

    def _handle_buffered(self, session: Session) -> None:
        """Handle the whole frames received, one by one while the connection has room in
        flight; past ``max_output_bytes`` / ``max_owed_answers`` stop reading it. At most
        ``FRAMES_PER_ROUND_MAX`` per round: the rest wait for the next (``_defer``); after a
        request its lane refused (OVERLOAD) the rest wait ``OVERLOAD_PAUSE_S``."""
        decoder = self._decoders[session]
        handled = 0
        while not session.closed:
            if session in self._deferred:
                break
            if handled >= FRAMES_PER_ROUND_MAX:
                if decoder.has_frame():
                    self._defer(session, 0.0)
                break
            if session.hold_reading(self.limits.max_output_bytes, self.limits.max_owed_answers):
                self._set_events(session)
                return
            try:
                command = decoder.next_command()
            except WireError as error:
                log.warning("[remoting] %s: malformed frame from %s, closing it: %s",
                            self._name, session.peer_address, error)
                self._close(session)
                return
            if command is None:
                break
            session.frame_started = time.monotonic() if decoder.buffered_bytes else None
            if session.probation and not self._end_probation(session, command):
                return
            handled += 1
            self._handle(session, command)
        if session.proven:
            self._admission.prove(session.peer_host)

    def _end_probation(self, session: Session, command: RemotingCommand) -> bool:
        """The first frame of a connection on probation: keep it (True) if it is a request
        that passes the access check (checked here, on the IO thread), else close it."""
        session.probation = False
        self._admission.end_probation()
        try:
            if not command.is_response:
                self._proving.check(command, session)
        except Exception:  # refused (AccessDeniedError) or unreadable: not proven
            pass
        if session.proven:
            return True
        self._refusals["reserved_connections"].warning(
            "[remoting] %s: closing %s, on probation in a reserved slot, its first request did "
            "not pass the access check (ServerLimits.reserved_connections, "
            "remotingReservedConnections)", self._name, session.peer_address)
        self._close(session)
        return False

    def _handle(self, session: Session, command: RemotingCommand) -> None:
        if command.is_response:
            if not session.take_response(command):
                log.debug("[remoting] %s: response opaque=%d from %s matches no call",
                          self._name, command.opaque, session.peer_address)
            return
        session.language, session.version = command.language, command.version
        self.request_counts[command.code] += 1
        entry = self.handlers.lookup(command.code)
        if entry is None or entry[1]:
            response = dispatch(entry and entry[0], command, session, self._proving)
            if response is not None:
                session.write(encode_answer(response))
            elif not command.is_oneway:  # parked: owed until ``Session.send_response``
                session.expect_answer()
            return
        handler = entry[0]
        session.expect_answer()

        def task() -> None:
            answer = dispatch(handler, command, session, self._proving)
            if answer is not None:
                session.send_response(answer)
            elif command.is_oneway:
                session.answer_settled()
        try:
            self._pool.submit(task, self.handlers.lane(command.code))
        except ServerLimitError as error:
            if not command.is_oneway:
                session.write(encode_answer(error_response(command, error,
                                                           session.peer_address)))
            session.answer_settled()
            self._defer(session, OVERLOAD_PAUSE_S)  # backpressure, not decode-and-refuse

    # ---- writing -----------------------------------------------------------------------------

    def _on_pending_write(self, session: Session) -> None:
        if self.is_io_thread():
            self._dirty.add(session)
        else:
            self._want_write.append(session)
            self._wake()

    def _on_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        while self._want_write:
            self._dirty.add(self._want_write.popleft())

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, InterruptedError):
            pass  # already awake-pending
        except OSError:
            pass  # stopped

    def _flush_dirty(self) -> None:
        while self._dirty:
            session = self._dirty.pop()
            if not session.closed:
                try:
                    self._flush(session)
                except Exception:
                    self._failed(session)

    def _flush(self, session: Session) -> None:
        try:
            empty = session.flush()
        except OSError as error:
            log.info("[remoting] %s: connection %s broke on write: %s", self._name,
                     session.peer_address, error)
            self._close(session)
            return
        if session.holding and not session.hold_reading(self.limits.max_output_bytes,
                                                        self.limits.max_owed_answers):
            self._handle_buffered(session)  # room again: the frames read before, then more
            self._set_events(session)
        else:
            self._set_events(session, empty)

    def _set_events(self, session: Session, empty: bool | None = None) -> None:
        """Watch for reads unless holding, for writes while output waits."""
        if session.closed:
            return
        if empty is None:
            empty = not session.buffered_bytes
        reading = not session.holding and session not in self._deferred
        events = (selectors.EVENT_READ if reading else 0) | (
            0 if empty else selectors.EVENT_WRITE)
        watched = session.watched_events  # kept here: asking the selector's map about an
        if watched == events:  # unregistered socket formats its repr into a KeyError
            return
        if watched:
            if events:
                self._selector.modify(session.sock, events, session)
            else:  # holding with nothing to write: woken by ``Session.answer_settled``
                self._selector.unregister(session.sock)
        else:
            self._selector.register(session.sock, events, session)
        session.watched_events = events

    # ---- closing -----------------------------------------------------------------------------

    def _close_expired(self, now: float) -> None:
        """Close connections idle for ``idle_timeout_ms``, or whose frame began over
        ``frame_read_timeout_ms`` ago (a peer that trickles bytes). A connection the server
        stopped reading (``holding``) is timed only by its peer taking its answers: none taken
        for ``idle_timeout_ms`` closes it; waiting for answers owed is the server's wait."""
        idle_since = now - self.limits.idle_timeout_ms / 1000
        frame_since = now - self.limits.frame_read_timeout_ms / 1000
        probation_since = now - self.limits.probation_timeout_ms / 1000
        for session in list(self._sessions.values()):
            if session.probation and session.frame_started is not None \
                    and session.frame_started < probation_since:
                self._refusals["reserved_connections"].warning(
                    "[remoting] %s: closing %s, on probation and no whole request within %d ms "
                    "(ServerLimits.probation_timeout_ms, remotingProbationTimeoutMillis)",
                    self._name, session.peer_address, self.limits.probation_timeout_ms)
                self._close(session)
                continue
            if session.holding:
                if session.buffered_bytes and session.last_sent < idle_since:
                    log.info("[remoting] %s: closing %s, it took none of its answers for over "
                             "%d ms", self._name, session.peer_address,
                             self.limits.idle_timeout_ms)
                    self._close(session)
                continue
            if session.last_read < idle_since:
                log.info("[remoting] %s: closing %s, idle for over %d ms", self._name,
                         session.peer_address, self.limits.idle_timeout_ms)
                self._close(session)
            elif session.frame_started is not None and session.frame_started < frame_since:
                self._refusals["frame_read_timeout_ms"].warning(
                    "[remoting] %s: closing %s, a frame unfinished after %d ms "
                    "(ServerLimits.frame_read_timeout_ms, remotingFrameReadTimeoutMillis)",
                    self._name, session.peer_address, self.limits.frame_read_timeout_ms)
                self._close(session)

    def _close(self, session: Session) -> None:
        if session.sock in self._sessions:
            del self._sessions[session.sock]
            self._admission.closed(session.peer_host)
            if session.probation:
                session.probation = False
                self._admission.end_probation()
            self._decoders.pop(session, None)
            self._dirty.discard(session)
            self._deferred.pop(session, None)
            if session.watched_events:
                session.watched_events = 0
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.unregister(session.sock)
        if not session.mark_closed():
            return
        for listener in self._close_listeners:
            try:
                listener(session)
            except Exception:
                log.exception("[remoting] %s: close listener failed for %s", self._name,
                              session.peer_address)

    def _close_all(self) -> None:
        for session in list(self._sessions.values()):
            self._close(session)
        if self._listener is not None:
            try:
                self._selector.unregister(self._listener)
            except (KeyError, ValueError):
                pass
            self._listener.close()
            self._listener = None
