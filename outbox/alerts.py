"""Alerts: telling an operator that a stub became ``void`` and needs manual handling.

A stub becomes ``void`` when it was sent ``max_send_count`` times without being confirmed
(``AlertKind.EXHAUSTED``, ``reason`` = its ``last_error``) or when a consumer group dead-lettered
its message (``AlertKind.DEAD_LETTERED``, ``reason`` = the dead-letter reason). Whoever voids
stubs builds one ``Alert`` per stub *after* the transaction that voided them has committed, and
hands them to ``Alerter.fire``. The sinks:

- ``LogSink`` — always present, first: one ERROR line per alert on the ``postbox.alerts`` logger.
- ``WebhookSink`` — one HTTP POST per alert, body ``Alert.to_dict()`` as JSON. A connection
  error, a timeout or any non-2xx status (redirects are not followed: a POST turned into a GET
  would look delivered) is retried after ``retry_delay_s``, ``attempts`` tries in all; then the
  sink stops (the endpoint is down, the remaining alerts would only wait on it too) and raises
  ``AlertDeliveryError``. Userinfo in the URL becomes a Basic ``Authorization`` header and is
  never shown: errors and logs name the URL with the password replaced by ``***``.
- ``EmailSink`` — one SMTP message per ``fire``, listing every alert in a plain-text body (the
  first ``EMAIL_BODY_MAX_ALERTS``) with all of them attached as ``application/json``. One try;
  plain, STARTTLS or SMTPS, optional login.

Delivery is best effort. ``fire`` never raises: a sink that fails is logged and reported in the
returned ``AlertReport`` and the other sinks still get the alerts. Waits are bounded (socket
timeouts, ``attempts``), so a dead endpoint delays the resend/cleanup work that fires alerts by
at most ``attempts × timeout_s + (attempts - 1) × retry_delay_s`` per webhook and ``timeout_s``
per SMTP step, and never blocks or rolls it back. Nothing here is durable: the ``void`` status
in the database is the record (``postbox outbox list --status void`` shows it); an alert lost
to a crash or an outage is not re-sent.

Thread safety: sinks keep no state between calls (each ``send`` opens its own connection), so
one ``Alerter`` may fire from several threads. Nothing connects at construction.
Configuration comes from ``AlertSettings`` (``from_env`` reads ``POSTBOX_ALERT_*`` at the edges).
"""

from __future__ import annotations

import base64
import collections
import enum
import json
import logging
import os
import smtplib
import ssl as ssl_module
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from http.client import HTTPException
from typing import Any, Protocol
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

from postbox.framework import environment

from .errors import OutboxError

log = logging.getLogger("postbox.alerts")
ALERT_LOG_ATTRIBUTE = "postbox_alert"
"""Attribute of a ``LogSink`` record holding its ``Alert`` (for filters and handlers)."""

ALERT_EVENT = "postbox.stub.void"
SUMMARY_REASON_MAX_CHARS = 300
"""A reason is cut to this many characters in one-line summaries (``to_dict`` keeps it whole)."""
EMAIL_BODY_MAX_ALERTS = 100
"""Alerts written out in an email's body; the JSON attachment always holds every one."""
WEBHOOK_RESPONSE_MAX_BYTES = 64 * 1024
ERROR_SNIPPET_MAX_CHARS = 200

_ENV_WEBHOOK_URL = environment.ALERT_WEBHOOK_URL.name  # the one table: framework.environment
_ENV_SMTP_URL = environment.ALERT_SMTP_URL.name
_ENV_EMAIL_FROM = environment.ALERT_EMAIL_FROM.name
_ENV_EMAIL_TO = environment.ALERT_EMAIL_TO.name
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class AlertKind(enum.StrEnum):
    """Why a stub became ``void``."""

    EXHAUSTED = "exhausted"
    DEAD_LETTERED = "dead_lettered"


