"""The request rules every ``BrokerClient`` applies before it stores or reads anything. Pure.

The embedded broker and the remoting client check a request the same way, so a bad argument
raises the same error in this process as over the network: a client id is a non-empty string,
a queue is a (topic, queue id >= 0) pair, a batch goes to one topic with no delayed message and
at most ``MAX_MESSAGE_SIZE_BYTES`` in all, and a sharding key picks the queue Java's
``String.hashCode`` does. The limits and defaults both sides share are stated here too.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import InvalidMessageError, InvalidQueueError, InvalidTopicError
from ..formats import MAX_MESSAGE_SIZE_BYTES
from ..formats.engine import java_string_hashcode

QueueKey = tuple[str, int]  # (topic, queue_id)

PULL_BATCH_MAX = 1024
"""Largest ``max_count`` of one pull (RocketMQ clients pull 32)."""
RETRY_BASE_DELAY_LEVEL = 3  # retry #n waits level 3 + n (10 s, 30 s, 1 min, ...)
DELAY_LEVEL_COUNT = 18
"""Delay levels of RocketMQ's default ``messageDelayLevel`` (1s ... 2h): what a remote broker
offers; an embedded one offers its store's ``delay.levels_ms``."""
CONSUME_TIMESTAMP_DEFAULT_AGE_MS = 30 * 60 * 1000
"""``ConsumeFrom.TIMESTAMP`` with no timestamp starts this long ago (RocketMQ's 30 minutes)."""
_INT32_MIN = -(1 << 31)


def validate_client_id(client_id: object) -> str:
    """Return ``client_id`` if it is a non-empty string, else raise ``InvalidMessageError``."""
    if not isinstance(client_id, str) or not client_id:
        raise InvalidMessageError(f"client id must be a non-empty string, got {client_id!r}")
    return client_id


def validate_queue_key(queue: object) -> QueueKey:
    """Return ``queue`` if it is a (topic, queue id >= 0) pair, else raise."""
    if not isinstance(queue, tuple) or len(queue) != 2:
        raise InvalidQueueError(f"a queue must be a (topic, queue_id) pair, got {queue!r}")
    topic, queue_id = queue
    if not isinstance(topic, str) or not topic:
        raise InvalidTopicError(f"topic must be a non-empty string, got {topic!r}")
    if type(queue_id) is not int or queue_id < 0:
        raise InvalidQueueError(f"queue id must be an integer >= 0, got {queue_id!r}",
                                topic=topic)
    return topic, queue_id


def sharding_queue(sharding_key: str, write_queue_nums: int) -> int:
    """``abs(java_hash(key)) % write_queue_nums`` with ``Integer.MIN_VALUE`` mapped to 0."""
    value = java_string_hashcode(sharding_key)
    return 0 if value == _INT32_MIN else abs(value) % write_queue_nums


def batch_shape_problem(entries: Iterable[tuple[str, bool, int]]) -> str | None:
    """Why messages given as (topic, delayed, size in bytes) cannot be one batch, or None:
    at least one, one topic, none delayed, ``MAX_MESSAGE_SIZE_BYTES`` in all."""
    topic: str | None = None
    count = size = 0
    for entry_topic, delayed, entry_size in entries:
        if topic is None:
            topic = entry_topic
        elif entry_topic != topic:
            return f"a batch goes to one topic: {topic!r} and {entry_topic!r}"
        if delayed:
            return "a batch cannot carry delayed messages: send them one by one"
        count += 1
        size += entry_size
    if topic is None:
        return "a batch needs at least one message"
    if size > MAX_MESSAGE_SIZE_BYTES:
        return (f"a batch of {count} messages is {size:,} bytes, over the "
                f"{MAX_MESSAGE_SIZE_BYTES:,}-byte limit of one send: split it")
    return None
