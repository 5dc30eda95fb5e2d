"""``MessageView``: one decoded commit-log record, with every field and its properties.

Header fields are decoded eagerly (one ``struct`` call); the properties map, the hosts and the
message ids are decoded on first access, so reading a batch of messages costs little more than
copying their bytes. Immutable after construction; safe to share between threads.
"""

from __future__ import annotations

from typing import Any

from .constants import MAGIC_V2, PROPERTY_CRC_NAME
from .engine import decode_properties, masked_crc32, unpack_record
from .message_id import encode_offset_msg_id
from .properties import split_keys
from .record import HostAddress, RecordBuffer, decode_host


class MessageView:
    """A stored message as read back from the commit log."""

    __slots__ = (
        "store_size", "magic", "body_crc", "queue_id", "flag", "queue_offset", "log_position",
        "sys_flag", "born_timestamp_ms", "_born_host", "store_timestamp_ms", "_store_host",
        "reconsume_count", "prepared_transaction_position", "body", "_topic", "_properties_raw",
        "_properties",
    )
    store_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    log_position: int
    sys_flag: int
    born_timestamp_ms: int
    _born_host: bytes
    store_timestamp_ms: int
    _store_host: bytes
    reconsume_count: int
    prepared_transaction_position: int
    body: bytes
    _topic: bytes
    _properties_raw: bytes

    def __init__(self, fields: tuple[Any, ...]) -> None:
        (self.store_size, self.magic, self.body_crc, self.queue_id, self.flag,
         self.queue_offset, self.log_position, self.sys_flag, self.born_timestamp_ms,
         self._born_host, self.store_timestamp_ms, self._store_host, self.reconsume_count,
         self.prepared_transaction_position, self.body, self._topic,
         self._properties_raw) = fields
        self._properties: dict[str, str] | None = None

    @classmethod
    def decode(cls, buf: RecordBuffer, position: int) -> MessageView:
        """Decode the record at ``position`` of ``buf`` (validated by the caller)."""
        return cls(unpack_record(buf, position))

    @property
    def topic(self) -> str:
        """The topic the record was stored under."""
        return self._topic.decode("utf-8")

    @property
    def properties(self) -> dict[str, str]:
        """All properties, parsed with RocketMQ's rules (a fresh copy is not made)."""
        if self._properties is None:
            properties = decode_properties(self._properties_raw)
            properties.pop(PROPERTY_CRC_NAME, None)  # integrity data, not a message property
            self._properties = properties
        return self._properties

    @property
    def tags(self) -> str | None:
        """The TAGS property, or None."""
        return self.properties.get("TAGS")

    @property
    def keys(self) -> list[str]:
        """The KEYS property split on spaces."""
        return split_keys(self.properties.get("KEYS"))

    @property
    def unique_key(self) -> str | None:
        """The client-generated UNIQ_KEY, or None."""
        return self.properties.get("UNIQ_KEY")

    @property
    def born_host(self) -> HostAddress:
        """Producer address."""
        return decode_host(self._born_host)

    @property
    def store_host(self) -> HostAddress:
        """Broker address."""
        return decode_host(self._store_host)

    @property
    def msg_id(self) -> str:
        """offsetMsgId: store host + log position as uppercase hex."""
        return encode_offset_msg_id(self._store_host, self.log_position)

    @property
    def is_v2(self) -> bool:
        """Whether the record uses the two-byte topic length."""
        return self.magic == MAGIC_V2

    @property
    def properties_bytes(self) -> bytes:
        """The properties field exactly as stored."""
        return self._properties_raw

    @property
    def raw_born_host(self) -> bytes:
        """The born-host field as stored (8 or 20 bytes)."""
        return self._born_host

    @property
    def raw_store_host(self) -> bytes:
        """The store-host field as stored (8 or 20 bytes)."""
        return self._store_host

    def body_crc_ok(self) -> bool:
        """Whether the stored body CRC matches the body."""
        return masked_crc32(self.body) == self.body_crc

    def as_dict(self) -> dict[str, Any]:
        """All fields as plain values (for JSON output)."""
        return {
            "topic": self.topic, "queue_id": self.queue_id, "queue_offset": self.queue_offset,
            "log_position": self.log_position, "store_size": self.store_size,
            "msg_id": self.msg_id, "unique_key": self.unique_key, "tags": self.tags,
            "keys": self.keys, "properties": dict(self.properties), "flag": self.flag,
            "sys_flag": self.sys_flag, "body_crc": self.body_crc,
            "born_timestamp_ms": self.born_timestamp_ms, "born_host": str(self.born_host),
            "store_timestamp_ms": self.store_timestamp_ms, "store_host": str(self.store_host),
            "reconsume_count": self.reconsume_count,
            "prepared_transaction_position": self.prepared_transaction_position,
            "body_size": len(self.body),
        }

    def __repr__(self) -> str:
        return (f"MessageView(topic={self.topic!r}, queue_id={self.queue_id}, "
                f"queue_offset={self.queue_offset}, log_position={self.log_position}, "
                f"size={self.store_size})")
