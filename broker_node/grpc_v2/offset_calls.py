"""Offset-based consumption: PullMessage, UpdateOffset, GetOffset, QueryOffset.

These are the calls of a client that tracks offsets itself (RocketMQ's pull consumer), straight
over ``Broker.pull`` / ``commit_offset`` / ``query_offset`` and the store's queue bounds. They
share the group's committed offsets with pop consumption, so one group should use one style.

PullMessage answers a stream: a status (OK when messages were found, ``MESSAGE_NOT_FOUND``
when nothing new matched, ``ILLEGAL_OFFSET`` when the offset was outside the queue), then the
messages, then the next offset to pull from (corrected into the queue for ``ILLEGAL_OFFSET``).
Long polling uses the broker's (capped at ``broker.long_polling_max_ms``). Rights are checked
before the queue is looked up, so a caller without them learns nothing about the topic.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from postbox.storage_engine.contract.message import GetStatus

from .call_context import ServiceParts, report
from .conversion import message_to_proto
from .names import duration_ms, group_name, topic_name
from .pop_service import BATCH_SIZE_MAX
from .protocol import Code, definition, service
from .statuses import RequestError, status, status_for

_NOT_FOUND = (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.OFFSET_OVERFLOW_ONE,
              GetStatus.NO_MATCHED_MESSAGE, GetStatus.NO_MATCHED_LOGIC_QUEUE)


def _queue(parts: ServiceParts, queue: definition.MessageQueue) -> tuple[str, int]:
    """(topic, queue id) of a request's queue, which must exist."""
    topic = topic_name(queue.topic)
    if parts.broker.topic_config(topic) is None:
        raise RequestError(Code.TOPIC_NOT_FOUND, f"topic {topic!r} does not exist")
    if queue.id not in parts.broker.queue_ids(topic):
        raise RequestError(Code.BAD_REQUEST, f"topic {topic!r} has no readable queue "
                                             f"{queue.id}")
    return topic, queue.id


def pull(parts: ServiceParts, request: service.PullMessageRequest,
         context: grpc.ServicerContext) -> Iterator[service.PullMessageResponse]:
    """PullMessage."""
    try:
        group = group_name(request.group)
        parts.authorize(context, topics=[topic_name(request.message_queue.topic)],
                        groups=[group])
        topic, queue_id = _queue(parts, request.message_queue)
        if request.filter_expression.type == definition.SQL:
            raise RequestError(Code.ILLEGAL_FILTER_EXPRESSION, "SQL92 filters are not "
                                                               "supported")
        wait_ms = duration_ms(request.long_polling_timeout, code=Code.ILLEGAL_POLLING_TIME,
                              what="long_polling_timeout")
        tags = request.filter_expression.expression.strip() or None
        result = parts.broker.pull(group, topic, queue_id, request.offset,
                                   min(max(request.batch_size, 1), BATCH_SIZE_MAX), tags=tags,
                                   suspend_timeout_ms=0 if parts.stopping.is_set() else wait_ms)
    except Exception as error:  # answered as a status
        report("PullMessage", error)
        yield service.PullMessageResponse(status=status_for(error))
        return
    if result.status is GetStatus.FOUND:
        answer = status()
    elif result.status in _NOT_FOUND:
        answer = status(Code.MESSAGE_NOT_FOUND, f"no new message ({result.status.value})")
    else:
        answer = status(Code.ILLEGAL_OFFSET, f"offset {request.offset} is outside the queue "
                                             f"({result.status.value}); continue at "
                                             f"{result.next_offset}")
    yield service.PullMessageResponse(status=answer)
    for view in result.messages:
        yield service.PullMessageResponse(message=message_to_proto(view))
    yield service.PullMessageResponse(next_offset=result.next_offset)


def update_offset(parts: ServiceParts, request: service.UpdateOffsetRequest,
                  context: grpc.ServicerContext) -> service.UpdateOffsetResponse:
    """UpdateOffset: commit the group's next offset on one queue."""
    group = group_name(request.group)
    parts.authorize(context, topics=[topic_name(request.message_queue.topic)], groups=[group])
    topic, queue_id = _queue(parts, request.message_queue)
    if request.offset < 0:
        raise RequestError(Code.ILLEGAL_OFFSET, f"offset must be >= 0, got {request.offset}")
    parts.broker.commit_offset(group, topic, queue_id, request.offset)
    return service.UpdateOffsetResponse(status=status())


def get_offset(parts: ServiceParts, request: service.GetOffsetRequest,
               context: grpc.ServicerContext) -> service.GetOffsetResponse:
    """GetOffset: the group's committed offset (``OFFSET_NOT_FOUND`` when none)."""
    group = group_name(request.group)
    parts.authorize(context, topics=[topic_name(request.message_queue.topic)], groups=[group])
    topic, queue_id = _queue(parts, request.message_queue)
    offset = parts.broker.query_offset(group, topic, queue_id)
    if offset is None:
        return service.GetOffsetResponse(status=status(
            Code.OFFSET_NOT_FOUND, f"group {group!r} has no offset on {topic}:{queue_id}"))
    return service.GetOffsetResponse(status=status(), offset=offset)


def query_offset(parts: ServiceParts, request: service.QueryOffsetRequest,
                 context: grpc.ServicerContext) -> service.QueryOffsetResponse:
    """QueryOffset: a queue's first or end offset, or the first stored at a time."""
    parts.authorize(context, topics=[topic_name(request.message_queue.topic)])
    topic, queue_id = _queue(parts, request.message_queue)
    store = parts.broker.store
    policy = request.query_offset_policy
    if policy == definition.BEGINNING:
        offset = store.min_offset(topic, queue_id)
    elif policy == definition.END:
        offset = store.max_offset(topic, queue_id)
    else:
        if not request.HasField("timestamp"):
            raise RequestError(Code.BAD_REQUEST, "TIMESTAMP policy needs a timestamp")
        when = request.timestamp
        offset = store.offset_by_time(topic, queue_id,
                                      when.seconds * 1000 + when.nanos // 1_000_000)
    return service.QueryOffsetResponse(status=status(), offset=offset)


__all__ = ["get_offset", "pull", "query_offset", "update_offset"]
