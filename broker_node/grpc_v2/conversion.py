"""Messages between RocketMQ v2 protobuf and the store: ``message_from_proto`` (send) and
``message_to_proto`` (receive, pull). Pure.

Send (``apache.rocketmq.v2.Message`` → ``Message``):

* body: non-empty (``MESSAGE_BODY_EMPTY``), ``IDENTITY`` encoding; size is checked by the store
  (``MESSAGE_BODY_TOO_LARGE`` naming ``commit_log.max_message_size_bytes``).
* ``message_id`` (the client-generated id) becomes ``UNIQ_KEY``; tag → ``TAGS``; keys →
  ``KEYS`` (no blanks or spaces: the store separates keys with spaces); user properties
  stay properties (none may use a name the broker reserves: ``ILLEGAL_MESSAGE_PROPERTY_KEY``;
  the rules of ``formats.message_rules``, as for every entry point).
* born timestamp and born host (the client's address, with the port of the connection).
* ``message_group`` (FIFO) → property ``__SHARDINGKEY`` and the queue is chosen by it, so a
  group's messages share one queue in send order. Consumption of such messages is not strictly
  ordered by this server (see docs/remoting.md).
* ``delivery_timestamp`` (DELAY) → property ``TIMER_DELIVER_MS``, as Apache RocketMQ 5's proxy
  sets it: the broker's timer delivers the message at that moment (``timer_service``); more
  than ``delay.timer_max_delay_s`` ahead → refused with ``ILLEGAL_DELIVERY_TIME``; in the past →
  delivered at once. With timers off (``timerWheelEnable=false``) the smallest delay level whose
  delay covers the time left is used instead (never early; beyond the longest level →
  ``ILLEGAL_DELIVERY_TIME``) and the asked-for time kept in ``DELIVERY_TIMESTAMP_MS`` (a
  Postbox extension, hidden). A value above ``MS_TIMESTAMP_THRESHOLD_S`` seconds is read as
  milliseconds (rocketmq-python-client 5.1.x documents milliseconds but sends the value as
  seconds). On receive the delivery time (``TIMER_OUT_MS``, else ``TIMER_DELIVER_MS``, else
  ``DELIVERY_TIMESTAMP_MS``) is given back as ``delivery_timestamp``, as Apache's proxy does.
* TRANSACTION messages become half messages (``transaction_calls``), their
  ``orphaned_transaction_recovery_duration`` the ``CHECK_IMMUNITY_TIME_IN_SECONDS`` property
  (whole seconds, as RocketMQ's proxy); LITE messages answer ``NOT_IMPLEMENTED``.

Receive (``MessageView`` → protobuf): the original topic (``RETRY_TOPIC`` of a retried
message), tag, keys, ``UNIQ_KEY`` as ``message_id`` (offsetMsgId when absent), user properties
(broker bookkeeping properties hidden), the body digest, born/store host and time, queue id
and offset, delivery attempt = reconsume count + 1, the asked-for delivery timestamp of a
delayed message, and for popped messages the receipt handle and invisible duration.

Body digest (``body_digest``): as Apache RocketMQ 5's proxy fills it — type ``MD5``, checksum the
32 upper-case hex digits of the MD5 of the body bytes exactly as they travel in
``Message.body`` (for a GZIP-encoded body: of the compressed bytes). The official clients
recompute it over the received body before decompressing and compare the strings exactly
(Java ``MessageViewImpl``, Go ``fromProtobuf_MessageView2``: upper-case hex for MD5 and SHA1,
``Long.toHexString(crc).toUpperCase()`` — no leading zeros — for CRC32); a mismatch marks the
message corrupted and the push consumer never hands it to the listener.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Sequence

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from postbox.storage_engine.config import DelayConfig
from postbox.storage_engine.contract.message import Message
from postbox.storage_engine.formats import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_SHARDING_KEY,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_UNIQ_KEY,
    SYSFLAG_COMPRESSED,
    MessageView,
    empty_body_problem,
    user_properties_problem,
)

from .protocol import Code, definition
from .statuses import RequestError

PROPERTY_DELIVERY_TIMESTAMP_MS = "DELIVERY_TIMESTAMP_MS"
"""Postbox extension: the delivery time a client asked for (epoch ms) when timers are off and a
delay level carries the message (the delay service clears ``TIMER_DELIVER_MS``)."""
_DELIVERY_TIME_PROPERTIES = (PROPERTY_TIMER_OUT_MS, PROPERTY_TIMER_DELIVER_MS,
                             PROPERTY_DELIVERY_TIMESTAMP_MS)
MS_TIMESTAMP_THRESHOLD_S = 100_000_000_000
"""A delivery timestamp this many seconds or more (year 5138) is taken to be milliseconds."""
NAME_LENGTH_MAX = 128
"""Longest message id, tag, key or message group accepted."""

# Properties the broker (or RocketMQ's) keeps for itself: not user properties on the way out,
# and refused as user property names on the way in.
RESERVED_PROPERTIES = frozenset({
    PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, PROPERTY_DELAY, PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC, PROPERTY_SHARDING_KEY, "REAL_QID", "WAIT", "ORIGIN_MESSAGE_ID",
    "RECONSUME_TIME", "MAX_RECONSUME_TIMES", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC",
    "TIMER_DELAY_MS", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES",
    "TRAN_MSG", "PGROUP", "__transactionId__", "TRANSACTION_CHECK_TIMES",
    "CHECK_IMMUNITY_TIME_IN_SECONDS", "MIN_OFFSET", "MAX_OFFSET", "CONSUME_START_TIME",
    "MSG_REGION",
    "TRACE_ON", "__STARTDELIVERTIME", "CLUSTER", "INNER_NUM", "INNER_MULTI_DISPATCH",
    "INNER_MULTI_QUEUE_OFFSET", PROPERTY_DELIVERY_TIMESTAMP_MS,
})


def message_from_proto(proto: definition.Message, topic: str, *, peer_host: tuple[str, int],
                       now_ms: int, delay: DelayConfig) -> tuple[Message, str | None]:
    """The store message for a sent protobuf message, and its sharding key (message group)."""
    system = proto.system_properties
    if system.message_type == definition.LITE:
        kind = definition.MessageType.Name(system.message_type)
        raise RequestError(Code.NOT_IMPLEMENTED, f"{kind} messages are not supported by Postbox")
    if system.body_encoding not in (definition.ENCODING_UNSPECIFIED, definition.IDENTITY):
        raise RequestError(Code.BAD_REQUEST, "only IDENTITY body encoding is accepted")
    if problem := empty_body_problem(proto.body):
        raise RequestError(Code.MESSAGE_BODY_EMPTY, problem)
    properties = _user_properties(proto)
    tag = _tag(system) if system.HasField("tag") else None
    group = _name(system.message_group, Code.ILLEGAL_MESSAGE_GROUP, "message group") \
        if system.HasField("message_group") else None
    if group is not None:
        properties[PROPERTY_SHARDING_KEY] = group
    if (system.message_type == definition.TRANSACTION
            and system.HasField("orphaned_transaction_recovery_duration")):
        properties["CHECK_IMMUNITY_TIME_IN_SECONDS"] = str(
            system.orphaned_transaction_recovery_duration.seconds)
    if system.HasField("delivery_timestamp"):
        _deliver_at(properties, _timestamp_ms(system.delivery_timestamp), now_ms, delay)
    born_ms = _timestamp_ms(system.born_timestamp) if system.HasField("born_timestamp") else 0
    message = Message(
        topic, proto.body, tags=tag, keys=[_key(key) for key in system.keys] or None,
        properties=properties,
        unique_key=_name(system.message_id, Code.ILLEGAL_MESSAGE_ID, "message id"),
        born_timestamp_ms=born_ms if born_ms > 0 else None,
        born_host=_born_host(system.born_host, peer_host))
    return message, group


def _deliver_at(properties: dict[str, str], deliver_ms: int, now_ms: int,
                delay: DelayConfig) -> None:
    """Ask for delivery at ``deliver_ms``: a timer, or a delay level when timers are off."""
    if not delay.timer_enabled:
        level = delay_level_for(deliver_ms, now_ms, delay.levels_ms)
        if level:
            properties[PROPERTY_DELAY] = str(level)
        properties[PROPERTY_DELIVERY_TIMESTAMP_MS] = str(deliver_ms)
        return
    if deliver_ms - now_ms > delay.timer_max_delay_s * 1000:
        raise RequestError(Code.ILLEGAL_DELIVERY_TIME,
                           f"delivery is {deliver_ms - now_ms} ms away; at most "
                           f"{delay.timer_max_delay_s} s ahead (broker.conf timerMaxDelaySec)")
    properties[PROPERTY_TIMER_DELIVER_MS] = str(deliver_ms)


def delay_level_for(delivery_ms: int, now_ms: int, levels_ms: Sequence[int]) -> int:
    """The smallest level (1-based) whose delay covers ``delivery_ms - now_ms``; 0 when the
    time has come. ``ILLEGAL_DELIVERY_TIME`` when no level is long enough."""
    wait_ms = delivery_ms - now_ms
    if wait_ms <= 0:
        return 0
    for level, delay_ms in enumerate(levels_ms, start=1):
        if delay_ms >= wait_ms:
            return level
    raise RequestError(Code.ILLEGAL_DELIVERY_TIME,
                       f"delivery is {wait_ms} ms away; the longest delay level is "
                       f"{levels_ms[-1]} ms (broker.conf messageDelayLevel)")


def _user_properties(proto: definition.Message) -> dict[str, str]:
    """The user properties, refused by the rules of ``formats.message_rules`` (and this
    server's own ``DELIVERY_TIMESTAMP_MS``)."""
    properties = dict(proto.user_properties)
    problem = user_properties_problem(properties, arguments={}) or next((
        f"property {name[:64]!r} is a system property the broker sets; choose another name"
        for name in properties if name in RESERVED_PROPERTIES), None)
    if problem:
        raise RequestError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, problem)
    return properties


