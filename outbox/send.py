"""``outbox.send``: write a message stub inside the caller's own database transaction.

The stub commits or rolls back with the business rows next to it, so a message exists exactly
when the business change does. Nothing is published here: when a ``Relay`` watches the engine,
the id is handed to it once the transaction has committed (``outbox.commit_hook``); otherwise,
and whenever the hand-off is missed, the relay's polling finds the stub. Everything is validated
before the insert, so a bad message raises with nothing written. With OpenTelemetry installed
the caller's current trace context (``traceparent``/``tracestate``) is stored among the stub's
properties, so the relay's send span continues the business transaction's trace
(``framework.tracing``); a ``traceparent`` the caller passed is kept.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Coroutine, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict, Unpack, overload

from sqlalchemy import Connection, insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session

from postbox.framework import UniqueKeyGenerator, check_message, check_unique_key
from postbox.framework.producer import message_group_properties
from postbox.framework.tracing import inject_current_context
from postbox.framework.validation import (
    PROPERTY_ARGUMENTS,
    PROPERTY_TIMER_DELIVER_MS,
    InvalidMessageError,
    deliver_at_ms,
)

from .async_send import check_async_transaction, run_sync_in_transaction
from .clock import utc_now
from .database import explaining_missing_tables
from .errors import BodyNotSerializableError, NoTransactionError
from .tables import MESSAGE_ID_LENGTH, StubStatus, message_stub

RELAY_EXECUTION_OPTION = "postbox_outbox_relay"
"""Engine execution option holding the ``CommitHook`` of a watching ``Relay``; ``send`` reports
each id it writes to it (``written(connection, message_id)``)."""
GROUPS_EXECUTION_OPTION = "postbox_outbox_groups"
"""Engine execution option holding the consumer groups declared to an ``Outbox`` (topic →
``expected_groups`` text); ``send`` stores the topic's on each stub it writes."""
SEND_ARGUMENTS = {**{name: argument for name, argument in PROPERTY_ARGUMENTS.items()
                     if argument != "sharding_key="}, "UNIQ_KEY": "message_id="}
"""The ``send`` argument for each system property (``properties=`` may not set them)."""
_INSERT_STUB = insert(message_stub)
"""Built once; the values travel as parameters (building ``.values(...)`` per call costs more
CPU than the insert)."""


class SendOptions(TypedDict, total=False):
    """The keyword arguments of ``send`` (for its typing overloads)."""

    tags: str | None
    keys: Iterable[str] | str | None
    delay_level: int | None
    properties: Mapping[str, str] | None
    message_id: str | None
    now: datetime | None
    deliver_at: datetime | int | None
    delay: timedelta | None
    message_group: str | None


@overload
def send(session_or_connection: Session | Connection, topic: str, body: Any,
         **options: Unpack[SendOptions]) -> str: ...
@overload
def send(session_or_connection: AsyncSession | AsyncConnection, topic: str, body: Any,
         **options: Unpack[SendOptions]) -> Coroutine[Any, Any, str]: ...
