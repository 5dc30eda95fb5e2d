"""``MessageEncoder``: validates a ``Message`` and encodes its variable parts for the commit log.

Everything that can be wrong with a message is found here, before the put lock is taken, so a
rejected write never touches the log: topic names (they become directory names), queue ids, body
type, emptiness and size (``commit_log.max_message_size_bytes``), property names, framing
characters and UTF-8 text (the rules of ``formats.message_rules``, stated there once), the
32 767-byte properties limit, hosts. Thread-safe: the
caches only grow and hold immutable values.
"""

from __future__ import annotations

from typing import NoReturn

from ..config import StoreConfig
from ..contract.message import Message
from ..contract.topics import validate_topic
from ..errors import (
    InvalidMessageError,
    InvalidQueueError,
    MessageTooLargeError,
    PropertiesTooLargeError,
)
from ..formats import (
    END_FILE_MIN_BLANK_LENGTH,
    PROPERTIES_SIZE_MAX_BYTES,
    PROPERTY_CRC_LENGTH,
    PROPERTY_CRC_PLACEHOLDER,
    body_problem,
    body_size_problem,
    empty_body_problem,
    encode_host,
    property_name_problem,
    record_size,
    text_problem,
    uses_v2,
)
from ..formats.engine import masked_crc32
from .commit_log import PreparedMessage

_CACHE_LIMIT = 10_000


_new_tuple = tuple.__new__
_NO_PROPERTIES: dict[str, str] = {}
_INT32 = (-(1 << 31), (1 << 31) - 1)
_NUMBER_FIELDS = (("flag", _INT32), ("reconsume_count", (0, (1 << 31) - 1)),
                  ("sys_flag", _INT32), ("prepared_transaction_position", (0, (1 << 63) - 1)))


def _check_numbers(message: Message) -> None:
    """Every integer field must fit its slot in the record."""
    for name, (low, high) in _NUMBER_FIELDS:
        value = getattr(message, name)
        if type(value) is not int or not low <= value <= high:
            raise InvalidMessageError(f"{name}={value!r} does not fit the record "
                                      f"({low}..{high})", topic=message.topic)
    born = message.born_timestamp_ms
    if born is not None and (type(born) is not int or not 0 <= born < 1 << 63):
        raise InvalidMessageError(f"born_timestamp_ms={born!r} must be a non-negative int "
                                  "(milliseconds since the epoch)", topic=message.topic)


