"""The pop-consumption calls: ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue (semantics in ``pop_service`` and ``lease_expiry``).

ReceiveMessage answers a stream: a status (OK, or ``MESSAGE_NOT_FOUND`` when the long poll
found nothing), then — when there are messages — the delivery timestamp, then each message with
its receipt handle and the body digest (``conversion.body_digest``). The official push consumer
needs that order (it ignores messages without a delivery timestamp). The queue id of the request
is not used: a receive pops from every queue of the topic, as the assignment (queue -1) says.

Checks before anything is touched: topic and group names, the caller's SUB rights on both,
a TAG filter (SQL92 answers ``ILLEGAL_FILTER_EXPRESSION``), ``batch_size`` 1..32 (larger is
cut to 32), an invisible duration of ``INVISIBLE_MIN_MS``..12 h unless ``auto_renew`` (then the
server's default, renewed while the client lives), a long-polling timeout of at most 12 h
(then capped at the server's ``long_polling_max_ms`` and the call's own deadline).
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from .call_context import ServiceParts, metadata, report
from .conversion import message_to_proto, timestamp
from .names import client_id, duration_ms, group_name, topic_name
from .pop_service import BATCH_SIZE_MAX, ReceiveRequest
from .protocol import Code, definition, service
from .receipt_handle import ReceiptHandle
from .statuses import RequestError, combined_status, status, status_for

INVISIBLE_MIN_MS = 1000
DEFAULT_LONG_POLLING_MS = 20_000
DEADLINE_MARGIN_MS = 500
"""A long poll returns this long before the call's gRPC deadline."""
ACK_ENTRIES_MAX = 1024


def receive(parts: ServiceParts, request: service.ReceiveMessageRequest,
            context: grpc.ServicerContext) -> Iterator[service.ReceiveMessageResponse]:
    """ReceiveMessage."""
    try:
        pop_request, wait_ms = _receive_request(parts, request, context)
        deliveries = parts.pop.receive(pop_request, wait_ms, parts.cancelled(context))
    except Exception as error:  # answered as a status
        report("ReceiveMessage", error)
        yield service.ReceiveMessageResponse(status=status_for(error))
        return
    if not deliveries:
        yield service.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND,
                                                           "no new message"))
        return
    yield service.ReceiveMessageResponse(status=status())
    yield service.ReceiveMessageResponse(delivery_timestamp=timestamp(parts.clock.now_ms()))
    for delivery in deliveries:
        yield service.ReceiveMessageResponse(message=message_to_proto(
            delivery.view, receipt_handle=delivery.handle.encode(),
            invisible_ms=delivery.invisible_ms))


def _receive_request(parts: ServiceParts, request: service.ReceiveMessageRequest,
                     context: grpc.ServicerContext) -> tuple[ReceiveRequest, int]:
    group = group_name(request.group)
    topic = topic_name(request.message_queue.topic)
    parts.authorize(context, topics=[topic], groups=[group])
    caller = client_id(metadata(context))
    parts.sessions.touch(caller, parts.clock.now_ms())
    expression = request.filter_expression
    if expression.type == definition.SQL:
        raise RequestError(Code.ILLEGAL_FILTER_EXPRESSION, "SQL92 filters are not supported")
    if request.batch_size <= 0:
        raise RequestError(Code.BAD_REQUEST, f"batch_size must be >= 1, got "
                                             f"{request.batch_size}")
    if request.HasField("invisible_duration"):
        invisible_ms = duration_ms(request.invisible_duration, code=Code.ILLEGAL_INVISIBLE_TIME,
                                   what="invisible_duration", minimum_ms=INVISIBLE_MIN_MS)
    elif request.auto_renew:
        invisible_ms = parts.default_invisible_ms
    else:
        raise RequestError(Code.ILLEGAL_INVISIBLE_TIME, "invisible_duration is required "
                                                        "unless auto_renew is set")
    wait_ms = DEFAULT_LONG_POLLING_MS
    if request.HasField("long_polling_timeout"):
        wait_ms = duration_ms(request.long_polling_timeout, code=Code.ILLEGAL_POLLING_TIME,
                              what="long_polling_timeout")
    wait_ms = min(wait_ms, parts.long_polling_max_ms)
    remaining_s = context.time_remaining()
    if remaining_s is not None:
        wait_ms = max(0, min(wait_ms, int(remaining_s * 1000) - DEADLINE_MARGIN_MS))
    tags = expression.expression if expression.expression.strip() else None
    return ReceiveRequest(group, topic, tags, min(request.batch_size, BATCH_SIZE_MAX),
                          invisible_ms, caller, request.auto_renew), wait_ms