@dataclass(frozen=True)
class Alert:
    """One void stub. An aware ``occurred_at`` is converted to naive UTC."""

    kind: AlertKind
    message_id: str
    topic: str
    send_count: int
    reason: str
    """The stub's ``last_error``, or the dead-letter reason."""
    occurred_at: datetime
    """When the stub became void (naive UTC)."""
    consumer_group: str | None = None
    """The group concerned: the one that dead-lettered the message, or for ``EXHAUSTED`` one
    that moved past it unconfirmed; None when there is none (never published)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", AlertKind(self.kind))
        if self.occurred_at.tzinfo is not None:
            naive = self.occurred_at.astimezone(UTC).replace(tzinfo=None)
            object.__setattr__(self, "occurred_at", naive)
        if not self.message_id:
            raise ValueError("an alert needs a message_id")
        if self.send_count < 0:
            raise ValueError(f"send_count must be >= 0, not {self.send_count}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form a webhook receives."""
        return {"event": ALERT_EVENT, "kind": self.kind.value, "message_id": self.message_id,
                "topic": self.topic, "send_count": self.send_count, "reason": self.reason,
                "consumer_group": self.consumer_group,
                "occurred_at": self.occurred_at.isoformat(timespec="milliseconds") + "Z"}

    def summary(self) -> str:
        """One line for a human: which stub, why, and the (shortened) reason."""
        by_group = ""
        if self.consumer_group:
            by_group = (" by" if self.kind is AlertKind.DEAD_LETTERED else ",") + (
                f" group {_one_line(self.consumer_group)}")
        reason = _one_line(self.reason, SUMMARY_REASON_MAX_CHARS) or "no reason recorded"
        return (f"stub {_one_line(self.message_id)} on topic {_one_line(self.topic)} is void "
                f"({self.kind.value}{by_group}, {self.send_count} sends): {reason}")


class AlertDeliveryError(OutboxError):
    """A sink could not deliver its alerts (the message names the target, never a password)."""


class AlertSink(Protocol):
    """Somewhere alerts go. ``send`` delivers every alert or raises."""

    name: str

    def send(self, alerts: Sequence[Alert]) -> None:
        """Deliver ``alerts``; raise (preferably ``AlertDeliveryError``) on failure."""
        ...


class LogSink:
    """One ERROR line per alert on the ``postbox.alerts`` logger."""

    name = "log"

    def send(self, alerts: Sequence[Alert]) -> None:
        """Log each alert."""
        for alert in alerts:
            log.error("[alerts] %s", alert.summary(), extra={ALERT_LOG_ATTRIBUTE: alert})


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Turn a redirect into an ``HTTPError``: urllib would re-send the POST as a bodiless GET."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> None:
        return None


