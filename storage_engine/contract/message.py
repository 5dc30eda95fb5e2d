"""Values that cross the store's public API: ``Message`` in, ``PutResult`` and ``GetResult`` out.

``Message`` is what a caller asks to store; ``MessageView`` (in ``formats``) is what a read
returns. Results are plain values; normal outcomes such as "no message yet" are ``GetStatus``
values, not exceptions. All types are immutable by convention and safe to share between threads.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping

from ..formats import MessageView, encode_offset_msg_id


class Message:
    """A message to store.

    Args:
        topic: destination topic (``[A-Za-z0-9_%|-]``, at most 127 characters).
        body: payload bytes (at most ``commit_log.max_message_size_bytes``).
        tags: one tag string (``TAGS``); consumers filter on it.
        keys: business keys, indexed for ``query_by_key`` (a list, or one space-separated str).
        properties: extra user properties (no U+0001/U+0002 in names or values).
        unique_key: the client-side message id (``UNIQ_KEY``); indexed for
            ``query_by_unique_key``.
        flag: user flag stored in the record.
        born_timestamp_ms: producer time; the store time is used when omitted.
        born_host: producer address ``ip:port``; the store host is used when omitted.
        reconsume_count: how many times the message was redelivered (retry topics).
        sys_flag: record SYSFLAG bits other than the host bits (compression, transaction type).
        prepared_transaction_position: the commit-log position of the half message a
            committed transactional message was prepared as (the record's PREPARED TRANSACTION
            OFFSET); 0 for every other message.
    """

    __slots__ = ("topic", "body", "tags", "keys", "properties", "unique_key", "flag",
                 "born_timestamp_ms", "born_host", "reconsume_count", "sys_flag",
                 "prepared_transaction_position")

    def __init__(self, topic: str, body: bytes, *, tags: str | None = None,
                 keys: Iterable[str] | str | None = None,
                 properties: Mapping[str, str] | None = None, unique_key: str | None = None,
                 flag: int = 0, born_timestamp_ms: int | None = None,
                 born_host: str | None = None, reconsume_count: int = 0,
                 sys_flag: int = 0, prepared_transaction_position: int = 0) -> None:
        self.topic = topic
        self.body = body
        self.tags = tags
        self.keys = keys
        self.properties = properties
        self.unique_key = unique_key
        self.flag = flag
        self.born_timestamp_ms = born_timestamp_ms
        self.born_host = born_host
        self.reconsume_count = reconsume_count
        self.sys_flag = sys_flag
        self.prepared_transaction_position = prepared_transaction_position

    def keys_list(self) -> list[str]:
        """``keys`` as a list of non-empty keys."""
        if self.keys is None:
            return []
        if isinstance(self.keys, str):
            return [key for key in self.keys.split(" ") if key]
        return [key for key in self.keys if key]

    def __repr__(self) -> str:
        return (f"Message(topic={self.topic!r}, body=<{len(self.body)} bytes>, "
                f"tags={self.tags!r}, keys={self.keys!r})")


class PutStatus(enum.Enum):
    """How an append ended. Failures raise instead; these are all "stored"."""

    PUT_OK = "PUT_OK"
    SEND_OK = "PUT_OK"  # an alias: RocketMQ's clients (and ``framework.SendStatus``) say SEND_OK
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"  # stored, not confirmed durable (SYNC mode)
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"  # stored; no slave acknowledged it in time
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"  # stored; SYNC_MASTER had no usable slave


class PutResult:
    """Where a message was stored."""

    __slots__ = ("topic", "queue_id", "queue_offset", "log_position", "store_size",
                 "store_timestamp_ms", "status", "_store_host")

    def __init__(self, topic: str, queue_id: int, queue_offset: int, log_position: int,
                 store_size: int, store_timestamp_ms: int, store_host: bytes,
                 status: PutStatus = PutStatus.PUT_OK) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.log_position = log_position
        self.store_size = store_size
        self.store_timestamp_ms = store_timestamp_ms
        self._store_host = store_host
        self.status = status

    @property
    def msg_id(self) -> str:
        """offsetMsgId: 32 (IPv4 store host) or 56 uppercase hex characters."""
        return encode_offset_msg_id(self._store_host, self.log_position)

    @property
    def is_durable_confirmed(self) -> bool:
        """False when a SYNC flush or a SYNC_MASTER's slave did not confirm the write."""
        return self.status is PutStatus.PUT_OK

    def __repr__(self) -> str:
        return (f"PutResult(topic={self.topic!r}, queue_id={self.queue_id}, "
                f"queue_offset={self.queue_offset}, log_position={self.log_position}, "
                f"status={self.status.value})")


class GetStatus(enum.Enum):
    """Outcome of ``get_message`` (RocketMQ ``GetMessageStatus``)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"  # entries exist but none passed the filter
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"  # the queue is empty (max offset 0)
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"  # below min offset; next_offset = min offset
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"  # offset == max offset: nothing new yet
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"  # beyond max offset; next = max offset
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"  # topic/queue does not exist
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"  # the commit log no longer holds it


class GetResult:
    """A batch read from one queue."""

    __slots__ = ("status", "messages", "next_offset", "min_offset", "max_offset")

    def __init__(self, status: GetStatus, messages: list[MessageView], next_offset: int,
                 min_offset: int, max_offset: int) -> None:
        self.status = status
        self.messages = messages
        self.next_offset = next_offset
        self.min_offset = min_offset
        self.max_offset = max_offset

    def __repr__(self) -> str:
        return (f"GetResult(status={self.status.value}, messages={len(self.messages)}, "
                f"next_offset={self.next_offset}, min_offset={self.min_offset}, "
                f"max_offset={self.max_offset})")
