"""The messages ``Broker.send_back`` and ``Broker.resend_dead_letter`` store. Pure: no I/O.

``send_back_copy`` builds the record RocketMQ's ``consumerSendMsgBack`` stores for a failed
message (reference §10.2 step 6): same body, flag, sysflag, tags, keys, UNIQ_KEY, born
timestamp and born host; reconsume count + 1; ``RETRY_TOPIC`` (the topic the message was first
consumed from) set when absent; ``WAIT=false``; ``ORIGIN_MESSAGE_ID`` = the existing non-blank one,
else the original's offsetMsgId; ``DELAY`` = the retry level, or removed for a dead letter.

Postbox extensions (plain properties, ignored by RocketMQ and its clients):

* ``DLQ_REASON`` — why a message was dead-lettered (``send_back(..., reason=...)``), at most
  ``DLQ_REASON_LENGTH_MAX`` characters, framing characters replaced by spaces.
* ``DLQ_FINGERPRINT`` — beside ``DLQ_REASON``: the reason with its numbers, hex runs and quoted
  values blanked, hashed to 16 hex digits (``reason_fingerprint``), so dead letters that failed
  the same way ("ValueError: order 17 is poison" and "… order 42 …") share one value an operator
  can group and requeue by.
* ``DLQ_ORIGIN_MESSAGE_ID`` — on a message re-sent from a DLQ by an operator
  (``resend_dead_letter``, to the group's ``%RETRY%group`` with ``RETRY_TOPIC`` = the original
  topic): the offsetMsgId of the dead-letter record it came from.
"""

from __future__ import annotations

import hashlib
import re

from ..formats import (
    PROPERTY_DELAY,
    PROPERTY_DLQ_FINGERPRINT,
    PROPERTY_DLQ_ORIGIN_MESSAGE_ID,
    PROPERTY_DLQ_REASON,
    PROPERTY_KEYS,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    RETRY_BOOKKEEPING_PROPERTIES,
    MessageView,
)
from .message import Message

DLQ_REASON_LENGTH_MAX = 1024

# Passed to ``Message`` as fields, not as user properties (the encoder writes them itself).
_FIELD_PROPERTIES = frozenset({PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY})


def user_properties(view: MessageView) -> dict[str, str]:
    """The view's properties minus KEYS, TAGS and UNIQ_KEY (a fresh dict)."""
    return {name: value for name, value in view.properties.items()
            if name not in _FIELD_PROPERTIES}


def send_back_copy(view: MessageView, topic: str, *, delay_level: int,
                   reason: str | None = None) -> Message:
    """The retry (``delay_level > 0``) or dead-letter (``delay_level == 0``) copy of ``view``."""
    properties = user_properties(view)
    properties.setdefault(PROPERTY_RETRY_TOPIC, view.topic)
    properties[PROPERTY_WAIT] = "false"
    origin = properties.get(PROPERTY_ORIGIN_MESSAGE_ID, "")
    if not origin.strip():
        properties[PROPERTY_ORIGIN_MESSAGE_ID] = view.msg_id
    if delay_level > 0:
        properties[PROPERTY_DELAY] = str(delay_level)
    else:
        properties.pop(PROPERTY_DELAY, None)
    if reason is not None and delay_level == 0:
        properties[PROPERTY_DLQ_REASON] = clean_reason(reason)
        properties[PROPERTY_DLQ_FINGERPRINT] = reason_fingerprint(reason)
    return Message(
        topic, view.body, tags=view.tags, keys=view.keys or None, properties=properties,
        unique_key=view.unique_key, flag=view.flag, born_timestamp_ms=view.born_timestamp_ms,
        born_host=str(view.born_host), reconsume_count=view.reconsume_count + 1,
        sys_flag=view.sys_flag)


def resend_copy(view: MessageView, topic: str, *, original_topic: str | None = None) -> Message:
    """A fresh message for ``topic`` from a dead letter (reconsume count 0, born now); with
    ``original_topic`` (a resend through a group's retry topic) its ``RETRY_TOPIC``."""
    properties = {name: value for name, value in user_properties(view).items()
                  if name not in RETRY_BOOKKEEPING_PROPERTIES}
    properties[PROPERTY_DLQ_ORIGIN_MESSAGE_ID] = view.msg_id
    if original_topic is not None:
        properties[PROPERTY_RETRY_TOPIC] = original_topic
    return Message(topic, view.body, tags=view.tags, keys=view.keys or None,
                   properties=properties, unique_key=view.unique_key, flag=view.flag,
                   sys_flag=view.sys_flag)


def clean_reason(reason: str) -> str:
    """``reason`` made storable: framing characters replaced, cut to the length limit."""
    text = str(reason).replace("\x01", " ").replace("\x02", " ")
    return text[:DLQ_REASON_LENGTH_MAX]


_VARIABLE_PARTS = re.compile(
    r"'[^']*'|\"[^\"]*\"|\b[0-9a-fA-F]{8,}\b|[0-9a-fA-F-]{36}|\d+(?:\.\d+)?")
FINGERPRINT_HEX_DIGITS = 16


def reason_shape(reason: str) -> str:
    """``reason`` with what varies from message to message (quoted values, numbers, hex ids)
    replaced by ``#``: ``ValueError: order # is poison``."""
    return _VARIABLE_PARTS.sub("#", clean_reason(reason)).strip()


def reason_fingerprint(reason: str) -> str:
    """The ``DLQ_FINGERPRINT`` of a reason: 16 hex digits of the SHA-1 of its shape."""
    digest = hashlib.sha1(reason_shape(reason).encode("utf-8"), usedforsecurity=False)
    return digest.hexdigest()[:FINGERPRINT_HEX_DIGITS]


__all__ = [
    "DLQ_REASON_LENGTH_MAX", "PROPERTY_DLQ_FINGERPRINT", "PROPERTY_DLQ_ORIGIN_MESSAGE_ID",
    "PROPERTY_DLQ_REASON", "clean_reason", "reason_fingerprint", "reason_shape", "resend_copy",
    "send_back_copy", "user_properties",
]