class WebhookSink:
    """POST each alert as JSON to ``url`` (http or https).

    Args:
        timeout_s: socket timeout of each attempt (connect, and each read).
        headers: extra request headers (``Content-Type`` is always ``application/json``).
        attempts: tries per alert, the first included.
        retry_delay_s: wait between two tries.
        name: the sink's key in ``AlertReport`` (give two webhooks different names).
    """

    def __init__(self, url: str, *, timeout_s: float = 5.0,
                 headers: Mapping[str, str] | None = None, attempts: int = 3,
                 retry_delay_s: float = 0.5, name: str = "webhook") -> None:
        parts = _split_url(url, ("http", "https"), "webhook URL")
        if timeout_s <= 0:
            raise ValueError(f"WebhookSink timeout_s must be > 0, not {timeout_s}")
        if attempts < 1:
            raise ValueError(f"WebhookSink attempts must be >= 1, not {attempts}")
        if retry_delay_s < 0:
            raise ValueError(f"WebhookSink retry_delay_s must be >= 0, not {retry_delay_s}")
        self.name = name
        self.url = _redact_url(url)
        """The URL as shown in errors and logs (password replaced by ``***``)."""
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.retry_delay_s = retry_delay_s
        self._target = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
        self._headers = {"User-Agent": "postbox-alerts", **(headers or {}),
                         "Content-Type": "application/json"}
        if parts.username is not None:
            credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            token = base64.b64encode(credentials.encode("utf-8")).decode("ascii")
            self._headers["Authorization"] = f"Basic {token}"
        self._opener = urllib.request.build_opener(_NoRedirect)

    def send(self, alerts: Sequence[Alert]) -> None:
        """POST each alert in turn; stop and raise at the first one every attempt failed for."""
        for index, alert in enumerate(alerts):
            body = json.dumps(alert.to_dict()).encode("utf-8")
            try:
                self._post(body)
            except AlertDeliveryError as error:
                raise AlertDeliveryError(
                    f"{error} ({index} of {len(alerts)} alerts delivered)") from error.__cause__

    def _post(self, body: bytes) -> None:
        """POST ``body`` until a 2xx answer, ``attempts`` times at most."""
        for attempt in range(1, self.attempts + 1):
            try:
                request = urllib.request.Request(self._target, data=body, headers=self._headers,
                                                 method="POST")
                with self._opener.open(request, timeout=self.timeout_s) as response:
                    response.read(WEBHOOK_RESPONSE_MAX_BYTES)
                return
            except (OSError, HTTPException) as error:
                problem = _describe_http_error(error)
                if attempt == self.attempts:
                    raise AlertDeliveryError(
                        f"webhook POST to {self.url} failed after {attempt} attempts: "
                        f"{problem}") from error
                log.warning("[alerts] webhook POST to %s failed (attempt %d of %d): %s",
                            self.url, attempt, self.attempts, problem)
            time.sleep(self.retry_delay_s)


class EmailSink:
    """One email per ``send`` listing every alert, with the alerts as a JSON attachment.

    ``ssl`` connects with TLS from the start (SMTPS, usually port 465); ``starttls`` upgrades a
    plain connection (usually port 587). Certificates are verified against the system store.
    ``timeout_s`` bounds each SMTP step; there is one try.
    """

    def __init__(self, host: str, port: int = 25, *, sender: str, recipients: Sequence[str],
                 username: str | None = None, password: str | None = None,
                 starttls: bool = False, ssl: bool = False, timeout_s: float = 10.0,
                 name: str = "email") -> None:
        recipients = tuple(recipients)
        if not host:
            raise ValueError("EmailSink needs an SMTP host")
        if not 0 < port < 65536:
            raise ValueError(f"EmailSink port must be 1-65535, not {port}")
        if not recipients:
            raise ValueError("EmailSink needs at least one recipient")
        envelope_sender = _envelope_address(sender)
        envelope_recipients = tuple(_envelope_address(address) for address in recipients)
        if starttls and ssl:
            raise ValueError("EmailSink: choose ssl (SMTPS) or starttls, not both")
        if (username is None) != (password is None):
            raise ValueError("EmailSink: give username and password together, or neither")
        if timeout_s <= 0:
            raise ValueError(f"EmailSink timeout_s must be > 0, not {timeout_s}")
        self.name = name
        self.host = host
        self.port = port
        self.sender = sender
        self.recipients = recipients
        self.username = username
        self._password = password
        self.starttls = starttls
        self.ssl = ssl
        self.timeout_s = timeout_s
        self._envelope = (envelope_sender, envelope_recipients)

    def send(self, alerts: Sequence[Alert]) -> None:
        """Send one email about ``alerts`` (nothing when there are none)."""
        if not alerts:
            return
        message = self.compose(alerts)
        target = f"smtp{'s' if self.ssl else ''}://{self.host}:{self.port}"
        try:
            refused = self._deliver(message)
        except OSError as error:  # smtplib.SMTPException, socket and TLS errors
            raise AlertDeliveryError(
                f"email to {', '.join(self.recipients)} through {target} failed: "
                f"{_one_line(str(error), ERROR_SNIPPET_MAX_CHARS) or type(error).__name__}"
            ) from error
        if refused:
            raise AlertDeliveryError(
                f"email through {target} refused for {', '.join(sorted(refused))} "
                f"(the other recipients got it)")

    def compose(self, alerts: Sequence[Alert]) -> EmailMessage:
        """The message ``send`` would send for ``alerts``."""
        message = EmailMessage()
        message["From"] = self.sender
        message["To"] = ", ".join(self.recipients)
        message["Subject"] = _subject(alerts)
        message["Date"] = formatdate(localtime=False, usegmt=True)
        domain = self._envelope[0].rpartition("@")[2] or "localhost"
        message["Message-ID"] = make_msgid(domain=domain)
        message.set_content(_email_body(alerts))
        attachment = json.dumps([alert.to_dict() for alert in alerts], indent=2).encode("utf-8")
        message.add_attachment(attachment, maintype="application", subtype="json",
                               filename="postbox-void-stubs.json")
        return message

    def _deliver(self, message: EmailMessage) -> dict[str, Any]:
        """Connect, log in, send; the recipients the server refused."""
        context = ssl_module.create_default_context()
        smtp: smtplib.SMTP
        if self.ssl:
            smtp = smtplib.SMTP_SSL(self.host, self.port, timeout=self.timeout_s, context=context)
        else:
            smtp = smtplib.SMTP(self.host, self.port, timeout=self.timeout_s)
        with smtp:
            if self.starttls:
                smtp.starttls(context=context)
            if self.username is not None and self._password is not None:
                smtp.login(self.username, self._password)
            sender, recipients = self._envelope
            return smtp.send_message(message, from_addr=sender, to_addrs=list(recipients))


