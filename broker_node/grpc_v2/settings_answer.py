"""The server's answer to a client's settings on the Telemetry stream. Pure.

A RocketMQ 5 client opens a Telemetry stream and sends its ``Settings`` (client type, access
point, topics it publishes to or the group and subscriptions it consumes with); the server
answers with the settings the client should run with. A push consumer waits (10 s) for this
answer before it starts.

* Producers: ``publishing.max_body_size`` = the store's ``commit_log.max_message_size_bytes``
  (so the client refuses larger bodies itself), message types validated, and an exponential
  send back-off (``PRODUCER_BACKOFF``).
* Consumers: ``subscription`` as the client sent it, ``fifo`` = the group consumes orderly
  (``consumeMessageOrderly``, ``fifo_order``), ``receive_batch_size`` = ``BATCH_SIZE_MAX``, the
  long-polling timeout, and a customized back-off: max attempts = the group's
  ``retry_max_times`` + 1, and the delays of delay levels 1, 2, 3, … rounded up to whole
  seconds, because the official Python client reads only the seconds of each duration. With
  RocketMQ's default levels this is exactly the ladder Apache RocketMQ 5's proxy sends (a
  group's default ``CustomizedRetryPolicy``: 1 s, 5 s, 10 s, 30 s, 1 m, …, 2 h; the i-th entry
  is the wait before the i-th retry). The remoting protocol's ``%RETRY%`` ladder starts at level
  3 instead; gRPC consumers do not use it. A push consumer that fails a message makes it
  invisible for that back-off (``ChangeInvisibleDuration``), after which the server redelivers
  it through ``%RETRY%<group>``.
"""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf.duration_pb2 import Duration

from .conversion import duration
from .pop_service import BATCH_SIZE_MAX
from .protocol import Code, definition
from .statuses import RequestError

RETRY_BASE_LEVEL = 1
"""The first retry waits delay level 1 (1 s with RocketMQ's default levels), as Apache's proxy."""
PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF_INITIAL_MS = 10
PRODUCER_BACKOFF_MAX_MS = 1000
_CONSUMERS = (definition.PUSH_CONSUMER, definition.SIMPLE_CONSUMER)


def consumer_backoff_s(levels_ms: Sequence[int]) -> list[int]:
    """Retry delays in whole seconds (at least 1): levels 1, 2, … of ``levels_ms``."""
    ladder = list(levels_ms[RETRY_BASE_LEVEL - 1:]) or [levels_ms[-1]]
    return [max(1, -(-delay_ms // 1000)) for delay_ms in ladder]


def settings_answer(client: definition.Settings, *, max_body_bytes: int, max_attempts: int,
                    levels_ms: Sequence[int], long_polling_ms: int,
                    fifo: bool = False) -> definition.Settings:
    """The settings a client with ``client`` settings should use."""
    answer = definition.Settings(client_type=client.client_type)
    if client.HasField("access_point"):
        answer.access_point.CopyFrom(client.access_point)
    if client.HasField("request_timeout"):
        answer.request_timeout.CopyFrom(client.request_timeout)
    answer.metric.on = False
    if client.client_type == definition.PRODUCER:
        answer.publishing.CopyFrom(definition.Publishing(
            topics=client.publishing.topics, max_body_size=max_body_bytes,
            validate_message_type=True))
        answer.backoff_policy.CopyFrom(definition.RetryPolicy(
            max_attempts=PRODUCER_MAX_ATTEMPTS,
            exponential_backoff=definition.ExponentialBackoff(
                initial=duration(PRODUCER_BACKOFF_INITIAL_MS),
                max=duration(PRODUCER_BACKOFF_MAX_MS), multiplier=2.0)))
        return answer
    if client.client_type not in _CONSUMERS:
        raise RequestError(Code.UNRECOGNIZED_CLIENT_TYPE,
                           f"client type {definition.ClientType.Name(client.client_type)} is "
                           "not supported (producers, push and simple consumers are)")
    subscription = definition.Subscription()
    subscription.CopyFrom(client.subscription)
    subscription.fifo = fifo
    subscription.receive_batch_size = BATCH_SIZE_MAX
    subscription.long_polling_timeout.CopyFrom(duration(long_polling_ms))
    answer.subscription.CopyFrom(subscription)
    answer.backoff_policy.CopyFrom(definition.RetryPolicy(
        max_attempts=max_attempts,
        customized_backoff=definition.CustomizedBackoff(
            next=[Duration(seconds=seconds) for seconds in consumer_backoff_s(levels_ms)])))
    return answer


__all__ = ["consumer_backoff_s", "settings_answer"]
