"""``Producer``: sends messages through a ``BrokerClient`` and names each with a client id.

Every message gets a ``UNIQ_KEY`` generated here, as RocketMQ's clients do (the outbox passes
its own, already stored in the stub row). The broker picks the queue: round-robin per topic, or
by ``sharding_key`` so that all messages of one key land in one queue in order (orderly
consumers then see them in order). Thread-safe.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from storage_engine import Clock, Message, PutStatus, SendReceipt, SystemClock
from storage_engine.formats import PROPERTY_DELAY

from .errors import ConfigurationError
from .message_id import UniqueKeyGenerator
from .transport import BrokerClient


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
            unique_key: the message id to use instead of a generated one.
        """
        if isinstance(body, str):
            body = body.encode("utf-8")
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