def send(session_or_connection: Session | Connection | AsyncSession | AsyncConnection,
         topic: str, body: Any, *,
         tags: str | None = None, keys: Iterable[str] | str | None = None,
         delay_level: int | None = None, properties: Mapping[str, str] | None = None,
         message_id: str | None = None, now: datetime | None = None,
         deliver_at: datetime | int | None = None, delay: timedelta | None = None,
         message_group: str | None = None) -> str | Coroutine[Any, Any, str]:
    """Insert a stub for a message in the caller's open transaction; return its message id.

    With an ``AsyncSession`` or ``AsyncConnection`` this returns an awaitable instead
    (``message_id = await outbox.send(session, ...)``): everything is checked before it is
    returned, the insert runs when it is awaited (``outbox.async_send``).

    Args:
        session_or_connection: a SQLAlchemy ``Session`` or ``Connection`` (or their asyncio
            forms) with a transaction in progress (``with Session.begin()``, ``with
            engine.begin()``, ``async with AsyncSession.begin()``, or after the session's
            first statement). Without one this raises ``NoTransactionError``.
        body: ``bytes``; ``str`` (sent as UTF-8); anything else is sent as compact JSON. An
            empty body is refused (RocketMQ refuses them), as in ``Producer.send``.
        properties: user properties; system names (``UNIQ_KEY``, ``KEYS``, ``TAGS``,
            ``DELAY``, ...) are refused with the argument to use (``message_id=``, ``keys=``,
            ``tags=``, ``delay_level=``).
        message_id: the ``UNIQ_KEY`` to use (default: a new one, as RocketMQ's clients make).
        now: creation time (naive UTC); tests pass a fixed one.
        deliver_at: the moment the message becomes visible to consumers (an aware
            ``datetime`` or epoch milliseconds); stored in the stub's properties as
            ``TIMER_DELIVER_MS``, which the relay publishes (a timer message), so a late
            publish does not move it (one past it is delivered at once).
        delay: how long after this call the message becomes visible: turned into the
            absolute ``deliver_at`` now (from ``now`` when given). One of ``delay_level``,
            ``deliver_at`` and ``delay``.
        message_group: the FIFO message group (``Producer.send(message_group=)``: the
            ``__SHARDINGKEY`` property, one queue per group). The relay publishes the stubs of
            one group in the order they were sent (``created_at``, then message id), each only
            once every earlier stub of the group is published (or void); a stub that fails
            holds back its group alone. Not with a delay or timer (a FIFO message is not
            scheduled).

    Raises:
        MissingTablesError: the database has no ``message_stub`` table (or an old one): run
            ``postbox db upgrade``.
    """
    if isinstance(session_or_connection, AsyncSession | AsyncConnection):
        check_async_transaction(session_or_connection)
        row = stub_values(topic, body, tags=tags, keys=keys, delay_level=delay_level,
                          properties=properties, message_id=message_id, now=now,
                          deliver_at=deliver_at, delay=delay, message_group=message_group)
        return run_sync_in_transaction(session_or_connection, functools.partial(insert_stub,
                                                                                row=row))
    connection = _transaction_connection(session_or_connection)
    row = stub_values(topic, body, tags=tags, keys=keys, delay_level=delay_level,
                      properties=properties, message_id=message_id, now=now,
                      deliver_at=deliver_at, delay=delay, message_group=message_group)
    return insert_stub(connection, row)


def stub_values(topic: str, body: Any, *, tags: str | None,
                keys: Iterable[str] | str | None, delay_level: int | None,
                properties: Mapping[str, str] | None, message_id: str | None,
                now: datetime | None, deliver_at: datetime | int | None = None,
                delay: timedelta | None = None, message_group: str | None = None
                ) -> dict[str, Any]:
    """The checked column values of a new stub (see ``send``); raises before anything is
    written."""
    content = encode_body(body)
    key_list = check_message(topic, content, tags=tags, keys=keys, properties=properties,
                             delay_level=delay_level, arguments=SEND_ARGUMENTS)
    created = now or utc_now()
    timer_ms = _deliver_ms(topic, created, delay_level, deliver_at, delay)
    message_group_properties(topic, message_group, None)  # raises on a bad group
    if message_group is not None and (timer_ms is not None or delay_level):
        raise InvalidMessageError("a message of a message_group is delivered in order, not "
                                  "delayed: pass message_group or a delay, not both",
                                  topic=topic)
    properties = inject_current_context(properties)
    if timer_ms is not None:
        properties = {**(properties or {}), PROPERTY_TIMER_DELIVER_MS: str(timer_ms)}
    if message_id is None:
        message_id = _id_generator(os.getpid()).next()
    else:
        check_unique_key(message_id, "message_id", MESSAGE_ID_LENGTH)
    return {
        "message_id": message_id, "topic": topic, "tags": tags,
        "keys": " ".join(key_list) or None, "content": content,
        "properties": json.dumps(dict(properties), sort_keys=True) if properties else None,
        "delay_level": delay_level or None, "status": StubStatus.UNCONFIRMED.value,
        "send_count": 0, "next_resend_at": created, "created_at": created,
        "updated_at": created, "message_group": message_group}


