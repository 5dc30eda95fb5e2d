"""``Producer``: sends messages through a ``BrokerClient`` and names each with a client id.

Every message gets a ``UNIQ_KEY`` generated here, as RocketMQ's clients do, unless the caller
passes ``unique_key=`` (the outbox passes its own, already stored in the stub row; a caller
resending a message passes the id it had). User properties may not use system property names
(``UNIQ_KEY``, ``KEYS``, ``TAGS``, ``DELAY``, ...): they are refused with the argument to use,
as is an empty body, before anything is sent (``framework.validation``, which applies the rules
of ``storage_engine.formats.message_rules``); so is a ``delay_level`` outside 1..the broker's
level count (the client's ``delay_level_count``: RocketMQ's 18 over a network, an embedded
store's ``messageDelayLevel`` count in this process). ``deliver_at`` (an aware ``datetime`` or
epoch milliseconds) and ``delay`` (a ``timedelta``) ask for delivery at any moment instead
(RocketMQ 5 timers: ``TIMER_DELIVER_MS`` / ``TIMER_DELAY_MS``; at most the broker's
``timerMaxDelaySec`` ahead, 3 days by default, else the broker refuses the send; a moment in
the past delivers at once); a send takes one of ``delay_level``, ``deliver_at`` and ``delay``.
``cancel_timer(topic, msg_id)`` cancels a pending timer (RocketMQ 5's ``TIMER_DEL_UNIQKEY``).
The broker picks the queue: round-robin per topic, or by ``sharding_key`` so that all
messages of one key land in one queue in order (orderly consumers then see them in order);
``message_group`` is RocketMQ 5's name for it (also stored as ``__SHARDINGKEY``, as a gRPC
client's message group is). ``send`` returns the broker's own result, re-exported as
``SendResult`` (``msg_id`` is the ``UNIQ_KEY``). ``await send_async(...)`` is ``send`` for
coroutines: the blocking send runs in the running loop's default executor (with the caller's
contextvars), never on the loop. With a ``Tracing`` (``App(tracing=...)``) each send is a
PRODUCER span whose context the message carries (``framework.tracing``). Thread-safe.

``send_in_transaction`` is RocketMQ's transactional send (a half message, the local
transaction, then commit or rollback, with the broker's check-back; ``framework.transactions``).

``App.stop()`` closes its producer: a later send raises ``AppStateError`` instead of reopening
the store behind the caller's back (``app.start()`` gives the app a new producer).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from postbox.storage_engine import (
    Clock,
    Message,
    PutStatus,
    SendResult,
    SystemClock,
    retry_topic,
    validate_topic,
)
from postbox.storage_engine.contract import BrokerClient
from postbox.storage_engine.formats import (
    PROPERTY_DELAY,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELIVER_MS,
    delay_level_problem,
    empty_body_problem,
)
from postbox.storage_engine.formats.message_id import UniqueKeyGenerator

from .errors import AppStateError
from .tracing import Tracing
from .transactions import (
    DEFAULT_TRANSACTION_GROUP,
    Check,
    Execute,
    TransactionChecks,
    TransactionResult,
    end_local_transaction,
)
from .validation import InvalidMessageError, check_properties, check_unique_key, deliver_at_ms

MESSAGE_GROUP_LENGTH_MAX = 128
"""Longest ``message_group`` (as the gRPC endpoint accepts)."""
MARKER_LEAD_MS = 1000
"""How far ahead ``cancel_timer`` puts a delete marker by default (a broker refuses a marker
whose moment has passed; one second is Apache RocketMQ's timer precision)."""

SendStatus = PutStatus
"""How a send ended (RocketMQ's send statuses of a stored message): the store's ``PutStatus``,
whose ``PUT_OK`` is also spelled ``SEND_OK``."""


@dataclass(frozen=True)
class BatchMessage:
    """One message of ``Producer.send_batch`` (the topic and queue are the batch's)."""

    body: bytes | str
    tags: str | None = None
    keys: Iterable[str] | str | None = None
    properties: Mapping[str, str] | None = None
    unique_key: str | None = None
    """The message id (``UNIQ_KEY``); generated when None, as ``send`` does."""


def _checked_body(topic: str, body: bytes | str, properties: Mapping[str, str] | None,
                  unique_key: str | None) -> bytes:
    """A message's checks before any send: its body (text as UTF-8; a body that is not bytes
    at all is left to the broker client, which names it), properties and ``unique_key``."""
    if isinstance(body, str):
        body = body.encode("utf-8")
    if isinstance(body, bytes | bytearray | memoryview) and (
            problem := empty_body_problem(body)):
        raise InvalidMessageError(problem, topic=topic)
    check_properties(properties)
    if unique_key is not None:
        check_unique_key(unique_key)
    return body


def _batch_entry(topic: str, item: BatchMessage | bytes | str, ids: UniqueKeyGenerator
                 ) -> tuple[BatchMessage, bytes, str]:
    """``item`` checked as ``send`` checks a message, with its body and its id."""
    entry = item if isinstance(item, BatchMessage) else BatchMessage(item)
    body = _checked_body(topic, entry.body, entry.properties, entry.unique_key)
    return entry, body, entry.unique_key or ids.next()


def message_group_properties(topic: str, message_group: str | None, sharding_key: str | None
                   ) -> tuple[dict[str, str], str | None]:
    """(the ``__SHARDINGKEY`` property, the sharding key) of a send in ``message_group``."""
    if message_group is None:
        return {}, sharding_key
    if not isinstance(message_group, str) or not message_group.strip() \
            or len(message_group) > MESSAGE_GROUP_LENGTH_MAX or not message_group.isprintable():
        raise InvalidMessageError(f"message_group must be 1..{MESSAGE_GROUP_LENGTH_MAX} "
                                  f"printable characters, got {message_group!r}", topic=topic)
    if sharding_key is not None and sharding_key != message_group:
        raise InvalidMessageError("message_group is the sharding key: pass one of the two",
                                  topic=topic)
    return {PROPERTY_SHARDING_KEY: message_group}, message_group


class Producer:
    """Send messages; create through ``App.producer``."""

    def __init__(self, client: BrokerClient, *, clock: Clock | None = None,
                 id_generator: UniqueKeyGenerator | None = None,
                 tracing: Tracing | None = None) -> None:
        self._client = client
        self._tracing = None if tracing is None else tracing.for_client(client)
        clock = clock or SystemClock()
        self._clock = clock
        self._ids = id_generator or UniqueKeyGenerator(clock.now_ms)
        # a remote broker clamps a higher level to its last; the producer refuses it instead
        self._delay_level_count = client.delay_level_count
        self._closed_by: str | None = None
        self._checks = TransactionChecks(client)

    def close(self, reason: str = "the producer was closed") -> None:
        """Refuse every later send with ``AppStateError`` saying ``reason`` (``App.stop``
        closes the app's producer this way; the broker connection is the app's to close).
        Its transaction checks are unregistered."""
        self._closed_by = reason
        self._checks.close()

    def _check_open(self, topic: str) -> None:
        if self._closed_by is not None:
            raise AppStateError(f"cannot send to {topic!r}: {self._closed_by}")

    def _delay_property(self, topic: str, delay_level: int | None) -> str | None:
        """The ``DELAY`` property of a send asking for ``delay_level`` (None: not delayed);
        a level outside 1..the level count raises ``InvalidMessageError``."""
        if delay_level is None or delay_level == 0:
            return None
        problem = delay_level_problem(delay_level)
        if problem is None and delay_level > self._delay_level_count:
            problem = (f"delay_level must be an int in 1..{self._delay_level_count} (the "
                       f"broker's delay levels, messageDelayLevel), got {delay_level!r}")
        if problem:
            raise InvalidMessageError(problem, topic=topic)
        return str(delay_level)

    def _schedule_properties(self, topic: str, delay_level: int | None,
                             deliver_at: datetime | int | None,
                             delay: timedelta | None) -> dict[str, str]:
        """The ``DELAY`` or timer property of a send (empty: not scheduled)."""
        asked = [name for name, value in (("delay_level", delay_level),
                                          ("deliver_at", deliver_at), ("delay", delay))
                 if value is not None and value != 0]
        if len(asked) > 1:
            raise InvalidMessageError(f"a send takes one of delay_level, deliver_at and delay, "
                                      f"got {' and '.join(asked)}", topic=topic)
        if (level := self._delay_property(topic, delay_level)) is not None:
            return {PROPERTY_DELAY: level}
        if deliver_at is not None:
            return {PROPERTY_TIMER_DELIVER_MS: str(deliver_at_ms(topic, deliver_at))}
        if delay is not None:
            if not isinstance(delay, timedelta) or delay < timedelta(0):
                raise InvalidMessageError(f"delay must be a timedelta >= 0, got {delay!r}",
                                          topic=topic)
            return {PROPERTY_TIMER_DELAY_MS: str(delay // timedelta(milliseconds=1))}
        return {}

    def new_message_id(self) -> str:
        """A fresh ``UNIQ_KEY`` (the outbox stores it before sending)."""
        return self._ids.next()

    def send(self, topic: str, body: bytes | str, *, tags: str | None = None,
             keys: Iterable[str] | str | None = None, delay_level: int | None = None,
             properties: Mapping[str, str] | None = None, sharding_key: str | None = None,
             queue_id: int | None = None, unique_key: str | None = None,
             deliver_at: datetime | int | None = None,
             delay: timedelta | None = None, message_group: str | None = None) -> SendResult:
        """Store one message; returns where it went.

        Args:
            delay_level: 1..18 (1..the level count of an embedded store's
                ``messageDelayLevel``); the message becomes visible after that level's delay.
            deliver_at: the moment the message becomes visible (an aware ``datetime`` or
                epoch milliseconds; RocketMQ 5's ``TIMER_DELIVER_MS``).
            delay: how long after the send it becomes visible (``TIMER_DELAY_MS``).
            sharding_key: messages with equal keys go to the same queue (ordered messages).
            message_group: RocketMQ 5's FIFO message group: the ``__SHARDINGKEY`` property
                (what a gRPC client's ``message_group`` becomes) and the sharding key, so one
                group's messages land in one queue in send order.
            unique_key: the message id (``UNIQ_KEY``) to use instead of a generated one: a
                resend with the same id is the same message to idempotent handlers.
            properties: user properties; system names (``UNIQ_KEY``, ``KEYS``, ``TAGS``,
                ``DELAY``, ...) raise ``InvalidMessageError`` naming the argument to use.

        Raises:
            InvalidMessageError: an empty body, a reserved property, a bad ``unique_key``, a
                ``delay_level`` outside 1..18, a naive ``deliver_at``, more than one way of
                scheduling, or (from the broker) a timer beyond ``timerMaxDelaySec``; nothing
                was sent.
            AppStateError: the app that made this producer was stopped.
        """
        self._check_open(topic)
        body = _checked_body(topic, body, properties, unique_key)
        group, sharding_key = message_group_properties(topic, message_group, sharding_key)
        merged = {**(properties or {}), **group,
                  **self._schedule_properties(topic, delay_level, deliver_at, delay)}
        msg_id = unique_key or self._ids.next()

        def deliver(sent_properties: dict[str, str]) -> SendResult:
            message = Message(topic, body, tags=tags, keys=keys, properties=sent_properties,
                              unique_key=msg_id)
            return self._client.send(message, queue_id=queue_id, sharding_key=sharding_key)

        if self._tracing is None:
            return deliver(merged)
        return self._tracing.publish(topic, merged, deliver, message_id=msg_id, tags=tags,
                                     remote=self._client.remote)

    def cancel_timer(self, topic: str, unique_key: str, *,
                     deliver_at: datetime | int | None = None) -> SendResult:
        """Cancel the pending timer message of ``topic`` whose id (``UNIQ_KEY``, the
        ``msg_id`` its send returned) is ``unique_key``: it is never delivered. This sends
        RocketMQ 5's delete marker (``TIMER_DEL_UNIQKEY``), which consumers never see; a timer
        delivered already is not recalled.

        Args:
            deliver_at: the marker's own moment (default one second from now: a broker
                refuses a marker whose moment has passed, as Apache RocketMQ does). Postbox
                cancels whatever it is, and a marker sent before its target waits for the
                target until then; an Apache RocketMQ broker matches a marker only with a
                target of the same second, so pass the target's ``deliver_at`` there.

        Raises:
            InvalidMessageError: a bad ``unique_key`` or ``deliver_at``.
            AppStateError: the app that made this producer was stopped.
        """
        self._check_open(topic)
        check_unique_key(unique_key)
        moment = (self._clock.now_ms() + MARKER_LEAD_MS if deliver_at is None
                  else deliver_at_ms(topic, deliver_at))
        marker = Message(topic, b"TIMER_DEL_UNIQKEY", properties={
            PROPERTY_TIMER_DEL_UNIQKEY: unique_key, PROPERTY_TIMER_DELIVER_MS: str(moment)},
            unique_key=self._ids.next())
        return self._client.send(marker)

    def send_in_transaction(self, topic: str, body: bytes | str, *, execute: Execute,
                            check: Check, group: str = DEFAULT_TRANSACTION_GROUP,
                            tags: str | None = None, keys: Iterable[str] | str | None = None,
                            properties: Mapping[str, str] | None = None,
                            sharding_key: str | None = None, queue_id: int | None = None,
                            unique_key: str | None = None) -> TransactionResult:
        """Send a message in a local transaction (RocketMQ's transactional message): store it
        as a half, run ``execute(half_result)``, then commit or roll it back as it says;
        ``check(message)`` answers the broker's later questions about halves of ``group``
        whose outcome it did not learn (``framework.transactions`` has the rules).

        Returns:
            The half's send result, the local outcome, whether the end reached the broker
            and, embedded, where the committed message went.

        Raises:
            InvalidMessageError: as ``send``; nothing was sent.
            AppStateError: the app that made this producer was stopped.
            Exception: whatever ``execute`` raised (the half is then left to ``check``).
        """
        self._check_open(topic)
        body = _checked_body(topic, body, properties, unique_key)
        self._checks.set(group, check)
        msg_id = unique_key or self._ids.next()

        def run(sent_properties: dict[str, str]) -> TransactionResult:
            message = Message(topic, body, tags=tags, keys=keys, properties=sent_properties,
                              unique_key=msg_id)
            half = self._client.send_half(message, group, queue_id=queue_id,
                                          sharding_key=sharding_key)
            return end_local_transaction(self._client, group, half, execute)

        if self._tracing is None:
            return run(dict(properties or {}))
        return self._tracing.transaction(topic, dict(properties or {}), run, message_id=msg_id,
                                         tags=tags, remote=self._client.remote)

    def register_transaction_check(self, check: Check, *,
                                   group: str = DEFAULT_TRANSACTION_GROUP) -> None:
        """Answer the broker's checks of ``group``'s halves with ``check`` from now on, before
        any ``send_in_transaction``: a restarted process answers for halves its predecessor
        left pending."""
        self._check_open(group)
        self._checks.set(group, check)

    def send_to_group(self, consumer_group: str, topic: str, body: bytes | str, *,
                      tags: str | None = None, keys: Iterable[str] | str | None = None,
                      properties: Mapping[str, str] | None = None,
                      unique_key: str | None = None) -> SendResult:
        """Deliver a message of ``topic`` to one consumer group only: it is stored in the
        group's retry topic (``%RETRY%group``) with ``RETRY_TOPIC`` = ``topic``, which every
        clustering consumer of the group pulls and restores to ``topic`` before its handler
        sees it (RocketMQ's clients do the same), while the other groups of ``topic`` never
        see it. The outbox resends a message one group lost this way. Checks as ``send``;
        the result names the retry topic's queue and offset.
        """
        self._check_open(topic)
        validate_topic(topic)
        body = _checked_body(topic, body, properties, unique_key)
        msg_id = unique_key or self._ids.next()
        target = retry_topic(consumer_group)

        def deliver(sent_properties: dict[str, str]) -> SendResult:
            message = Message(target, body, tags=tags, keys=keys,
                              properties={**sent_properties, PROPERTY_RETRY_TOPIC: topic},
                              unique_key=msg_id)
            return self._client.send(message, queue_id=0)  # a retry topic has one queue

        if self._tracing is None:
            return deliver(dict(properties or {}))
        return self._tracing.publish(topic, dict(properties or {}), deliver, message_id=msg_id,
                                     tags=tags, remote=self._client.remote)

    def send_batch(self, topic: str, messages: Sequence[BatchMessage | bytes | str], *,
                   queue_id: int | None = None, sharding_key: str | None = None
                   ) -> list[SendResult]:
        """Store messages of one topic in one queue, at consecutive offsets, with one call
        (RocketMQ's batch send; one append at the broker). Each message is checked as ``send``
        checks it and gets its own id, result and PRODUCER span; the queue is picked once, as
        ``send`` picks it. The batch is stored whole or not at all. A batch cannot be delayed.

        Raises:
            InvalidMessageError: no message, an empty body, a reserved property or a bad
                ``unique_key``, or a batch over the size of one send; nothing was sent.
            AppStateError: the app that made this producer was stopped.
        """
        self._check_open(topic)
        if not messages:
            raise InvalidMessageError("a batch needs at least one message", topic=topic)
        entries = [_batch_entry(topic, item, self._ids) for item in messages]

        def deliver(sent: list[dict[str, str]]) -> list[SendResult]:
            batch = [Message(topic, body, tags=entry.tags, keys=entry.keys,
                             properties=properties, unique_key=msg_id)
                     for (entry, body, msg_id), properties in zip(entries, sent, strict=True)]
            return self._client.send_batch(batch, queue_id=queue_id, sharding_key=sharding_key)

        if self._tracing is None:
            return deliver([dict(entry.properties or {}) for entry, _, _ in entries])
        published = [(dict(entry.properties or {}), msg_id, entry.tags)
                     for entry, _, msg_id in entries]
        return self._tracing.publish_batch(topic, published, deliver,
                                           remote=self._client.remote)

    async def send_async(self, topic: str, body: bytes | str, *, tags: str | None = None,
                         keys: Iterable[str] | str | None = None,
                         delay_level: int | None = None,
                         properties: Mapping[str, str] | None = None,
                         sharding_key: str | None = None, queue_id: int | None = None,
                         unique_key: str | None = None,
                         deliver_at: datetime | int | None = None,
                         delay: timedelta | None = None,
                         message_group: str | None = None) -> SendResult:
        """``send`` for coroutines (same arguments, checks, result and errors): the send runs
        in a worker thread of the running loop's default executor, in a copy of the caller's
        contextvars, so the loop keeps serving while the store (or remote broker) answers."""
        send = functools.partial(self.send, topic, body, tags=tags, keys=keys,
                                 delay_level=delay_level, properties=properties,
                                 sharding_key=sharding_key, queue_id=queue_id,
                                 unique_key=unique_key, deliver_at=deliver_at, delay=delay,
                                 message_group=message_group)
        return await asyncio.to_thread(send)

    async def send_batch_async(self, topic: str,
                               messages: Sequence[BatchMessage | bytes | str], *,
                               queue_id: int | None = None, sharding_key: str | None = None
                               ) -> list[SendResult]:
        """``send_batch`` for coroutines (same arguments, checks, results and errors), run as
        ``send_async`` runs ``send``: in a worker thread, with the caller's contextvars."""
        send = functools.partial(self.send_batch, topic, list(messages), queue_id=queue_id,
                                 sharding_key=sharding_key)
        return await asyncio.to_thread(send)
