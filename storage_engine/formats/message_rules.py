"""Rules every new message obeys, whatever entry point it comes through. Pure.

* **No empty body.** RocketMQ's clients refuse a message whose body is empty, and its gRPC
  proxy answers ``MESSAGE_BODY_EMPTY``; Postbox refuses it everywhere (the store's
  ``put_message``, ``Producer.send``, ``outbox.send``, the network broker) before anything is
  written. Copies the broker makes of messages it already holds (delay delivery, retry, dead
  letter) are not new messages: the store keeps them as they were.
* **No system property names among user properties.** The names below are the ones RocketMQ's
  ``MessageConst`` reserves for itself (plus the delivery-time property of its commercial
  clients and Postbox's own ``DLQ_REASON``). A user property with one of them would be dropped
  or overwritten by the value the broker or client sets (a ``UNIQ_KEY`` given as a property
  was replaced by a generated id, so a resend became a second message), so it is refused, and
  the error names the argument that sets it (the framework's producer, ``outbox.send`` and
  the RocketMQ 5 gRPC server check user properties; the store cannot tell them apart from
  the properties the broker sets on its own copies).
* **Names, text and sizes.** Topic names become directory names (``[A-Za-z0-9_%|-]``, at
  most 127 characters, 255 for ``%RETRY%``/``%DLQ%`` topics); text fields are strings without
  the U+0001/U+0002 characters that frame the record's properties, encodable as UTF-8; a body
  is bytes of at most ``maxMessageSize``; keys carry no space (the KEYS property joins them
  with spaces).

These are the only statements of the rules: the store's encoder, the broker, the network
servers (through the broker; the gRPC server's conversion also directly), the remote client and
the framework's producer and ``check_message`` (the outbox checks through it) all call these
functions. Each returns a problem text or ``None``; the
caller raises ``storage_engine.InvalidMessageError`` (or a subclass) with it, so one error type
means "this message can never be stored", whichever entry point refused it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from .constants import (
    PROPERTY_CRC_NAME,
    PROPERTY_DELAY,
    PROPERTY_DLQ_FINGERPRINT,
    PROPERTY_DLQ_ORIGIN_MESSAGE_ID,
    PROPERTY_DLQ_REASON,
    PROPERTY_KEYS,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
)
from .topic_names import is_system_group_topic

PROPERTY_ARGUMENTS: Mapping[str, str] = {
    PROPERTY_UNIQ_KEY: "unique_key=",
    PROPERTY_KEYS: "keys=",
    PROPERTY_TAGS: "tags=",
    PROPERTY_DELAY: "delay_level=",
    "TIMER_DELAY_SEC": "delay=",
    "TIMER_DELAY_MS": "delay=",
    "TIMER_DELIVER_MS": "deliver_at=",
    "__STARTDELIVERTIME": "delay_level=",
    "__SHARDINGKEY": "sharding_key=",
}
"""System properties a send argument sets: the argument to use instead."""

RETRY_BOOKKEEPING_PROPERTIES = frozenset({
    PROPERTY_RETRY_TOPIC, PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_DELAY, PROPERTY_REAL_TOPIC,
    PROPERTY_REAL_QID, PROPERTY_DLQ_REASON, PROPERTY_DLQ_FINGERPRINT, PROPERTY_WAIT,
    PROPERTY_RECONSUME_TIME, PROPERTY_MAX_RECONSUME_TIMES})
"""Properties the broker sets on its retry, delay and dead-letter copies (an operator's re-send
from a DLQ starts afresh without them)."""

SYSTEM_PROPERTY_NAMES = frozenset({
    *PROPERTY_ARGUMENTS, *RETRY_BOOKKEEPING_PROPERTIES,
    PROPERTY_CRC_NAME, PROPERTY_DLQ_ORIGIN_MESSAGE_ID, "DLQ_ORIGIN_TOPIC",
    "TRAN_MSG", "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "TRANSFER_FLAG",
    "CORRECTION_FLAG", "MQ2_FLAG", "MSG_REGION", "TRACE_ON", "EXTEND_UNIQ_INFO",
    "CONSUME_START_TIME", "INNER_NUM", "INNER_BASE", "DUP_INFO",
    "CHECK_IMMUNITY_TIME_IN_SECONDS", "TRAN_PREPARED_QUEUE_OFFSET", "__transactionId__",
    "TRANSACTION_CHECK_TIMES", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL",
    "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "POP_CK", "POP_CK_OFFSET",
    "1ST_POP_TIME", "PROPERTY_FORWARD_QUEUE_ID", "REDIRECT", "INNER_MULTI_DISPATCH",
    "INNER_MULTI_QUEUE_OFFSET", "TRACE_CONTEXT", "__BORNHOST", "BORN_TIMESTAMP",
    "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_OUT_MS",
    "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL",
})
"""Property names a user property may not use (RocketMQ ``MessageConst`` and Postbox's own)."""

TRANSIENT_PROPERTY_PREFIX = "__RMQ.TRANSIENT."
"""RocketMQ drops properties with this prefix instead of storing them: refused as well."""

EMPTY_BODY_PROBLEM = "message body is empty; RocketMQ refuses empty bodies, send at least 1 byte"

MAX_MESSAGE_SIZE_BYTES = 4 * 1024 * 1024
"""The broker's default body limit (broker.conf ``maxMessageSize``)."""

TOPIC_LENGTH_MAX = 127
SYSTEM_TOPIC_LENGTH_MAX = 255
FRAMING_CHARACTERS = ("\x01", "\x02")
"""They separate names and values in the record's properties: no text field may hold them."""

_TOPIC_PATTERN = re.compile(r"[A-Za-z0-9_%|-]+")

COPY_MARK_PROPERTIES = frozenset({PROPERTY_REAL_TOPIC, PROPERTY_ORIGIN_MESSAGE_ID,
                                  PROPERTY_DLQ_ORIGIN_MESSAGE_ID})
"""Properties only the broker sets, on its copies of stored messages (delay scheduling and
delivery, send-back to a retry or dead-letter topic, re-send from a DLQ)."""


def empty_body_problem(body: bytes | bytearray | memoryview,
                       properties: Mapping[str, str] | None = None) -> str | None:
    """The problem with ``body`` as the body of a new message, or ``None``.

    A broker copy (``properties`` carry a ``COPY_MARK_PROPERTIES`` name) keeps whatever body the
    stored message had: refusing it would drop a message accepted before this rule existed.
    A body that is not bytes at all is left to the type checks.
    """
    if not isinstance(body, bytes | bytearray | memoryview) or len(body):
        return None
    if properties and not COPY_MARK_PROPERTIES.isdisjoint(properties):
        return None
    return EMPTY_BODY_PROBLEM


def reserved_property_problem(name: str, arguments: Mapping[str, str] = PROPERTY_ARGUMENTS
                              ) -> str | None:
    """Why ``name`` cannot be a user property, or ``None``. ``arguments`` maps the names a
    send argument sets to that argument (an entry point whose arguments are named otherwise
    passes its own), so the problem says what to use instead."""
    if name.startswith(TRANSIENT_PROPERTY_PREFIX):
        return (f"property {name!r} starts with {TRANSIENT_PROPERTY_PREFIX!r}, which RocketMQ "
                "never stores; choose another name")
    if name not in SYSTEM_PROPERTY_NAMES:
        return None
    argument = arguments.get(name)
    if argument is not None:
        return f"property {name!r} is reserved: use the {argument} argument instead"
    return (f"property {name!r} is a system property the broker sets; choose another name")


def topic_problem(topic: object) -> str | None:
    """Why ``topic`` is not a legal topic name (it becomes a directory name), or ``None``."""
    if not isinstance(topic, str) or not topic:
        return f"topic must be a non-empty string, got {topic!r}"
    if _TOPIC_PATTERN.fullmatch(topic) is None:
        return (f"topic {topic!r} has characters outside [A-Za-z0-9_%|-] (topic names become "
                "directory names)")
    limit = SYSTEM_TOPIC_LENGTH_MAX if is_system_group_topic(topic) else TOPIC_LENGTH_MAX
    if len(topic) > limit:
        return f"topic is {len(topic)} characters; at most {limit} allowed"
    return None


def body_problem(body: object) -> str | None:
    """Why ``body`` is not a message body at all (bytes-like), or ``None``."""
    if isinstance(body, bytes | bytearray | memoryview):
        return None
    return f"body must be bytes, got {type(body).__name__}"


def body_size_problem(size_bytes: int, limit_bytes: int) -> str | None:
    """Why a body of ``size_bytes`` is too large for ``limit_bytes``, or ``None``."""
    if size_bytes <= limit_bytes:
        return None
    return (f"message body is {size_bytes:,} bytes; the limit is {limit_bytes:,} "
            "(broker.conf maxMessageSize)")


def text_problem(what: str, value: object) -> str | None:
    """Why ``value`` cannot be stored as the text field ``what``, or ``None``."""
    if not isinstance(value, str):
        return f"{what} must be a string, got {type(value).__name__}"
    if FRAMING_CHARACTERS[0] in value or FRAMING_CHARACTERS[1] in value:
        return f"{what} contains U+0001 or U+0002, which frame properties in the record"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"{what} is not valid Unicode text ({error.reason} at character {error.start})"
    return None


def property_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a property at all, or ``None`` (see also
    ``reserved_property_problem`` for user properties)."""
    if isinstance(name, str) and name:
        return None
    return "property names must be non-empty strings"


def key_problem(key: object) -> str | None:
    """Why ``key`` cannot be one of a message's keys, or ``None``."""
    if problem := text_problem("key", key):
        return problem
    if " " in str(key):
        return f"key {key!r} contains a space (keys are space-separated)"
    return None


def unique_key_problem(unique_key: object, length_max: int, argument: str = "unique_key"
                       ) -> str | None:
    """Why ``unique_key`` cannot be a message id (``UNIQ_KEY``) of at most ``length_max``
    characters, or ``None``; the problem names the caller's ``argument``."""
    if not isinstance(unique_key, str) or not unique_key.strip():
        return f"{argument} must be a non-blank string, got {unique_key!r}"
    if len(unique_key) > length_max:
        return f"{argument} is {len(unique_key)} characters; at most {length_max} allowed"
    if FRAMING_CHARACTERS[0] in unique_key or FRAMING_CHARACTERS[1] in unique_key:
        return f"{argument} {unique_key!r} contains U+0001 or U+0002 (record framing)"
    return None


def user_properties_problem(properties: Mapping[str, str] | None,
                            arguments: Mapping[str, str] = PROPERTY_ARGUMENTS) -> str | None:
    """Why ``properties`` cannot be a new message's user properties, or ``None``: a legal
    name that is no system property (see ``reserved_property_problem``), text values."""
    for name, value in (properties or {}).items():
        problem = (property_name_problem(name) or reserved_property_problem(name, arguments)
                   or text_problem(f"property {name!r}", name)
                   or text_problem(f"property {name!r}", value))
        if problem:
            return problem
    return None


def delay_level_problem(delay_level: object) -> str | None:
    """Why ``delay_level`` is not a delay level a sender may ask for, or ``None``."""
    if delay_level is None or (type(delay_level) is int and delay_level >= 0):
        return None
    return f"delay_level must be an int in 1..18, got {delay_level!r}"


def new_message_problem(topic: object, body: object, *, tags: object = None,
                        keys: Iterable[object] = (),
                        properties: Mapping[str, str] | None = None,
                        delay_level: object = None,
                        max_body_bytes: int = MAX_MESSAGE_SIZE_BYTES,
                        arguments: Mapping[str, str] = PROPERTY_ARGUMENTS) -> str | None:
    """The first rule a new message from an application breaks, or ``None``: every rule
    above, and no sending to a retry or dead-letter topic (only the broker writes those)."""
    if problem := topic_problem(topic):
        return problem
    if is_system_group_topic(str(topic)):
        return f"topic {topic!r} is a system topic; send to a normal topic"
    if not isinstance(body, bytes | bytearray | memoryview):
        return body_problem(body)
    if problem := empty_body_problem(body) or body_size_problem(len(body), max_body_bytes):
        return problem
    if tags is not None and (problem := text_problem("tags", tags)):
        return problem
    for key in keys:
        if problem := key_problem(key):
            return problem
    return user_properties_problem(properties, arguments) or delay_level_problem(delay_level)


__all__ = [
    "COPY_MARK_PROPERTIES", "EMPTY_BODY_PROBLEM", "FRAMING_CHARACTERS", "MAX_MESSAGE_SIZE_BYTES",
    "PROPERTY_ARGUMENTS", "RETRY_BOOKKEEPING_PROPERTIES", "SYSTEM_PROPERTY_NAMES",
    "SYSTEM_TOPIC_LENGTH_MAX", "TOPIC_LENGTH_MAX", "TRANSIENT_PROPERTY_PREFIX", "body_problem",
    "body_size_problem", "delay_level_problem", "empty_body_problem", "key_problem",
    "new_message_problem", "property_name_problem", "reserved_property_problem",
    "text_problem", "topic_problem", "unique_key_problem", "user_properties_problem",
]
