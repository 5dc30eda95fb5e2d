"""Who may change what: the write token, the session, CSRF, and the audit trail.

- Read-only unless a write token is configured. An operator unlocks writing by posting the
  token (and a name, for the audit) to ``/login``; the console then sets ``postbox_write``, an
  HMAC of the session id under the token (HttpOnly, SameSite=Strict), so the token itself never
  sits in a cookie.
- Every change is a POST checked against CSRF: a double-submit token tied to the session. Each
  browser gets a random ``postbox_session`` cookie; forms carry ``csrf`` = HMAC(process secret,
  session id); a POST whose field does not match its cookie's HMAC is refused (403), as is one
  whose ``Origin`` names another host.
- Each action is audited: one line on the ``postbox.console.audit`` logger (who, what, when,
  outcome) and, when the database is given and migrated, one ``console_audit`` row.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Engine, insert, inspect
from starlette.requests import Request

from postbox.outbox.tables import console_audit

SESSION_COOKIE = "postbox_session"
WRITE_COOKIE = "postbox_write"
OPERATOR_COOKIE = "postbox_operator"
CSRF_FIELD = "csrf"
OPERATOR_NAME_MAX = 64
audit_log = logging.getLogger("postbox.console.audit")


class Refused(Exception):
    """A POST the console refuses: (HTTP status, why)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Guard:
    """The process's CSRF secret and the configured write token."""

    def __init__(self, write_token: str | None) -> None:
        self.write_token = write_token or None
        self._secret = secrets.token_bytes(32)

    @staticmethod
    def session_id(request: Request) -> str | None:
        """The browser's session id (its cookie), if it has one."""
        value = request.cookies.get(SESSION_COOKIE)
        return value if value and len(value) <= 64 else None

    def csrf_token(self, session_id: str) -> str:
        """The form token of a session."""
        return hmac.new(self._secret, session_id.encode(), hashlib.sha256).hexdigest()

    def write_mark(self, session_id: str) -> str:
        """The ``postbox_write`` cookie value of a signed-in session."""
        key = (self.write_token or "").encode()
        return hmac.new(key, b"write:" + session_id.encode(), hashlib.sha256).hexdigest()

    def can_write(self, request: Request) -> bool:
        """Whether this browser signed in with the write token."""
        session = self.session_id(request)
        mark = request.cookies.get(WRITE_COOKIE, "")
        return bool(self.write_token and session
                    and hmac.compare_digest(mark, self.write_mark(session)))

    def check_post(self, request: Request, form: Any, *, write: bool = True) -> None:
        """Refuse a POST without a matching CSRF token, from another origin, or (``write``)
        from a browser without the write role."""
        origin = request.headers.get("origin")
        if origin and origin != "null" and urlsplit(origin).netloc != request.url.netloc:
            raise Refused(403, f"cross-origin POST from {origin} refused")
        session = self.session_id(request)
        sent = str(form.get(CSRF_FIELD) or "")
        if not session or not hmac.compare_digest(sent, self.csrf_token(session)):
            raise Refused(403, "missing or wrong CSRF token: reload the page and try again")
        if not write:
            return
        if not self.write_token:
            raise Refused(403, "this console is read-only (no write token configured)")
        if not self.can_write(request):
            raise Refused(403, "sign in with the write token first")

    def check_token(self, token: str) -> bool:
        """Whether ``token`` is the write token."""
        return bool(self.write_token) and hmac.compare_digest(
            token.encode(), (self.write_token or "").encode())


def operator(request: Request) -> str:
    """Who acts: the name given at sign-in and the client address."""
    name = request.cookies.get(OPERATOR_COOKIE, "")[:OPERATOR_NAME_MAX] or "operator"
    host = request.client.host if request.client else "?"
    return f"{name}@{host}"


def audit(engine: Engine | None, who: str, action: str, target: str, outcome: str) -> None:
    """One audit line (always) and one ``console_audit`` row (when ``engine`` has the table;
    a failure to write it is logged, never raised: the action already happened)."""
    at = datetime.now(UTC).replace(tzinfo=None)
    audit_log.warning("console action who=%s what=%s target=%s outcome=%s at=%sZ", who,
                      action, target, outcome, at.isoformat(timespec="seconds"))
    if engine is None:
        return
    try:
        if not inspect(engine).has_table(console_audit.name):
            return
        with engine.begin() as connection:
            connection.execute(insert(console_audit).values(
                at=at, actor=who[:255], action=action[:64], target=target[:1024],
                outcome=outcome[:1024]))
    except Exception as error:  # the audit row is best effort; the log line is written
        audit_log.error("console audit row not written: %s", error)