def _name(value: str, code: int, what: str) -> str:
    if not value or not value.strip() or len(value) > NAME_LENGTH_MAX \
            or not value.isprintable():  # U+0001/U+0002 (record framing) are not printable
        raise RequestError(code, f"{what} must be 1..{NAME_LENGTH_MAX} printable characters, "
                                 f"got {value[:64]!r}")
    return value


def _tag(system: definition.SystemProperties) -> str:
    tag = _name(system.tag, Code.ILLEGAL_MESSAGE_TAG, "tag")
    if "|" in tag:
        raise RequestError(Code.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} contains '|'")
    return tag


def _key(key: str) -> str:
    key = _name(key, Code.ILLEGAL_MESSAGE_KEY, "key")
    if any(character.isspace() for character in key):
        raise RequestError(Code.ILLEGAL_MESSAGE_KEY, f"key {key!r} contains whitespace (keys "
                                                     "are stored space-separated)")
    return key


def _born_host(claimed: str, peer_host: tuple[str, int]) -> str:
    """``ip:port`` of the producer: its claimed IP if valid, else the peer's; the peer's port."""
    peer_ip, peer_port = peer_host
    try:
        ip = str(ipaddress.ip_address(claimed))
    except ValueError:
        ip = peer_ip
    return f"[{ip}]:{peer_port}" if ":" in ip else f"{ip}:{peer_port}"


