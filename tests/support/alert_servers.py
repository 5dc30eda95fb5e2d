"""Real servers that receive alerts: an HTTP webhook endpoint and an SMTP server, on loopback.

- ``WebhookServer``: a ``ThreadingHTTPServer`` on ``127.0.0.1`` (a free port) serving in a
  thread. Every POST is recorded as a ``WebhookRequest`` (path, headers, raw body, parsed JSON
  body, the status it was answered with). ``fail_first = n`` answers the next ``n`` POSTs with
  500; ``redirect_to = url`` answers every other POST with ``307`` to ``url``; ``delay_s`` holds
  each answer back (to provoke client timeouts; ``stop`` cuts it short).
- ``SmtpServer``: ``aiosmtpd``'s ``Controller`` on ``127.0.0.1`` (a free port) with a handler
  that records every message as a ``ReceivedMail`` (envelope sender and recipients, and the
  message parsed with ``email.policy.default`` into an ``EmailMessage``). ``credentials`` turns
  on AUTH (PLAIN/LOGIN, allowed without TLS); ``reject_first = n`` answers the next ``n``
  messages with ``451``.
- ``wait_for(n, timeout_s)`` on both returns the first ``n`` records once they are there, or fails
  the test at the deadline. Both are context managers (``with WebhookServer() as server:``), and
  ``stop`` is idempotent.
- Fixtures ``webhook_server`` and ``smtp_server`` (function-scoped, started and stopped around
  the test). Their functions are named ``*_fixture`` so that a test module imports them
  (``from tests.support.alert_servers import smtp_server_fixture  # noqa: F401``) without its
  ``smtp_server`` parameters shadowing the import.

Records are guarded by a condition variable: the servers' threads append, the test reads.
"""

from __future__ import annotations

import contextlib
import email
import email.policy
import errno
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from tests.support.services import free_port

REQUEST_BODY_MAX_BYTES = 1024 * 1024
PORT_ATTEMPTS = 5
"""Tries at binding a free port (another process may take it between probe and bind)."""


def _wait_for(condition: threading.Condition, records: list[Any], count: int, timeout_s: float,
              what: str) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    with condition:
        while len(records) < count:
            left_s = deadline - time.monotonic()
            assert left_s > 0, (f"{what}: {len(records)} of {count} received "
                                f"within {timeout_s} s")
            condition.wait(left_s)
        return list(records[:count])


# ---- webhook --------------------------------------------------------------------------------


@dataclass(frozen=True)
class WebhookRequest:
    """One POST the webhook server received."""

    path: str
    headers: dict[str, str]
    """Header names lower-cased."""
    raw_body: bytes
    body: Any
    """The body parsed as JSON (None if it was not JSON)."""
    status: int
    """What the server answered."""


