"""What a timer message becomes on its way through ``rmq_sys_wheel_timer``. Pure.

Send path (``schedule_timer``): a message with ``TIMER_DELIVER_MS`` (absolute epoch ms),
``TIMER_DELAY_SEC`` or ``TIMER_DELAY_MS`` (relative to the send) and no ``DELAY`` level (a level
takes precedence, as in RocketMQ) is diverted as Apache RocketMQ 5.3 diverts it
(``HookUtils.transformTimerMessage``): ``TIMER_OUT_MS`` = the deliver time, ``REAL_TOPIC`` /
``REAL_QID`` = where it was going, stored in ``rmq_sys_wheel_timer`` queue 0. A deliver time at
or before now stores the message normally (delivered at once); one more than
``delay.timer_max_delay_s`` ahead (``timerMaxDelaySec``, 3 days), a value Java's
``Long.parseLong`` refuses (spaces, ``_``, past the 64-bit range; a delay that overflows wraps
to the past, as in Java), or a delete marker whose time has passed is refused
(``InvalidMessageError``: RocketMQ's WHEEL_TIMER_MSG_ILLEGAL, remoting code 13), and so is
every timer message when ``delay.timer_enabled`` is off (``timerWheelEnable``). Apache rounds
``TIMER_OUT_MS`` down to ``timerPrecisionMs`` (one precision earlier for an exact multiple);
Postbox keeps the exact millisecond.

Delivery (``timer_delivery``): the real topic and queue, ``REAL_TOPIC`` / ``REAL_QID`` and the
relative properties removed (a retry or dead-letter copy must not wait again),
``TIMER_ENQUEUE_MS`` / ``TIMER_DEQUEUE_MS`` added, ``WAIT=false``. A parked record's message is
put back to the timer topic instead (``timer_roll_copy``, ``TIMER_ROLL_TIMES`` + 1).
``timer_moment``: when a record is due — ``TIMER_OUT_MS``, or for a time Apache rounded down
the moment the sender asked for (never past the end of its slot).
"""


from __future__ import annotations

from ..contract.message import Message
from ..errors import InvalidMessageError
from ..formats import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TIMER_ROLL_TIMES,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    MessageView,
)
from ..formats.topic_names import TIMER_TOPIC
from .delay_service import delay_level

TIMER_PROPERTIES = (PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS)


def java_long(text: str) -> int:
    """``text`` read as Java's ``Long.parseLong`` reads it: an optional ``+``/``-`` then
    decimal digits (any script's), no spaces or ``_``, within the signed 64-bit range.

    Raises:
        ValueError: anything else.
    """
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not all(char.isdecimal() for char in digits):
        raise ValueError(f"{text!r} is not a Java long")
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"{text!r} is out of a Java long's range")
    return value


def _wrapped(value: int) -> int:
    """``value`` wrapped to a signed 64-bit long, as Java's arithmetic wraps it."""
    return (value + 2**63) % 2**64 - 2**63


def timer_deliver_ms(properties: dict[str, str], now_ms: int) -> int | None:
    """The deliver time the timer properties ask for (None: there are none), computed as
    RocketMQ's ``HookUtils.transformTimerMessage`` does (Java longs: a delay that overflows
    wraps, to a time in the past).

    Raises:
        InvalidMessageError: a timer property is not a Java long.
    """
    for name, scale, base in ((PROPERTY_TIMER_DELAY_SEC, 1000, now_ms),
                              (PROPERTY_TIMER_DELAY_MS, 1, now_ms),
                              (PROPERTY_TIMER_DELIVER_MS, 1, 0)):
        raw = properties.get(name)
        if raw is None:
            continue
        try:
            return _wrapped(base + _wrapped(java_long(raw) * scale))
        except ValueError as error:
            raise InvalidMessageError(f"{name}={raw!r} is not an integer "
                                      "(WHEEL_TIMER_MSG_ILLEGAL)") from error
    return None


def schedule_timer(message: Message, queue_id: int, now_ms: int, *, enabled: bool,
                   max_delay_s: int, levels_ms: tuple[int, ...]) -> Message | None:
    """The ``rmq_sys_wheel_timer`` record of a timer message, or None when ``message`` is not
    one (or is due already, or has a ``DELAY`` level). The input is never modified.

    Raises:
        InvalidMessageError: unparsable, more than ``max_delay_s`` ahead, or timers are off.
    """
    properties = dict(message.properties or {})
    cancel = PROPERTY_TIMER_DEL_UNIQKEY in properties
    if not cancel and not any(name in properties for name in TIMER_PROPERTIES):
        return None
    if not cancel and delay_level(message, levels_ms):
        return None
    if not enabled:
        raise InvalidMessageError("timer messages are off on this broker (timerWheelEnable="
                                  "false, WHEEL_TIMER_NOT_ENABLE)", topic=message.topic)
    deliver_ms = timer_deliver_ms(properties, now_ms)
    if cancel and deliver_ms is not None and deliver_ms <= now_ms:
        raise InvalidMessageError("a timer delete marker's time has passed "
                                  "(WHEEL_TIMER_MSG_ILLEGAL)", topic=message.topic)
    if cancel:  # a delete marker is never stored as a message of its topic
        properties.pop(PROPERTY_DELAY, None)
        deliver_ms = max(deliver_ms or now_ms, now_ms)
    elif deliver_ms is None or deliver_ms <= now_ms:
        return None
    if deliver_ms - now_ms > max_delay_s * 1000:
        raise InvalidMessageError(
            f"timer delay of {deliver_ms - now_ms} ms exceeds timerMaxDelaySec={max_delay_s} "
            "(WHEEL_TIMER_MSG_ILLEGAL)", topic=message.topic)
    properties[PROPERTY_TIMER_OUT_MS] = str(deliver_ms)
    properties[PROPERTY_REAL_TOPIC] = message.topic
    properties[PROPERTY_REAL_QID] = str(queue_id)
    keys = message.keys if message.keys is None or isinstance(message.keys, str) else list(
        message.keys)
    return Message(
        TIMER_TOPIC, message.body, tags=message.tags, keys=keys, properties=properties,
        unique_key=message.unique_key, flag=message.flag,
        born_timestamp_ms=message.born_timestamp_ms, born_host=message.born_host,
        reconsume_count=message.reconsume_count, sys_flag=message.sys_flag)


