"""Structured logs: one JSON object per line, carrying the message being consumed.

While a consume thread handles a message, the consumer sets the message's fields for that
thread (``message_log_context``, a ``ContextVar``: each thread and each asyncio task sees its
own; a coroutine started from the thread inherits them): ``topic`` (the original topic of a
retry), ``group``, ``queue`` (the queue id read from), ``offset`` (its queue offset) and
``msg_id`` (the ``UNIQ_KEY``; a batch adds ``msg_ids`` and ``batch_size``). Every log line
written meanwhile — by the handler, the middleware or the consumer's own code for that message —
gets them. ``JsonFormatter`` writes each record as one JSON object: ``time`` (UTC, ISO 8601,
milliseconds), ``level``, ``logger``, ``message``, those fields, ``trace_id``/``span_id`` of
the current OpenTelemetry span (only if ``opentelemetry.trace`` was imported by someone: this
module never imports it), the caller's ``extra=`` attributes, and ``exception`` / ``stack``
text. ``TextFormatter`` appends the same fields as ``key=value`` to a classic line.

``configure_logging(LogFormat.JSON)`` (or ``"json"``) puts one such handler on the root logger
for an application; ``postbox --log-format json`` (or ``POSTBOX_LOG_FORMAT=json``) does it for
the command line. The formatters and the filter are thread-safe (no state of their own).
"""

from __future__ import annotations

import contextlib
import datetime
import enum
import json
import logging
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import IO, Any

from postbox.storage_engine import MessageView
from postbox.storage_engine.formats import original_topic

from .errors import ConfigurationError

FIELDS_ATTRIBUTE = "postbox_fields"
"""Record attribute where ``MessageFieldsFilter`` puts the fields (for handlers that format
later, in another thread: a ``QueueHandler``)."""
HANDLER_MARK = "postbox_configured"
"""Attribute marking the root handler ``configure_logging`` installed (replaced on a re-call)."""
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

_message_fields: ContextVar[Mapping[str, Any] | None] = ContextVar(
    "postbox_message_log_fields", default=None)
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message", "asctime", FIELDS_ATTRIBUTE}


class LogFormat(enum.Enum):
    """How log records are written."""

    TEXT = "text"
    JSON = "json"


@contextlib.contextmanager
def message_log_context(group: str, views: Sequence[MessageView]) -> Iterator[None]:
    """Log lines written in this block (this thread or task) carry the fields of ``views``
    (one handler call's messages, of consumer group ``group``)."""
    first = views[0]
    fields: dict[str, Any] = {
        "topic": original_topic(first.topic, first.properties), "group": group,
        "queue": first.queue_id, "offset": first.queue_offset,
        "msg_id": first.unique_key or first.msg_id}
    if len(views) > 1:
        fields["msg_ids"] = [view.unique_key or view.msg_id for view in views]
        fields["batch_size"] = len(views)
    token = _message_fields.set(fields)
    try:
        yield
    finally:
        _message_fields.reset(token)


def current_log_fields() -> dict[str, Any]:
    """The current message's fields and trace ids (empty outside a handler and a span)."""
    fields = dict(_message_fields.get() or {})
    trace = sys.modules.get("opentelemetry.trace")  # never imported here
    if trace is not None:
        span_context = trace.get_current_span().get_span_context()
        if span_context.is_valid:
            fields["trace_id"] = f"{span_context.trace_id:032x}"
            fields["span_id"] = f"{span_context.span_id:016x}"
    return fields


class MessageFieldsFilter(logging.Filter):
    """Stores ``current_log_fields()`` on each record (``FIELDS_ATTRIBUTE``) as it is logged,
    so a formatter running later or elsewhere still sees them; never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Attach the fields (once) and keep the record."""
        if not hasattr(record, FIELDS_ATTRIBUTE):
            setattr(record, FIELDS_ATTRIBUTE, current_log_fields())
        return True


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The message and trace fields of ``record``, then its ``extra=`` attributes."""
    fields = getattr(record, FIELDS_ATTRIBUTE, None)
    merged = dict(current_log_fields() if fields is None else fields)
    for name, value in vars(record).items():
        if name not in _RECORD_ATTRIBUTES and not name.startswith("_"):
            merged.setdefault(name, value)
    return merged


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        document: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        for name, value in record_fields(record).items():
            document.setdefault(name, value)
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            document["stack"] = self.formatStack(record.stack_info)
        return json.dumps(document, ensure_ascii=False, default=repr)


class TextFormatter(logging.Formatter):
    """A classic line with the message and trace fields appended as ``key=value``."""

    def __init__(self, fmt: str = TEXT_FORMAT) -> None:
        super().__init__(fmt)

    def format(self, record: logging.LogRecord) -> str:
        """The classic line, then the fields."""
        line = super().format(record)
        fields = getattr(record, FIELDS_ATTRIBUTE, None)
        fields = current_log_fields() if fields is None else fields
        if not fields:
            return line
        return line + " " + " ".join(f"{name}={value}" for name, value in fields.items())


def log_handler(log_format: LogFormat | str, stream: IO[str] | None = None) -> logging.Handler:
    """A stream handler (default: stderr) writing ``log_format`` with the message fields."""
    chosen = parse_log_format(log_format)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if chosen is LogFormat.JSON else TextFormatter())
    handler.addFilter(MessageFieldsFilter())
    return handler


def configure_logging(log_format: LogFormat | str = LogFormat.TEXT, *,
                      level: int = logging.INFO,
                      stream: IO[str] | None = None) -> logging.Handler:
    """Log records of ``level`` and above to ``stream`` (default: stderr) in ``log_format``
    from the root logger; return the handler. Calling it again replaces the handler it
    installed before (other handlers stay)."""
    handler = log_handler(log_format, stream)
    setattr(handler, HANDLER_MARK, True)
    root = logging.getLogger()
    for previous in [h for h in root.handlers if getattr(h, HANDLER_MARK, False)]:
        root.removeHandler(previous)
    root.addHandler(handler)
    root.setLevel(level)
    return handler


def parse_log_format(log_format: LogFormat | str) -> LogFormat:
    """``log_format`` as a ``LogFormat``; a ``ConfigurationError`` names the choices."""
    if isinstance(log_format, LogFormat):
        return log_format
    try:
        return LogFormat(str(log_format).lower())
    except ValueError:
        choices = ", ".join(choice.value for choice in LogFormat)
        raise ConfigurationError(f"log format {log_format!r}: one of {choices}") from None


__all__ = ["JsonFormatter", "LogFormat", "MessageFieldsFilter", "TextFormatter",
           "configure_logging", "current_log_fields", "log_handler", "message_log_context",
           "parse_log_format"]