@dataclass
class AlertReport:
    """What one ``fire`` did, per sink name.

    ``delivered`` holds the sinks that took every alert (with the alert count); ``failed`` the
    sinks that raised, with the error. A sink is in exactly one of them.
    """

    delivered: dict[str, int] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """No sink failed."""
        return not self.failed


class Alerter:
    """Fires alerts at every sink; a ``LogSink`` always comes first.

    Sinks are keyed by ``name`` in the report, so two sinks may not share one.
    """

    def __init__(self, sinks: Sequence[AlertSink] = ()) -> None:
        logs = [sink for sink in sinks if isinstance(sink, LogSink)]
        others = [sink for sink in sinks if not isinstance(sink, LogSink)]
        self.sinks: list[AlertSink] = (logs or [LogSink()]) + others
        self.fired: collections.Counter[str] = collections.Counter()
        """Alerts fired, by kind (metrics)."""
        names = [sink.name for sink in self.sinks]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"alert sinks need distinct names; repeated: {duplicates} "
                             f"(pass name=… to the sink)")

    def fire(self, alerts: Sequence[Alert]) -> AlertReport:
        """Give ``alerts`` to every sink; never raises (failures are logged and reported)."""
        report = AlertReport()
        alerts = tuple(alerts)
        if not alerts:
            return report
        self.fired.update(alert.kind.value for alert in alerts)
        for sink in self.sinks:
            try:
                sink.send(alerts)
            except Exception as error:  # a sink must never stop the caller
                if isinstance(error, AlertDeliveryError):
                    report.failed[sink.name] = str(error)
                    log.error("[alerts] sink %s failed; %d alerts not delivered through it: %s",
                              sink.name, len(alerts), error)
                else:
                    report.failed[sink.name] = f"{type(error).__name__}: {error}"
                    log.exception("[alerts] sink %s raised; %d alerts not delivered through it",
                                  sink.name, len(alerts))
            else:
                report.delivered[sink.name] = len(alerts)
        return report