def timer_delivery(view: MessageView, now_ms: int) -> tuple[Message, int]:
    """The message a stored timer record becomes, and its real queue id.

    Raises:
        InvalidMessageError: no or invalid ``REAL_TOPIC`` / ``REAL_QID``.
    """
    properties = dict(view.properties)
    real_topic = properties.pop(PROPERTY_REAL_TOPIC, None)
    real_qid = properties.pop(PROPERTY_REAL_QID, None)
    if not real_topic or real_qid is None or not real_qid.lstrip("-").isdigit():
        raise InvalidMessageError(f"timer record at position={view.log_position} has no valid "
                                  f"{PROPERTY_REAL_TOPIC}/{PROPERTY_REAL_QID}")
    for relative in (PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS):
        properties.pop(relative, None)  # a later resend (retry, DLQ) must not wait again
    properties[PROPERTY_TIMER_ENQUEUE_MS] = str(view.store_timestamp_ms)
    properties[PROPERTY_TIMER_DEQUEUE_MS] = str(now_ms)
    properties[PROPERTY_WAIT] = "false"
    return _copy(view, real_topic, properties), int(real_qid)


def timer_key(properties: dict[str, str], cancels: str | None = None
               ) -> tuple[str, str] | None:
    """(real topic, UNIQ_KEY) of a timer record, or of the timer its delete marker cancels
    (``cancels``: the UNIQ_KEY, or RocketMQ 5's ``realTopic+UNIQ_KEY``); None: no key."""
    topic = properties.get(PROPERTY_REAL_TOPIC, "")
    unique_key = properties.get(PROPERTY_UNIQ_KEY) if cancels is None else cancels
    if cancels is not None and cancels.startswith(topic + "+"):
        unique_key = cancels[len(topic) + 1:]
    return (topic, unique_key) if topic and unique_key else None




def _copy(view: MessageView, topic: str, properties: dict[str, str]) -> Message:
    keys = properties.pop(PROPERTY_KEYS, None)
    tags = properties.pop(PROPERTY_TAGS, None)
    unique_key = properties.pop(PROPERTY_UNIQ_KEY, None)
    born_ms = view.born_timestamp_ms
    return Message(
        topic, view.body, tags=tags, keys=keys, properties=properties,
        unique_key=unique_key, flag=view.flag,
        born_timestamp_ms=born_ms if born_ms >= 0 else None, born_host=str(view.born_host),
        reconsume_count=max(0, view.reconsume_count), sys_flag=view.sys_flag)


def timer_roll_copy(view: MessageView, enqueue_ms: int, now_ms: int) -> Message:
    """The copy of a parked (rolled) timer record put back to the timer topic: its properties
    kept, ``TIMER_ROLL_TIMES`` + 1, ``TIMER_ENQUEUE_MS`` / ``TIMER_DEQUEUE_MS`` set (Apache's
    ``convert(..., needRoll=true)``)."""
    properties = dict(view.properties)
    try:
        rolls = int(properties.get(PROPERTY_TIMER_ROLL_TIMES, "0")) + 1
    except ValueError:
        rolls = 1
    properties[PROPERTY_TIMER_ROLL_TIMES] = str(rolls)
    properties[PROPERTY_TIMER_ENQUEUE_MS] = str(enqueue_ms)
    properties[PROPERTY_TIMER_DEQUEUE_MS] = str(now_ms)
    properties[PROPERTY_WAIT] = "false"
    return _copy(view, view.topic, properties)


def timer_moment(properties: dict[str, str], store_timestamp_ms: int, out_ms: int,
                 precision_ms: int) -> int:
    """When a record whose ``TIMER_OUT_MS`` is ``out_ms`` is due. A multiple of the precision
    may be Apache's rounding of a later moment (in ``(out_ms, out_ms + precision_ms]``): the
    moment the timer properties ask for then (``TIMER_DELIVER_MS``, or the store time plus
    the relative delay), clamped into that slot, so Postbox is never early for it either."""
    if out_ms % precision_ms:
        return out_ms
    try:
        asked = timer_deliver_ms({name: value for name, value in properties.items()
                                  if name in TIMER_PROPERTIES}, store_timestamp_ms)
    except InvalidMessageError:
        asked = None
    return out_ms if asked is None else min(max(out_ms, asked), out_ms + precision_ms)


__all__ = ["TIMER_PROPERTIES", "java_long", "schedule_timer", "timer_deliver_ms",
           "timer_delivery", "timer_key", "timer_moment", "timer_roll_copy"]
