"""``Producer``: sends messages through a ``BrokerClient`` and names each with a client id.

Every message gets a ``UNIQ_KEY`` generated here, as RocketMQ's clients do, unless the caller
passes ``unique_key=`` (the outbox passes its own, already stored in the stub row; a caller
resending a message passes the id it had). User properties may not use system property names
(``UNIQ_KEY``, ``KEYS``, ``TAGS``, ``DELAY``, ...): they are refused with the argument to use,
as is an empty body, before anything is sent (``framework.validation``). The broker picks the
queue: round-robin per topic, or by ``sharding_key`` so that all messages of one key land in one
queue in order (orderly consumers then see them in order). Thread-safe.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from storage_engine import Clock, Message, PutStatus, SendReceipt, SystemClock
from storage_engine.formats import EMPTY_BODY_PROBLEM, PROPERTY_DELAY

from .errors import ConfigurationError
from .message_id import UniqueKeyGenerator
from .transport import BrokerClient
from .validation import InvalidMessageError, check_properties

UNIQUE_KEY_LENGTH_MAX = 128
"""Longest ``unique_key=`` (the outbox's ``message_id`` column holds 128 characters)."""


class SendStatus(enum.Enum):
    """RocketMQ's send statuses that a stored message can have."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"  # stored, but a SYNC flush did not confirm it
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"  # stored; SYNC_MASTER: no slave ack in time
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"  # stored; SYNC_MASTER: no slave in sync


@dataclass(frozen=True, slots=True)
class SendResult:
    """What ``Producer.send`` returns."""

    msg_id: str
    """``UNIQ_KEY``: the id consumers, the outbox and idempotency use."""
    offset_msg_id: str
    """The broker-side id (store host + log position), for ``view_message_by_id``."""
    topic: str
    queue_id: int
    queue_offset: int
    """Offset in ``queue_id`` — for a delayed message, in the delay topic's queue."""
    log_position: int
    store_timestamp_ms: int
    delay_level: int
    status: SendStatus

    @classmethod
    def from_receipt(cls, receipt: SendReceipt, msg_id: str) -> SendResult:
        """Build from the broker's receipt and the message id."""
        status = (SendStatus.SEND_OK if receipt.status is PutStatus.PUT_OK
                  else SendStatus(receipt.status.value))
        return cls(msg_id, receipt.offset_msg_id, receipt.topic, receipt.queue_id,
                   receipt.queue_offset, receipt.log_position, receipt.store_timestamp_ms,
                   receipt.delay_level, status)


class Producer:
    """Send messages; create through ``App.producer``."""

    def __init__(self, client: BrokerClient, *, clock: Clock | None = None,
                 id_generator: UniqueKeyGenerator | None = None) -> None:
        self._client = client
        clock = clock or SystemClock()
        self._ids = id_generator or UniqueKeyGenerator(clock.now_ms)

    def new_message_id(self) -> str:
        """A fresh ``UNIQ_KEY`` (the outbox stores it before sending)."""
        return self._ids.next()

    def send(self, topic: str, body: bytes | str, *, tags: str | None = None,
             keys: Iterable[str] | str | None = None, delay_level: int | None = None,
             properties: Mapping[str, str] | None = None, sharding_key: str | None = None,
             queue_id: int | None = None, unique_key: str | None = None) -> SendResult:
        """Store one message; returns where it went.

        Args:
            delay_level: 1..18 (levels above the configured maximum are clamped); the message
                becomes visible after that level's delay.
            sharding_key: messages with equal keys go to the same queue (ordered messages).
            unique_key: the message id (``UNIQ_KEY``) to use instead of a generated one: a
                resend with the same id is the same message to idempotent handlers.
            properties: user properties; system names (``UNIQ_KEY``, ``KEYS``, ``TAGS``,
                ``DELAY``, ...) raise ``InvalidMessageError`` naming the argument to use.

        Raises:
            InvalidMessageError: an empty body, a reserved property or a bad ``unique_key``;
                nothing was sent.
        """
        if isinstance(body, str):
            body = body.encode("utf-8")
        if isinstance(body, bytes | bytearray | memoryview) and not body:
            raise InvalidMessageError(EMPTY_BODY_PROBLEM)
        check_properties(properties)
        if unique_key is not None:
            check_unique_key(unique_key)
        merged = dict(properties or {})
        if delay_level is not None and delay_level != 0:
            if type(delay_level) is not int or delay_level < 0:
                raise ConfigurationError(f"delay_level must be an int in 1..18, got "
                                         f"{delay_level!r}")
            merged[PROPERTY_DELAY] = str(delay_level)
        msg_id = unique_key or self._ids.next()
        message = Message(topic, body, tags=tags, keys=keys, properties=merged,
                          unique_key=msg_id)
        receipt = self._client.send(message, queue_id=queue_id, sharding_key=sharding_key)
        return SendResult.from_receipt(receipt, msg_id)


def check_unique_key(unique_key: object) -> None:
    """Raise ``InvalidMessageError`` unless ``unique_key`` can be a message id: a non-blank
    string of at most ``UNIQUE_KEY_LENGTH_MAX`` characters without U+0001/U+0002 (they frame
    the record's properties)."""
    if not isinstance(unique_key, str) or not unique_key.strip():
        raise InvalidMessageError(f"unique_key must be a non-blank string, got {unique_key!r}")
    if len(unique_key) > UNIQUE_KEY_LENGTH_MAX:
        raise InvalidMessageError(f"unique_key is {len(unique_key)} characters; at most "
                                  f"{UNIQUE_KEY_LENGTH_MAX} allowed")
    if "\x01" in unique_key or "\x02" in unique_key:
        raise InvalidMessageError(f"unique_key {unique_key!r} contains U+0001 or U+0002")