def _timestamp_ms(timestamp: Timestamp) -> int:
    seconds = timestamp.seconds
    if seconds >= MS_TIMESTAMP_THRESHOLD_S:
        return seconds
    return seconds * 1000 + timestamp.nanos // 1_000_000


def timestamp(ms: int) -> Timestamp:
    """A protobuf ``Timestamp`` for epoch milliseconds."""
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration(ms: int) -> Duration:
    """A protobuf ``Duration`` for milliseconds."""
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def original_topic(view: MessageView) -> str:
    """The topic a consumer sees: ``RETRY_TOPIC`` of a retried message, else the stored one."""
    return view.properties.get(PROPERTY_RETRY_TOPIC) or view.topic


def body_digest(body: bytes) -> definition.Digest:
    """The digest of a body as sent (see the module docstring): MD5, upper-case hex."""
    return definition.Digest(type=definition.MD5,
                             checksum=hashlib.md5(body, usedforsecurity=False).hexdigest().upper())


def message_to_proto(view: MessageView, *, receipt_handle: str | None = None,
                     invisible_ms: int | None = None) -> definition.Message:
    """The protobuf message a consumer receives for ``view``."""
    properties = view.properties
    system = definition.SystemProperties(
        keys=view.keys, message_id=view.unique_key or view.msg_id,
        body_digest=body_digest(view.body),
        body_encoding=(definition.GZIP if view.sys_flag & SYSFLAG_COMPRESSED
                       else definition.IDENTITY),
        message_type=_message_type(properties),
        born_host=view.born_host.ip, store_host=str(view.store_host),
        queue_id=view.queue_id, queue_offset=view.queue_offset,
        delivery_attempt=view.reconsume_count + 1)
    if view.born_timestamp_ms > 0:
        system.born_timestamp.CopyFrom(timestamp(view.born_timestamp_ms))
    system.store_timestamp.CopyFrom(timestamp(view.store_timestamp_ms))
    if view.tags:
        system.tag = view.tags
    group = properties.get(PROPERTY_SHARDING_KEY)
    if group:
        system.message_group = group
    for name in _DELIVERY_TIME_PROPERTIES:
        deliver_ms = properties.get(name, "")
        if deliver_ms.isdigit():
            system.delivery_timestamp.CopyFrom(timestamp(int(deliver_ms)))
            break
    if receipt_handle is not None:
        system.receipt_handle = receipt_handle
    if invisible_ms is not None:
        system.invisible_duration.CopyFrom(duration(invisible_ms))
    user = {name: value for name, value in properties.items()
            if name not in RESERVED_PROPERTIES}
    return definition.Message(topic=definition.Resource(name=original_topic(view)),
                              user_properties=user, system_properties=system, body=view.body)


def _message_type(properties: dict[str, str]) -> int:
    if properties.get("TRAN_MSG") == "true":
        return definition.TRANSACTION
    if properties.get(PROPERTY_SHARDING_KEY):
        return definition.FIFO
    if PROPERTY_REAL_TOPIC in properties or any(name in properties
                                                for name in _DELIVERY_TIME_PROPERTIES):
        return definition.DELAY
    return definition.NORMAL


__all__ = ["PROPERTY_DELIVERY_TIMESTAMP_MS", "RESERVED_PROPERTIES",
           "body_digest", "delay_level_for", "duration", "message_from_proto", "message_to_proto",
           "original_topic", "timestamp"]
