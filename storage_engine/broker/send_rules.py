"""What a send returns, and what a batch send refuses, apart from the ``Broker`` that sends.

``send_result`` builds the ``SendResult`` of one stored message from the store's ``PutResult``
(the topic and queue the caller asked for beside where the store put it: the delay topic for a
delayed message). ``batch_problem`` says why a batch cannot be stored as one append (RocketMQ's
batch rules: at least one message, one topic, no delay level, bodies of at most
``MAX_MESSAGE_SIZE_BYTES`` in all, the size of one send), or None.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..formats import MAX_MESSAGE_SIZE_BYTES
from ..store.message import Message, PutResult
from .delay_service import delay_level
from .model import SendResult


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
    """Why ``messages`` cannot be one batch, or None (bodies are checked by the sender)."""
    if not messages:
        return "a batch needs at least one message"
    topic = messages[0].topic
    for message in messages:
        if message.topic != topic:
            return f"a batch goes to one topic: {topic!r} and {message.topic!r}"
        if delay_level(message, levels_ms):
            return "a batch cannot carry delayed messages: send them one by one"
    size = sum(len(message.body) for message in messages)
    if size > MAX_MESSAGE_SIZE_BYTES:
        return (f"a batch of {len(messages)} messages is {size:,} bytes, over the "
                f"{MAX_MESSAGE_SIZE_BYTES:,}-byte limit of one send: split it")
    return None