@dataclass(frozen=True)
class AlertSettings:
    """Where alerts go besides the log. Checked by ``build``; the repr hides passwords."""

    webhook_url: str | None = None
    smtp_url: str | None = None
    """``smtp://[user:pass@]host[:port][?starttls=1]`` (port 25) or ``smtps://…`` (port 465)."""
    email_from: str = "postbox@localhost"
    email_to: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        email_to = self.email_to
        if isinstance(email_to, str):
            email_to = _split_addresses(email_to)
        object.__setattr__(self, "email_to", tuple(email_to))

    def __repr__(self) -> str:
        webhook = _redact_url(self.webhook_url) if self.webhook_url else None
        smtp = _redact_url(self.smtp_url) if self.smtp_url else None
        return (f"AlertSettings(webhook_url={webhook!r}, smtp_url={smtp!r}, "
                f"email_from={self.email_from!r}, email_to={self.email_to!r})")

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> AlertSettings:
        """Read ``POSTBOX_ALERT_WEBHOOK_URL``, ``…_SMTP_URL``, ``…_EMAIL_FROM`` and
        ``…_EMAIL_TO`` (comma-separated); unset or empty means not configured."""
        return cls(webhook_url=env.get(_ENV_WEBHOOK_URL, "").strip() or None,
                   smtp_url=env.get(_ENV_SMTP_URL, "").strip() or None,
                   email_from=env.get(_ENV_EMAIL_FROM, "").strip() or cls.email_from,
                   email_to=_split_addresses(env.get(_ENV_EMAIL_TO, "")))

    def build(self) -> Alerter:
        """An ``Alerter`` with a log sink plus the configured webhook and email sinks."""
        sinks: list[AlertSink] = []
        if self.webhook_url:
            sinks.append(WebhookSink(self.webhook_url))
        if self.smtp_url:
            if not self.email_to:
                raise ValueError(f"an SMTP URL is set ({_ENV_SMTP_URL}) but no recipient: set "
                                 f"email_to ({_ENV_EMAIL_TO}, comma-separated)")
            sinks.append(self._email_sink(self.smtp_url))
        elif self.email_to:
            raise ValueError(f"email recipients are set ({_ENV_EMAIL_TO}) but no SMTP server: "
                             f"set smtp_url ({_ENV_SMTP_URL})")
        return Alerter(sinks)

    def _email_sink(self, url: str) -> EmailSink:
        parts = _split_url(url, ("smtp", "smtps"), "SMTP URL")
        shown = _redact_url(url)
        if parts.path not in ("", "/") or parts.fragment:
            raise ValueError(f"SMTP URL {shown} has a path; expected smtp://[user:pass@]host[:port]")
        options = dict(parse_qsl(parts.query, keep_blank_values=True))
        unknown = sorted(set(options) - {"starttls"})
        if unknown:
            raise ValueError(f"SMTP URL {shown}: unknown option(s) {unknown}; only starttls")
        starttls = _flag(options.get("starttls", "0"), f"SMTP URL {shown}: starttls")
        ssl = parts.scheme == "smtps"
        if ssl and starttls:
            raise ValueError(f"SMTP URL {shown}: smtps is already TLS; drop ?starttls")
        username = unquote(parts.username) if parts.username is not None else None
        password = unquote(parts.password) if parts.password is not None else None
        if username is not None and password is None:
            raise ValueError(f"SMTP URL {shown} has a user but no password (user:pass@host)")
        return EmailSink(parts.hostname or "", _port(parts, shown) or (465 if ssl else 25),
                         sender=self.email_from, recipients=self.email_to, username=username,
                         password=password, starttls=starttls, ssl=ssl)


# ---- helpers -------------------------------------------------------------------------------