def _deliver_ms(topic: str, created: datetime, delay_level: int | None,
                deliver_at: datetime | int | None, delay: timedelta | None) -> int | None:
    """The absolute deliver time (epoch ms) a send asks for, None: none."""
    asked = [name for name, value in (("delay_level", delay_level), ("deliver_at", deliver_at),
                                      ("delay", delay)) if value not in (None, 0)]
    if len(asked) > 1:
        raise InvalidMessageError(f"a send takes one of delay_level, deliver_at and delay, "
                                  f"got {', '.join(asked)}", topic=topic)
    if deliver_at is not None:
        return deliver_at_ms(topic, deliver_at)
    if delay is None:
        return None
    if not isinstance(delay, timedelta) or delay < timedelta(0):
        raise InvalidMessageError(f"delay must be a timedelta >= 0, got {delay!r}", topic=topic)
    return deliver_at_ms(topic, created.replace(tzinfo=UTC) + delay)


def insert_stub(connection: Connection, row: dict[str, Any]) -> str:
    """Insert the stub ``row`` (with the consumer groups declared for its topic to an
    ``Outbox`` on the engine), report its id to a watching relay's commit hook and return it.
    ``connection`` is sync: for an async one its ``sync_connection`` (``run_sync``), whose
    events and execution options are those of the async engine's ``sync_engine``."""
    check_not_autocommit(connection)
    options = connection.get_execution_options()
    declared = options.get(GROUPS_EXECUTION_OPTION)
    if declared and row.get("expected_groups") is None:
        row = {**row, "expected_groups": declared.get(row["topic"])}
    with explaining_missing_tables("outbox.send"):
        connection.execute(_INSERT_STUB, row)
    message_id: str = row["message_id"]
    hook = options.get(RELAY_EXECUTION_OPTION)
    if hook is not None:
        hook.written(connection, message_id)
    return message_id


def encode_body(body: Any) -> bytes:
    """The stored bytes of ``body`` (see ``send``)."""
    if isinstance(body, bytes):
        return body
    if isinstance(body, bytearray | memoryview):
        return bytes(body)
    if isinstance(body, str):
        try:
            return body.encode("utf-8")
        except UnicodeEncodeError as error:
            raise BodyNotSerializableError(f"body text is not valid Unicode: {error}") from error
    try:
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as error:
        raise BodyNotSerializableError(
            f"body of type {type(body).__name__} is not bytes, text or JSON-serialisable: "
            f"{error}") from error


def _transaction_connection(target: Session | Connection) -> Connection:
    if isinstance(target, Session):
        if not target.in_transaction():
            raise NoTransactionError("outbox.send needs an open transaction: use "
                                     "`with Session.begin() as session:` (or session.begin())")
        connection = target.connection()
    elif isinstance(target, Connection):
        if not target.in_transaction():
            raise NoTransactionError("outbox.send needs an open transaction: use "
                                     "`with engine.begin() as connection:`")
        connection = target
    else:
        raise TypeError(f"outbox.send needs a SQLAlchemy Session or Connection (or an "
                        f"AsyncSession / AsyncConnection), got {type(target).__name__}")
    return connection


def check_not_autocommit(connection: Connection) -> None:
    """Refuse a connection in AUTOCOMMIT mode: the stub would commit on its own."""
    if connection.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
        raise NoTransactionError("outbox.send needs a real transaction; this connection is in "
                                 "AUTOCOMMIT mode, so the stub would commit on its own")


@functools.cache
def _id_generator(pid: int) -> UniqueKeyGenerator:
    """One generator per process (keyed by pid, so a forked worker makes its own)."""
    return UniqueKeyGenerator()


__all__ = ["GROUPS_EXECUTION_OPTION", "RELAY_EXECUTION_OPTION", "SendOptions", "encode_body",
           "insert_stub", "send", "stub_values"]
