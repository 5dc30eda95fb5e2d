"""``MessagingServicer``: Apache RocketMQ 5's ``apache.rocketmq.v2.MessagingService`` over an
embedded ``Broker``.

Implemented: QueryRoute, Heartbeat, Telemetry (settings exchange, and transaction checks pushed
to producers), SendMessage, QueryAssignment, ReceiveMessage, AckMessage,
ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue, PullMessage, UpdateOffset, GetOffset,
QueryOffset, NotifyClientTermination, EndTransaction (``transaction_calls``).
RecallMessage and SyncLiteSubscription answer ``NOT_IMPLEMENTED`` in their status (to signed
callers; unsigned ones get ``UNAUTHORIZED`` as everywhere); a method
unknown to this protocol version gets gRPC ``UNIMPLEMENTED`` from grpc itself.

This class only routes: the route/heartbeat/telemetry/termination calls are here, sending is
``produce_calls``, pop consumption ``consume_calls``, offset-based consumption
``offset_calls``. Every call validates names first and checks the caller's rights (with an
ACL) before it touches the broker; refusals are statuses, never gRPC errors.

Thread-safety: one instance serves all gRPC worker threads; it holds no mutable state itself.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import grpc

from . import consume_calls, offset_calls, produce_calls, transaction_calls
from .call_context import ServiceParts, answers, metadata, report
from .fifo_order import is_fifo_group
from .lease_expiry import max_attempts
from .names import client_id, group_name, required_client_id, topic_name
from .protocol import Code, definition, service, service_grpc
from .routing import endpoints_for, pop_assignment, route_queues
from .settings_answer import settings_answer
from .statuses import RequestError, not_implemented, status, status_for

log = logging.getLogger(__name__)

_CONSUMER_TYPES = (definition.PUSH_CONSUMER, definition.SIMPLE_CONSUMER)


class MessagingServicer(service_grpc.MessagingServiceServicer):
    """The MessagingService of one Postbox broker server."""

    def __init__(self, parts: ServiceParts,
                 telemetry: transaction_calls.TelemetryStreams | None = None) -> None:
        self._parts = parts
        self._telemetry = telemetry or transaction_calls.TelemetryStreams()

    # ---- routes, membership, settings -------------------------------------------------------

    @answers(service.QueryRouteResponse)
    def QueryRoute(self, request, context):  # noqa: D102 (generated names)
        parts = self._parts
        topic = topic_name(request.topic)
        parts.authorize(context, describe=[topic])
        config = parts.broker.topic_config(topic)
        broker_config = parts.broker.store.config.broker
        if config is None and not broker_config.auto_create_topic:
            raise RequestError(Code.TOPIC_NOT_FOUND, f"topic {topic!r} does not exist and "
                                                     "auto-creation is off")
        queues = route_queues(topic, config, broker_config.default_topic_queue_count,
                              endpoints_for(request.endpoints, parts.advertised))
        return service.QueryRouteResponse(status=status(), message_queues=queues)

    @answers(service.HeartbeatResponse)
    def Heartbeat(self, request, context):  # noqa: D102
        parts = self._parts
        if request.client_type in _CONSUMER_TYPES and request.HasField("group"):
            group = group_name(request.group)
            parts.authorize(context, groups=[group])
            member = required_client_id(metadata(context))
            parts.broker.register_consumer(group, member, parts.sessions.topics(member))
            caller: str | None = member
        else:
            parts.authorize(context)
            caller = client_id(metadata(context))
        parts.sessions.touch(caller, parts.clock.now_ms())
        return service.HeartbeatResponse(status=status())

    def Telemetry(self, request_iterator, context):  # noqa: D102
        parts = self._parts
        try:
            parts.authorize(context)
            caller = client_id(metadata(context))
        except Exception as error:  # answered as a status, then the stream ends
            report("Telemetry", error)
            yield service.TelemetryCommand(status=status_for(error))
            return

        def answer(command, stream: int):
            if not command.HasField("settings"):
                return None  # stack traces, verify results: nothing to answer
            try:
                settings = self._settings(command.settings, caller, context)
            except Exception as error:  # answered as a status
                report("Telemetry", error)
                return service.TelemetryCommand(status=status_for(error))
            if command.settings.client_type == definition.PRODUCER:
                self._telemetry.publishing(stream, tuple(
                    topic_name(topic) for topic in command.settings.publishing.topics))
            return service.TelemetryCommand(status=status(), settings=settings)

        yield from transaction_calls.serve_telemetry(self._telemetry, caller, request_iterator,
                                                     parts.stopping, answer)

    def _settings(self, client: definition.Settings, caller: str | None,
                  context: grpc.ServicerContext) -> definition.Settings:
        parts = self._parts
        store_config = parts.broker.store.config
        attempts, fifo = 1, False
        if client.client_type == definition.PRODUCER:
            topics = tuple(topic_name(topic) for topic in client.publishing.topics)
            parts.authorize(context, topics=topics, write=True)
            group = None
        else:
            group = group_name(client.subscription.group)
            topics = tuple(topic_name(entry.topic) for entry in client.subscription.subscriptions)
            parts.authorize(context, topics=topics, groups=[group])
            if client.client_type in _CONSUMER_TYPES:
                attempts = max_attempts(parts.broker, group)
                fifo = is_fifo_group(parts.broker, group)
        answer = settings_answer(
            client, max_body_bytes=store_config.commit_log.max_message_size_bytes,
            max_attempts=attempts, levels_ms=store_config.delay.levels_ms,
            long_polling_ms=min(consume_calls.DEFAULT_LONG_POLLING_MS,
                                parts.long_polling_max_ms), fifo=fifo)
        if caller is not None:
            parts.sessions.describe(caller, parts.clock.now_ms(), client_type=client.client_type,
                                    group=group, topics=topics)
        return answer

    @answers(service.NotifyClientTerminationResponse)
    def NotifyClientTermination(self, request, context):  # noqa: D102
        parts = self._parts
        group = group_name(request.group) if request.HasField("group") else None
        parts.authorize(context, groups=[group] if group else [])
        caller = client_id(metadata(context))
        if caller is not None:
            if group is not None:
                parts.broker.unregister_consumer(group, caller)
            parts.sessions.terminate(caller)
            released = parts.pop.client_gone(caller)
            log.info("[rpc] client %s left (group %s, %d leases released)", caller, group,
                     released)
        return service.NotifyClientTerminationResponse(status=status())

    @answers(service.QueryAssignmentResponse)
    def QueryAssignment(self, request, context):  # noqa: D102
        parts = self._parts
        topic = topic_name(request.topic)
        group = group_name(request.group)
        parts.authorize(context, topics=[topic], groups=[group])
        if parts.broker.topic_config(topic) is None \
                and not parts.broker.store.config.broker.auto_create_topic:
            raise RequestError(Code.TOPIC_NOT_FOUND, f"topic {topic!r} does not exist")
        assignments = pop_assignment(topic, endpoints_for(request.endpoints, parts.advertised))
        return service.QueryAssignmentResponse(status=status(), assignments=assignments)

    # ---- send and consume -------------------------------------------------------------------

    @answers(service.SendMessageResponse)
    def SendMessage(self, request, context):  # noqa: D102
        return produce_calls.send(self._parts, request, context)

    def ReceiveMessage(self, request, context) -> Iterator:  # noqa: D102
        return consume_calls.receive(self._parts, request, context)

    @answers(service.AckMessageResponse)
    def AckMessage(self, request, context):  # noqa: D102
        return consume_calls.ack(self._parts, request, context)

    @answers(service.ChangeInvisibleDurationResponse)
    def ChangeInvisibleDuration(self, request, context):  # noqa: D102
        return consume_calls.change_invisible(self._parts, request, context)

    @answers(service.ForwardMessageToDeadLetterQueueResponse)
    def ForwardMessageToDeadLetterQueue(self, request, context):  # noqa: D102
        return consume_calls.forward_to_dead_letter(self._parts, request, context)

    def PullMessage(self, request, context) -> Iterator:  # noqa: D102
        return offset_calls.pull(self._parts, request, context)

    @answers(service.UpdateOffsetResponse)
    def UpdateOffset(self, request, context):  # noqa: D102
        return offset_calls.update_offset(self._parts, request, context)

    @answers(service.GetOffsetResponse)
    def GetOffset(self, request, context):  # noqa: D102
        return offset_calls.get_offset(self._parts, request, context)

    @answers(service.QueryOffsetResponse)
    def QueryOffset(self, request, context):  # noqa: D102
        return offset_calls.query_offset(self._parts, request, context)

    @answers(service.EndTransactionResponse)
    def EndTransaction(self, request, context):  # noqa: D102
        return transaction_calls.end(self._parts, request, context)

    # ---- not supported ----------------------------------------------------------------------

    @answers(service.RecallMessageResponse)
    def RecallMessage(self, request, context):  # noqa: D102
        self._parts.authorize(context)
        return service.RecallMessageResponse(status=not_implemented("RecallMessage"))

    @answers(service.SyncLiteSubscriptionResponse)
    def SyncLiteSubscription(self, request, context):  # noqa: D102
        self._parts.authorize(context)
        return service.SyncLiteSubscriptionResponse(
            status=not_implemented("SyncLiteSubscription"))


__all__ = ["MessagingServicer"]
