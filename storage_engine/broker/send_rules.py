"""What a send returns, and what a batch send refuses, apart from the ``Broker`` that sends.

``send_result`` builds the ``SendResult`` of one stored message from the store's ``PutResult``
(the topic and queue the caller asked for beside where the store put it: the delay topic for a
delayed message). ``divert`` says where a send is stored (the delay or timer topic, or its
own). ``batch_problem`` says why a batch cannot be stored as one append (RocketMQ's
batch rules: at least one message, one topic, no delay level, bodies of at most
``MAX_MESSAGE_SIZE_BYTES`` in all, the size of one send), or None; the rules on (topic,
delayed, size) alone are ``contract.rules.batch_shape_problem``, which the remoting client applies
to the batch it encodes too (its size: the encoded entries).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..config import DelayConfig
from ..contract.message import Message, PutResult
from ..contract.model import SendResult
from ..contract.rules import batch_shape_problem
from ..formats import body_problem
from .delay_service import delay_level, schedule_delayed
from .timer_messages import TIMER_PROPERTIES, schedule_timer


def send_result(message: Message, queue_id: int, result: PutResult, level: int) -> SendResult:
    """What a send of ``message`` to ``queue_id`` returns, from the store's ``result``
    (``level``: the delay level it was scheduled with, 0 for none)."""
    return SendResult(
        topic=message.topic, queue_id=queue_id, stored_topic=result.topic,
        stored_queue_id=result.queue_id, queue_offset=result.queue_offset,
        log_position=result.log_position, offset_msg_id=result.msg_id,
        unique_key=message.unique_key, store_timestamp_ms=result.store_timestamp_ms,
        delay_level=level, status=result.status)


def batch_problem(messages: Sequence[Message], levels_ms: tuple[int, ...]) -> str | None:
    """Why ``messages`` cannot be one batch, or None (a body that is not bytes is named here;
    empty bodies are checked by the sender)."""
    for message in messages:
        if problem := body_problem(message.body):
            return problem
    return batch_shape_problem((message.topic, is_scheduled(message, levels_ms),
                                len(message.body)) for message in messages)


def is_scheduled(message: Message, levels_ms: tuple[int, ...]) -> bool:
    """Whether ``message`` asks for a delay level or a timer."""
    properties = message.properties or {}
    return bool(delay_level(message, levels_ms)) or any(
        name in properties for name in TIMER_PROPERTIES)


def divert(message: Message, queue_id: int, now_ms: int, delay: DelayConfig
           ) -> tuple[Message, int, int]:
    """(what to store, its queue id, delay level): ``message`` through ``SCHEDULE_TOPIC_XXXX``
    for a ``DELAY`` level, through ``rmq_sys_wheel_timer`` for a timer, else as it is.

    Raises:
        InvalidMessageError: a timer that is unparsable, too far ahead, or off.
    """
    scheduled = schedule_delayed(message, queue_id, delay.levels_ms)
    if scheduled is not None:
        return scheduled
    timer = schedule_timer(message, queue_id, now_ms, enabled=delay.timer_enabled,
                           max_delay_s=delay.timer_max_delay_s, levels_ms=delay.levels_ms)
    return (timer, 0, 0) if timer is not None else (message, queue_id, 0)