def ack(parts: ServiceParts, request: service.AckMessageRequest,
        context: grpc.ServicerContext) -> service.AckMessageResponse:
    """AckMessage: each entry answered on its own; the top status combines them."""
    group = group_name(request.group)
    topic = topic_name(request.topic)
    parts.authorize(context, topics=[topic], groups=[group])
    if len(request.entries) > ACK_ENTRIES_MAX:
        raise RequestError(Code.BAD_REQUEST, f"at most {ACK_ENTRIES_MAX} entries per ack")
    parts.sessions.touch(client_id(metadata(context)), parts.clock.now_ms())
    entries = []
    for entry in request.entries:
        try:
            handle = ReceiptHandle.decode(entry.receipt_handle)
            parts.authorize_handle(context, handle.topic)
            entry_status = status() if parts.pop.ack(group, handle) else _expired()
        except RequestError as error:
            entry_status = status_for(error)
        entries.append(service.AckMessageResultEntry(
            message_id=entry.message_id, receipt_handle=entry.receipt_handle,
            status=entry_status))
    return service.AckMessageResponse(
        status=combined_status([entry.status for entry in entries]), entries=entries)


def change_invisible(parts: ServiceParts, request: service.ChangeInvisibleDurationRequest,
                     context: grpc.ServicerContext
                     ) -> service.ChangeInvisibleDurationResponse:
    """ChangeInvisibleDuration: a new deadline under a new receipt handle."""
    group = group_name(request.group)
    topic = topic_name(request.topic)
    parts.authorize(context, topics=[topic], groups=[group])
    invisible_ms = duration_ms(request.invisible_duration, code=Code.ILLEGAL_INVISIBLE_TIME,
                               what="invisible_duration")
    handle = ReceiptHandle.decode(request.receipt_handle)
    parts.authorize_handle(context, handle.topic)
    renewed = parts.pop.change_invisible(group, handle, invisible_ms)
    if renewed is None:
        return service.ChangeInvisibleDurationResponse(status=_expired())
    return service.ChangeInvisibleDurationResponse(status=status(),
                                                   receipt_handle=renewed.encode())


def forward_to_dead_letter(parts: ServiceParts,
                           request: service.ForwardMessageToDeadLetterQueueRequest,
                           context: grpc.ServicerContext
                           ) -> service.ForwardMessageToDeadLetterQueueResponse:
    """ForwardMessageToDeadLetterQueue: the client gave up on a delivery."""
    group = group_name(request.group)
    topic = topic_name(request.topic)
    parts.authorize(context, topics=[topic], groups=[group])
    handle = ReceiptHandle.decode(request.receipt_handle)
    parts.authorize_handle(context, handle.topic)
    reason = (f"forwarded by the client after {request.delivery_attempt} of "
              f"{request.max_delivery_attempts} attempts")
    if not parts.pop.forward_to_dead_letter(group, handle, reason):
        return service.ForwardMessageToDeadLetterQueueResponse(status=_expired())
    return service.ForwardMessageToDeadLetterQueueResponse(status=status())


def _expired() -> definition.Status:
    return status(Code.INVALID_RECEIPT_HANDLE,
                  "receipt handle expired or unknown (the lease ended: the message was or "
                  "will be redelivered)")


__all__ = ["ack", "change_invisible", "forward_to_dead_letter", "receive"]
