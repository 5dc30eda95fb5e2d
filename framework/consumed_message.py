"""``ConsumedMessage``: what a handler receives.

A thin, immutable wrapper over the stored record (``storage_engine.MessageView``) that restores
the original topic of a retried or dead-lettered message (a record read from ``%RETRY%group``
or ``%DLQ%group`` with a ``RETRY_TOPIC`` property shows that topic, reference §10.4:
``formats.original_topic``) and names the message by its client id (``UNIQ_KEY``) when it has
one, as RocketMQ's clients do. ``queue_id``/``queue_offset`` stay those of the queue the record
was read from; ``view`` is the raw record.
"""

from __future__ import annotations

from postbox.storage_engine import MessageView
from postbox.storage_engine.formats import PROPERTY_DLQ_REASON, original_topic
from postbox.storage_engine.formats.constants import PROPERTY_SHARDING_KEY


class ConsumedMessage:
    """One message as a handler sees it."""

    __slots__ = ("view", "consumer_group", "topic", "reconsume_count")

    def __init__(self, view: MessageView, consumer_group: str, *,
                 local_attempts: int = 0) -> None:
        self.view = view
        self.consumer_group = consumer_group
        self.topic = original_topic(view.topic, view.properties)
        self.reconsume_count = view.reconsume_count + local_attempts
        """How many times the message was delivered before (retry topic and orderly retries)."""

    @property
    def msg_id(self) -> str:
        """``UNIQ_KEY`` (the producer's id) when present, else the offsetMsgId."""
        return self.view.unique_key or self.view.msg_id

    @property
    def offset_msg_id(self) -> str:
        """The broker-side id: store host + log position."""
        return self.view.msg_id

    @property
    def body(self) -> bytes:
        """The payload."""
        return self.view.body

    @property
    def text(self) -> str:
        """The body decoded as UTF-8."""
        return self.view.body.decode("utf-8")

    @property
    def tags(self) -> str | None:
        """The TAGS property, or None."""
        return self.view.tags

    @property
    def keys(self) -> list[str]:
        """Business keys (KEYS)."""
        return self.view.keys

    @property
    def properties(self) -> dict[str, str]:
        """All properties of the stored record."""
        return self.view.properties

    @property
    def message_group(self) -> str | None:
        """The FIFO message group it was sent in (``__SHARDINGKEY``), or None."""
        return self.view.properties.get(PROPERTY_SHARDING_KEY)

    @property
    def dead_letter_reason(self) -> str | None:
        """Why the message was dead-lettered (``DLQ_REASON``, set by ``DeadLetter(reason)``),
        or ``None``."""
        return self.view.properties.get(PROPERTY_DLQ_REASON)

    @property
    def stored_topic(self) -> str:
        """The topic the record was read from (``%RETRY%group`` for a retry)."""
        return self.view.topic

    @property
    def queue_id(self) -> int:
        """Queue the record was read from."""
        return self.view.queue_id

    @property
    def queue_offset(self) -> int:
        """Offset of the record in that queue."""
        return self.view.queue_offset

    @property
    def born_timestamp_ms(self) -> int:
        """Producer time (ms)."""
        return self.view.born_timestamp_ms

    @property
    def store_timestamp_ms(self) -> int:
        """Time the store appended the record (ms)."""
        return self.view.store_timestamp_ms

    def __repr__(self) -> str:
        return (f"ConsumedMessage(topic={self.topic!r}, msg_id={self.msg_id!r}, "
                f"queue_id={self.queue_id}, queue_offset={self.queue_offset}, "
                f"reconsume_count={self.reconsume_count})")