class WebhookServer:
    """An HTTP endpoint on ``127.0.0.1`` that records POSTs and can fail on demand."""

    def __init__(self, *, fail_first: int = 0, redirect_to: str | None = None,
                 delay_s: float = 0.0) -> None:
        self.fail_first = fail_first
        self.redirect_to = redirect_to
        self.delay_s = delay_s
        self.requests: list[WebhookRequest] = []
        self._condition = threading.Condition()
        self._stopped = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port the server listens on (started servers only)."""
        assert self._server is not None, "WebhookServer not started"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>/hook``."""
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> WebhookServer:
        assert self._server is None, "WebhookServer already started"
        self._stopped.clear()
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="webhook-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopped.set()
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def wait_for(self, count: int, timeout_s: float = 5.0) -> list[WebhookRequest]:
        """The first ``count`` requests, once received."""
        return _wait_for(self._condition, self.requests, count, timeout_s, "webhook requests")

    def _answer(self, path: str, headers: dict[str, str], raw_body: bytes) -> int:
        """Record one POST; the status to answer with."""
        with self._condition:
            status = 200
            if self.fail_first > 0:
                self.fail_first -= 1
                status = 500
            elif self.redirect_to:
                status = 307
            try:
                body = json.loads(raw_body) if raw_body else None
            except ValueError:
                body = None
            self.requests.append(WebhookRequest(path, headers, raw_body, body, status))
            self._condition.notify_all()
        if self.delay_s:
            self._stopped.wait(self.delay_s)
        return status

    def __enter__(self) -> WebhookServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _handler_for(owner: WebhookServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # the name http.server calls
            length = min(int(self.headers.get("Content-Length") or 0), REQUEST_BODY_MAX_BYTES)
            raw_body = self.rfile.read(length)
            headers = {name.lower(): value for name, value in self.headers.items()}
            status = owner._answer(self.path, headers, raw_body)
            answer = b'{"ok": true}' if status < 400 else b'{"error": "told to fail"}'
            self.send_response(status)
            if status == 307 and owner.redirect_to:
                self.send_header("Location", owner.redirect_to)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(answer)
            self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:  # base signature
            pass

    return Handler


# ---- SMTP -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReceivedMail:
    """One message the SMTP server accepted."""

    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage
    login: str | None
    """The user that authenticated the session (None without AUTH)."""


class _RecordingHandler:
    def __init__(self, owner: SmtpServer) -> None:
        self.owner = owner

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        owner = self.owner
        with owner._condition:
            if owner.reject_first > 0:
                owner.reject_first -= 1
                owner.rejected += 1
                return "451 4.3.0 told to fail"
            message = email.message_from_bytes(envelope.content, policy=email.policy.default)
            assert isinstance(message, EmailMessage)
            login = session.auth_data.decode() if isinstance(session.auth_data, bytes) else None
            owner.messages.append(ReceivedMail(envelope.mail_from, list(envelope.rcpt_tos),
                                               message, login))
            owner._condition.notify_all()
        return "250 2.0.0 OK"


class SmtpServer:
    """An SMTP server on ``127.0.0.1`` that records what it receives."""

    def __init__(self, *, credentials: dict[str, str] | None = None, reject_first: int = 0) -> None:
        self.credentials = credentials
        self.reject_first = reject_first
        self.rejected = 0
        self.messages: list[ReceivedMail] = []
        self.port = 0
        self._condition = threading.Condition()
        self._controller: Controller | None = None

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def url(self) -> str:
        """``smtp://[user:pass@]127.0.0.1:<port>`` (with the first credentials, if any)."""
        userinfo = ""
        if self.credentials:
            user, password = next(iter(self.credentials.items()))
            userinfo = f"{user}:{password}@"
        return f"smtp://{userinfo}{self.host}:{self.port}"

    def start(self) -> SmtpServer:
        assert self._controller is None, "SmtpServer already started"
        options: dict[str, Any] = {"ready_timeout": 5.0}
        if self.credentials is not None:
            options.update(auth_require_tls=False, authenticator=self._authenticate)
        for attempt in range(1, PORT_ATTEMPTS + 1):
            port = free_port()
            controller = Controller(_RecordingHandler(self), hostname=self.host, port=port,
                                    **options)
            try:
                controller.start()
            except OSError as error:
                # the port was taken between probe and bind: the controller's thread has ended
                # without serving; close its loop and try another port
                _discard(controller)
                if error.errno != errno.EADDRINUSE or attempt == PORT_ATTEMPTS:
                    raise
                continue
            except BaseException:
                _discard(controller)
                raise
            self.port = port
            self._controller = controller
            return self
        raise AssertionError("unreachable")

    def stop(self) -> None:
        controller, self._controller = self._controller, None
        if controller is not None:
            controller.stop()

    def wait_for(self, count: int, timeout_s: float = 5.0) -> list[ReceivedMail]:
        """The first ``count`` messages, once received."""
        return _wait_for(self._condition, self.messages, count, timeout_s, "emails")

    def _authenticate(self, server: Any, session: Any, envelope: Any, mechanism: str,
                      auth_data: Any) -> AuthResult:
        if isinstance(auth_data, LoginPassword) and self.credentials is not None:
            user = auth_data.login.decode()
            if self.credentials.get(user) == auth_data.password.decode():
                return AuthResult(success=True, auth_data=auth_data.login)
        return AuthResult(success=False, handled=False)

    def __enter__(self) -> SmtpServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _discard(controller: Controller) -> None:
    """Clean up after a controller whose ``start`` failed."""
    with contextlib.suppress(Exception):
        controller.stop(no_assert=True)
    if not controller.loop.is_running() and not controller.loop.is_closed():
        controller.loop.close()


# ---- fixtures -------------------------------------------------------------------------------


@pytest.fixture(name="webhook_server")
def webhook_server_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[WebhookServer]:
    # an HTTP(S)_PROXY in the environment must not swallow loopback requests
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with WebhookServer() as server:
        yield server


@pytest.fixture(name="smtp_server")
def smtp_server_fixture() -> Iterator[SmtpServer]:
    with SmtpServer() as server:
        yield server
