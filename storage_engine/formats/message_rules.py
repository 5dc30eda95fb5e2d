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
  the error names the argument that sets it.

The check functions return a problem text or ``None``; each layer raises its own error type.
"""

from __future__ import annotations

from collections.abc import Mapping

from .constants import (
    PROPERTY_CRC_NAME,
    PROPERTY_DELAY,
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

PROPERTY_ARGUMENTS: Mapping[str, str] = {
    PROPERTY_UNIQ_KEY: "unique_key=",
    PROPERTY_KEYS: "keys=",
    PROPERTY_TAGS: "tags=",
    PROPERTY_DELAY: "delay_level=",
    "TIMER_DELAY_SEC": "delay_level=",
    "TIMER_DELAY_MS": "delay_level=",
    "TIMER_DELIVER_MS": "delay_level=",
    "__STARTDELIVERTIME": "delay_level=",
    "__SHARDINGKEY": "sharding_key=",
}
"""System properties a send argument sets: the argument to use instead."""

SYSTEM_PROPERTY_NAMES = frozenset({
    *PROPERTY_ARGUMENTS,
    PROPERTY_WAIT, PROPERTY_RETRY_TOPIC, PROPERTY_REAL_TOPIC, PROPERTY_REAL_QID,
    PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RECONSUME_TIME, PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_CRC_NAME, PROPERTY_DLQ_ORIGIN_MESSAGE_ID, PROPERTY_DLQ_REASON, "DLQ_ORIGIN_TOPIC",
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


__all__ = [
    "COPY_MARK_PROPERTIES", "EMPTY_BODY_PROBLEM", "PROPERTY_ARGUMENTS", "SYSTEM_PROPERTY_NAMES",
    "TRANSIENT_PROPERTY_PREFIX", "empty_body_problem", "reserved_property_problem",
]