def _one_line(text: str | None, max_chars: int | None = None) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``max_chars`` with ``…``."""
    line = " ".join((text or "").split())
    if max_chars is not None and len(line) > max_chars:
        return line[:max_chars - 1] + "…"
    return line


def _subject(alerts: Sequence[Alert]) -> str:
    if len(alerts) == 1:
        alert = alerts[0]
        return f"[postbox] stub {_one_line(alert.message_id)} is void ({alert.kind.value})"
    return f"[postbox] {len(alerts)} stubs need manual handling"


def _email_body(alerts: Sequence[Alert]) -> str:
    count = f"{len(alerts)} outbox stubs are" if len(alerts) > 1 else "An outbox stub is"
    lines = [f"{count} void and need{'s' if len(alerts) == 1 else ''} manual handling.",
             "The database keeps them with status 'void' "
             "(postbox outbox list --status void); every alert is attached as JSON.", ""]
    for alert in alerts[:EMAIL_BODY_MAX_ALERTS]:
        lines += [f"message id:     {alert.message_id}",
                  f"kind:           {alert.kind.value}",
                  f"topic:          {alert.topic}",
                  f"consumer group: {alert.consumer_group or '-'}",
                  f"send count:     {alert.send_count}",
                  f"occurred at:    {alert.to_dict()['occurred_at']}",
                  f"reason:         {alert.reason or '-'}", ""]
    if len(alerts) > EMAIL_BODY_MAX_ALERTS:
        lines.append(f"… and {len(alerts) - EMAIL_BODY_MAX_ALERTS} more in the attachment.")
    return "\n".join(lines)


def _split_url(url: str, schemes: tuple[str, ...], what: str) -> SplitResult:
    """``url`` split, with a scheme from ``schemes`` and a host; ValueError otherwise."""
    try:
        parts = urlsplit(url)
    except ValueError as error:
        raise ValueError(f"malformed {what} {_redact_url(url)}: {error}") from error
    if parts.scheme.lower() not in schemes:
        raise ValueError(f"{what} must start with {' or '.join(s + '://' for s in schemes)}, "
                         f"not {_redact_url(url)!r}")
    if not parts.hostname:
        raise ValueError(f"{what} {_redact_url(url)!r} has no host")
    _port(parts, _redact_url(url))
    return parts


def _port(parts: SplitResult, shown: str) -> int | None:
    try:
        return parts.port
    except ValueError as error:
        raise ValueError(f"URL {shown!r} has a bad port: {error}") from error


def _redact_url(url: str) -> str:
    """``url`` with the password of its userinfo replaced by ``***`` (split as ``urlsplit``
    does: the authority ends at the first ``/``, ``?`` or ``#``; the host after its last ``@``).
    """
    scheme, separator, rest = url.partition("://")
    if not separator:
        return url
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    userinfo, at, hostport = rest[:end].rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{hostport}{rest[end:]}"


def _describe_http_error(error: BaseException) -> str:
    """A one-line account of a failed POST: status and a snippet of the answer, or the cause."""
    if isinstance(error, urllib.error.HTTPError):
        try:
            answer = error.read(ERROR_SNIPPET_MAX_CHARS).decode("utf-8", "replace")
        except (OSError, HTTPException):
            answer = ""
        snippet = _one_line(answer, ERROR_SNIPPET_MAX_CHARS)
        return f"HTTP {error.code} {error.reason}" + (f": {snippet}" if snippet else "")
    if isinstance(error, urllib.error.URLError):
        error = error.reason if isinstance(error.reason, BaseException) else error
    return _one_line(f"{type(error).__name__}: {error}", ERROR_SNIPPET_MAX_CHARS)


def _flag(value: str, what: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ValueError(f"{what} must be 1 or 0 (true/false), not {value!r}")


def _envelope_address(text: str) -> str:
    """The bare address of ``text`` (``a@b`` or ``Name <a@b>``); ValueError if not one address."""
    _, angle, rest = text.strip().partition("<")
    address = rest.removesuffix(">").strip() if angle else text.strip()
    local, at, domain = address.partition("@")
    if (not (local and at and domain) or (angle and not rest.endswith(">"))
            or any(c.isspace() or c in ',<>"()@' for c in local + domain) or "\n" in text):
        raise ValueError(f"not a single email address: {text!r}")
    return address


def _split_addresses(text: str) -> tuple[str, ...]:
    return tuple(address.strip() for address in text.split(",") if address.strip())


__all__ = [
    "ALERT_LOG_ATTRIBUTE", "Alert", "AlertDeliveryError", "AlertKind", "AlertReport",
    "AlertSettings", "AlertSink", "Alerter", "EmailSink", "LogSink", "WebhookSink",
]