class MessageEncoder:
    """Turns ``Message`` objects into ``PreparedMessage`` tuples."""

    def __init__(self, config: StoreConfig, store_host: bytes) -> None:
        self._max_body = config.commit_log.max_message_size_bytes
        self._segment_size = config.commit_log.segment_size_bytes
        self._property_crc = config.commit_log.append_property_crc
        self._queue_id_max = config.queue_id_max
        self._store_host = store_host
        self._topics: dict[str, tuple[bytes, bool]] = {}
        self._hosts: dict[str, bytes] = {}

    def prepare(self, message: Message, queue_id: int) -> PreparedMessage:
        """Validate and encode; raises ``InvalidMessageError`` subclasses, writes nothing."""
        topic = message.topic
        topic_entry = self._topics.get(topic) if isinstance(topic, str) else None
        if topic_entry is None:
            topic_entry = self._remember_topic(topic)
        if type(queue_id) is not int or not 0 <= queue_id <= self._queue_id_max:
            raise InvalidQueueError(f"queue id {queue_id!r} is not in 0..{self._queue_id_max}",
                                    topic=topic)
        body = message.body
        if type(body) is not bytes:
            body = self._coerce_body(body, topic)
        if not body and (problem := empty_body_problem(body, message.properties)):
            raise InvalidMessageError(problem, topic=topic)
        if problem := body_size_problem(len(body), self._max_body):
            raise MessageTooLargeError(f"{problem}: raise commit_log.max_message_size_bytes",
                                       setting="commit_log.max_message_size_bytes", topic=topic)
        keys = message.keys
        if keys is not None and type(keys) is not str:
            keys = " ".join(key for key in keys if key) or None
        properties = self._encode_properties(message, keys)
        if self._property_crc:
            properties += PROPERTY_CRC_PLACEHOLDER  # sealed by the commit log once encoded
        topic_bytes, is_v2 = topic_entry
        born_host = self._host(message.born_host) if message.born_host else b""
        _check_numbers(message)
        sys_flag = message.sys_flag & ~0x30
        if len(born_host or self._store_host) == 20:
            sys_flag |= 0x10
        if len(self._store_host) == 20:
            sys_flag |= 0x20
        size = record_size(len(body), len(topic_bytes), len(properties), sys_flag=sys_flag,
                           is_v2=is_v2)
        if size + END_FILE_MIN_BLANK_LENGTH > self._segment_size:
            raise InvalidMessageError(
                f"a {size}-byte record can never fit a {self._segment_size}-byte segment; raise "
                "commit_log.segment_size_bytes (broker.conf mappedFileSizeCommitLog)",
                topic=topic)
        return _new_tuple(PreparedMessage, (
            topic, topic_bytes, is_v2, body, properties, queue_id, message.flag, sys_flag,
            -1 if message.born_timestamp_ms is None else message.born_timestamp_ms, born_host,
            message.reconsume_count, message.prepared_transaction_position, masked_crc32(body),
            size, message.tags, keys, message.unique_key, message.properties or _NO_PROPERTIES))

    @staticmethod
    def _coerce_body(body: object, topic: str) -> bytes:
        if isinstance(body, bytes | bytearray | memoryview):
            return bytes(body)
        raise InvalidMessageError(body_problem(body) or "body must be bytes", topic=topic)

    def _remember_topic(self, topic: object) -> tuple[bytes, bool]:
        validate_topic(topic)
        assert isinstance(topic, str)
        topic_bytes = topic.encode("utf-8")
        entry = (topic_bytes, uses_v2(topic, topic_bytes))
        if len(self._topics) < _CACHE_LIMIT:
            self._topics[topic] = entry
        return entry

    def _encode_properties(self, message: Message, keys: str | None) -> bytes:
        """Serialize user properties, then KEYS, TAGS and UNIQ_KEY.

        Framing is checked once on the joined text: it must contain exactly one U+0001 and one
        U+0002 per pair, which fails when any name or value carries either character.
        """
        parts = []
        if message.properties:
            for name, value in message.properties.items():
                if value is not None:
                    if problem := property_name_problem(name):
                        raise InvalidMessageError(problem, topic=message.topic)
                    parts.append(f"{name}\x01{value}\x02")
        if keys:
            parts.append(f"KEYS\x01{keys}\x02")
        if message.tags:
            parts.append(f"TAGS\x01{message.tags}\x02")
        if message.unique_key:
            parts.append(f"UNIQ_KEY\x01{message.unique_key}\x02")
        text = "".join(parts)
        if text.count("\x01") != len(parts) or text.count("\x02") != len(parts):
            self._reject_text(message, keys)
        try:
            encoded = text.encode("utf-8")
        except UnicodeEncodeError as error:
            self._reject_text(message, keys, error)
        limit = PROPERTIES_SIZE_MAX_BYTES - PROPERTY_CRC_LENGTH * self._property_crc
        if len(encoded) > limit:
            reserved = " (20 more carry the record CRC)" if self._property_crc else ""
            raise PropertiesTooLargeError(
                f"encoded properties are {len(encoded):,} bytes; the record format allows "
                f"{limit:,}{reserved}: shorten keys, tags or properties",
                setting="properties (format limit, not configurable)", topic=message.topic)
        return encoded

    @staticmethod
    def _reject_text(message: Message, keys: str | None,
                     cause: UnicodeEncodeError | None = None) -> NoReturn:
        """Raise naming the first field that breaks ``formats.text_problem`` (a framing
        character, text that is not UTF-8)."""
        fields: list[tuple[str, str | None]] = [("key", keys), ("tags", message.tags),
                                                ("unique_key", message.unique_key)]
        for name, value in (message.properties or {}).items():
            if value is not None:
                fields += [(f"property {name!r}", name), (f"property {name!r}", str(value))]
        for what, text in fields:
            if text and (problem := text_problem(what, str(text))):
                raise InvalidMessageError(problem, topic=message.topic) from cause
        raise InvalidMessageError("properties are not storable text",
                                  topic=message.topic) from cause

    def _host(self, host: str) -> bytes:
        encoded = self._hosts.get(host)
        if encoded is None:
            ip, separator, port = host.rpartition(":")
            try:
                if not separator or not port.isdigit() or int(port) > 65535:
                    raise ValueError("the port must be 0..65535")
                encoded = encode_host(ip.strip("[]"), int(port))
            except (ValueError, OSError) as error:
                raise InvalidMessageError(f"born_host {host!r} is not ip:port ({error})") from error
            if len(self._hosts) < _CACHE_LIMIT:
                self._hosts[host] = encoded
        return encoded


__all__ = ["MessageEncoder"]
