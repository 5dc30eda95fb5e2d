"""The OpenTelemetry side of ``framework.tracing``: spans and message-property propagation.

Imported only when ``opentelemetry`` is installed (``framework.tracing`` checks first). Span
names and attributes follow OpenTelemetry's messaging semantic conventions for RocketMQ: spans
``"send <topic>"`` (PRODUCER) and ``"process <topic>"`` (CONSUMER), ``messaging.system =
"rocketmq"``, ``messaging.operation.name`` / ``.type``, ``messaging.destination.name``,
``messaging.message.id``, ``messaging.destination.partition.id`` = queue id,
``messaging.consumer.group.name``, ``messaging.rocketmq.namespace`` when the client has one, ...;
what the conventions have no name for is under ``postbox.*`` (queue offset, attempt, log
position). Each send and handler call is also measured (``framework.tracing_metrics``). The
trace context travels as message user properties written and read by a propagator (the global
one unless given): only entries that are legal user properties (no system name, no
U+0001/U+0002) are written, so a message stays storable whatever the propagator emits.
Thread-safe: the tracer, propagators and instruments are; nothing here keeps state per message.
"""

from __future__ import annotations

import copy
import importlib.metadata
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind

from postbox.storage_engine import SendResult
from postbox.storage_engine.formats import user_properties_problem

from .tracing import TRACEPARENT, TRACESTATE
from .tracing_metrics import (
    CONSUMER_GROUP,
    DESTINATION,
    ERROR_TYPE,
    MESSAGING_SYSTEM,
    OPERATION_NAME,
    OPERATION_TYPE,
    PARTITION,
    SYSTEM,
    MessagingMetrics,
    error_type,
    server_of,
)

if TYPE_CHECKING:
    from .middleware import ConsumeContext
    from .transactions import TransactionResult

log = logging.getLogger(__name__)

PublishedMessage = tuple[dict[str, str], str, "str | None"]
"""One message of a batch publish: its properties, message id and tags."""

INSTRUMENTATION_NAME = "postbox"
SEND = "send"
PROCESS = "process"
"""The operation names (``messaging.operation.name``, also the first word of span names) and
types (``messaging.operation.type``): the same words for RocketMQ."""

# attribute names (semantic conventions; Postbox's own under postbox.*); the ones the metrics
# share are in framework.tracing_metrics
MESSAGE_ID = "messaging.message.id"
BODY_SIZE = "messaging.message.body.size"
BATCH_COUNT = "messaging.batch.message_count"
NAMESPACE = "messaging.rocketmq.namespace"
CONSUMPTION_MODEL = "messaging.rocketmq.consumption_model"
MESSAGE_TYPE = "messaging.rocketmq.message.type"
TAG = "messaging.rocketmq.message.tag"
DELAY_LEVEL = "messaging.rocketmq.message.delay_time_level"
QUEUE_OFFSET = "postbox.queue_offset"
LOG_POSITION = "postbox.log_position"
STORED_TOPIC = "postbox.stored_topic"
ATTEMPT = "postbox.attempt"
MESSAGE_IDS = "postbox.message_ids"
TRANSACTION_STATE = "postbox.transaction.state"
TRANSACTION_ENDED = "postbox.transaction.ended"
TRANSACTION = "transaction"


def _version() -> str:
    try:
        return importlib.metadata.version(INSTRUMENTATION_NAME)
    except importlib.metadata.PackageNotFoundError:  # running from a source tree
        return "0"


class SpanMaker:
    """Makes Postbox's PRODUCER and CONSUMER spans with one tracer and one propagator, and
    measures sends and handler calls with one meter (``MessagingMetrics``)."""

    def __init__(self, tracer_provider: Any = None, propagator: Any = None,
                 meter_provider: Any = None) -> None:
        # with no provider this is the global one (a proxy until the application sets it)
        self.tracer = trace.get_tracer(INSTRUMENTATION_NAME, _version(),
                                       tracer_provider=tracer_provider)
        self.metrics = MessagingMetrics(meter_provider, INSTRUMENTATION_NAME, _version())
        self._global_provider = tracer_provider is None
        self._propagator = propagator
        self.namespace = ""
        """The RocketMQ namespace of the client the spans describe ("": none)."""

    def in_namespace(self, namespace: str) -> SpanMaker:
        """This span maker for a client whose names live in ``namespace`` (the same tracer,
        propagator and instruments); itself when the namespace is the same."""
        if namespace == self.namespace:
            return self
        bound = copy.copy(self)
        bound.namespace = namespace
        return bound

    def untraced(self) -> bool:
        """Whether a span now would be pointless: the global provider is still the API's
        placeholder (no SDK configured) and no span is current, so there is nothing to
        record or carry (a send then costs no more than without tracing)."""
        return (self._global_provider
                and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
                and not trace.get_current_span().get_span_context().is_valid)

    # ---- propagation -------------------------------------------------------------------------

    def carries_context(self, properties: Mapping[str, str]) -> bool:
        """Whether ``properties`` hold any field the propagator reads (``traceparent``, ...)."""
        propagator = self._propagator or propagate.get_global_textmap()
        return not properties.keys().isdisjoint(propagator.fields)

    def inject(self, properties: dict[str, str], context: Context | None = None) -> None:
        """Write ``context`` (default: the current one) into ``properties`` (replacing a
        trace context there)."""
        carrier: dict[str, str] = {}
        if self._propagator is None:
            propagate.inject(carrier, context=context)
        else:
            self._propagator.inject(carrier, context=context)
        if TRACEPARENT in carrier:
            properties.pop(TRACESTATE, None)  # the old one belonged to the old traceparent
        merge_carrier(properties, carrier)

    def extract(self, properties: Mapping[str, str]) -> Context:
        """The context carried by a message's properties (empty when none)."""
        if self._propagator is None:
            return propagate.extract(properties)
        context: Context = self._propagator.extract(properties)
        return context

    # ---- PRODUCER ----------------------------------------------------------------------------

    def publish(self, topic: str, properties: dict[str, str],
                deliver: Callable[[dict[str, str]], SendResult], *, message_id: str,
                tags: str | None, remote: bool) -> SendResult:
        """Send inside a ``"send <topic>"`` PRODUCER span (``_publish``) and return the
        result; the call's duration goes to ``messaging.client.operation.duration``."""
        started_s = time.perf_counter()
        try:
            result = self._publish(topic, properties, deliver, message_id=message_id,
                                   tags=tags, remote=remote)
        except Exception as error:
            self.metrics.sent(topic, time.perf_counter() - started_s, error=error)
            raise
        self.metrics.sent(topic, time.perf_counter() - started_s, result=result, remote=remote)
        return result

    def _publish(self, topic: str, properties: dict[str, str],
                 deliver: Callable[[dict[str, str]], SendResult], *, message_id: str,
                 tags: str | None, remote: bool) -> SendResult:
        """Send inside a ``"send <topic>"`` PRODUCER span and return the result.

        The span's parent is the context in ``properties`` when they carry a valid
        ``traceparent`` (the outbox relay: the business transaction's span), else the current
        one; the span's own context is written into the properties ``deliver`` sends. A
        ``traceparent`` that does not parse is left as the caller set it.
        """
        if self.untraced() and not self.carries_context(properties):
            return deliver(properties)
        parent, keep_caller = self._parent(properties)
        span = self._start_publish(topic, parent, message_id, tags)
        if not (span.is_recording() or span.get_span_context().is_valid):
            return deliver(properties)  # no SDK and no trace to go on: nothing to record or carry
        with trace.use_span(span, end_on_exit=True):
            sent = dict(properties)
            if not keep_caller:
                self.inject(sent)
            try:
                result = deliver(sent)
            except Exception as error:  # use_span records it and sets the status
                span.set_attribute(ERROR_TYPE, error_type(error))
                raise
            if span.is_recording():
                span.set_attributes(sent_attributes(result, remote=remote))
        return result

    def publish_batch(self, topic: str, messages: list[PublishedMessage],
                      deliver: Callable[[list[dict[str, str]]], list[SendResult]], *,
                      remote: bool) -> list[SendResult]:
        """``_publish_batch``, its duration measured as one send operation."""
        started_s = time.perf_counter()
        try:
            results = self._publish_batch(topic, messages, deliver, remote=remote)
        except Exception as error:
            self.metrics.sent(topic, time.perf_counter() - started_s, error=error)
            raise
        self.metrics.sent(topic, time.perf_counter() - started_s,
                          result=results[0] if results else None, remote=remote)
        return results

    def _publish_batch(self, topic: str, messages: list[PublishedMessage],
                       deliver: Callable[[list[dict[str, str]]], list[SendResult]], *,
                       remote: bool) -> list[SendResult]:
        """``_publish`` for the messages of one batch call: one PRODUCER span per message (each
        the parent of its handlers' spans, as for a single send), none of them made current,
        all ended when ``deliver`` returns or raises (the error recorded on each)."""
        if self.untraced() and not any(self.carries_context(properties)
                                       for properties, _, _ in messages):
            return deliver([properties for properties, _, _ in messages])
        spans: list[Span] = []
        sent_properties: list[dict[str, str]] = []
        for properties, message_id, tags in messages:
            parent, keep_caller = self._parent(properties)
            span = self._start_publish(topic, parent, message_id, tags)
            sent = dict(properties)
            if not keep_caller and span.get_span_context().is_valid:
                self.inject(sent, trace.set_span_in_context(span))
            spans.append(span)
            sent_properties.append(sent)
        try:
            results = deliver(sent_properties)
        except BaseException as error:
            for span in spans:
                span.record_exception(error)
                span.set_attribute(ERROR_TYPE, error_type(error))
                span.set_status(trace.Status(trace.StatusCode.ERROR, str(error)))
                span.end()
            raise
        for span, result in zip(spans, results, strict=True):
            if span.is_recording():
                span.set_attributes(sent_attributes(result, remote=remote))
            span.end()
        return results

    def transaction(self, topic: str, properties: dict[str, str],
                    run: Callable[[dict[str, str]], TransactionResult], *, message_id: str,
                    tags: str | None, remote: bool) -> TransactionResult:
        """``run(properties)`` (the half's send, the local transaction and the end call) inside
        one ``"send <topic>"`` PRODUCER span of message type ``transaction``, made as
        ``_publish`` makes a send's; the outcome is ``postbox.transaction.state``
        (``commit``/``rollback``/``unknown``) and ``postbox.transaction.ended`` (whether the
        broker took the end). An exception (from ``execute``: the half is left to the check)
        is recorded on the span. The half carries the span's context, so the committed
        message's handlers are its children."""
        if self.untraced() and not self.carries_context(properties):
            return run(properties)
        parent, keep_caller = self._parent(properties)
        span = self._start_publish(topic, parent, message_id, tags)
        if not (span.is_recording() or span.get_span_context().is_valid):
            return run(properties)
        with trace.use_span(span, end_on_exit=True):
            sent = dict(properties)
            if not keep_caller:
                self.inject(sent)
            try:
                outcome = run(sent)
            except Exception as error:  # use_span records it and sets the status
                span.set_attribute(ERROR_TYPE, error_type(error))
                raise
            if span.is_recording():
                span.set_attributes(sent_attributes(outcome.send_result, remote=remote))
                span.set_attributes({MESSAGE_TYPE: TRANSACTION,
                                     TRANSACTION_STATE: outcome.state.name.lower(),
                                     TRANSACTION_ENDED: outcome.ended})
        return outcome

    def _parent(self, properties: Mapping[str, str]) -> tuple[Context | None, bool]:
        """A send span's parent: the context ``properties`` carry when it is valid (else
        None: the current one), and whether to keep the caller's ``traceparent`` as it is
        (it is there but does not parse)."""
        if TRACEPARENT not in properties:
            return None, False
        carried = self.extract(properties)
        if trace.get_current_span(carried).get_span_context().is_valid:
            return carried, False
        return None, True

    def _start_publish(self, topic: str, parent: Context | None, message_id: str,
                       tags: str | None) -> Span:
        attributes = {MESSAGING_SYSTEM: SYSTEM, OPERATION_NAME: SEND, OPERATION_TYPE: SEND,
                      DESTINATION: topic, MESSAGE_ID: message_id}
        if self.namespace:
            attributes[NAMESPACE] = self.namespace
        if tags:
            attributes[TAG] = tags
        return self.tracer.start_span(f"{SEND} {topic}", context=parent,
                                      kind=SpanKind.PRODUCER, attributes=attributes)

    # ---- CONSUMER ----------------------------------------------------------------------------

    @contextmanager
    def process(self, context: ConsumeContext) -> Iterator[Span]:
        """A current ``"process <topic>"`` CONSUMER span for one handler call: child of the
        message's send span; for a batch, a root (or child of the current span) linked
        to each message's context."""
        messages = context.messages
        if self.untraced() and not any(self.carries_context(m.properties) for m in messages):
            yield trace.INVALID_SPAN  # nothing to record or carry: a span that does nothing
            return
        parent: Context | None = None
        links: list[Link] = []
        if len(messages) == 1:
            carried = self.extract(messages[0].properties)
            if trace.get_current_span(carried).get_span_context().is_valid:
                parent = carried
        else:
            for message in messages:
                span_context = trace.get_current_span(
                    self.extract(message.properties)).get_span_context()
                if span_context.is_valid:
                    links.append(Link(span_context, {MESSAGE_ID: message.msg_id}))
        span = self.tracer.start_span(f"{PROCESS} {context.message.topic}", context=parent,
                                      kind=SpanKind.CONSUMER, links=links,
                                      attributes=process_attributes(context, self.namespace))
        if not (span.is_recording() or span.get_span_context().is_valid):
            yield span  # no SDK and no trace to go on: a span that records nothing
            return
        with trace.use_span(span, end_on_exit=True, record_exception=False,
                            set_status_on_exception=False):
            yield span


def sent_attributes(result: SendResult, *, remote: bool) -> dict[str, Any]:
    """What the broker said about a sent message, as span attributes."""
    attributes: dict[str, Any] = {MESSAGE_ID: result.msg_id, PARTITION: str(result.queue_id),
                                  LOG_POSITION: result.log_position}
    if result.delay_level > 0:
        attributes[MESSAGE_TYPE] = "delay"
        attributes[DELAY_LEVEL] = result.delay_level
        attributes[STORED_TOPIC] = result.stored_topic
    else:
        attributes[MESSAGE_TYPE] = "normal"
        attributes[QUEUE_OFFSET] = result.queue_offset
    if remote:
        attributes.update(server_of(result))
    return attributes


def process_attributes(context: ConsumeContext, namespace: str = "") -> dict[str, Any]:
    """The CONSUMER span's attributes for a handler call (``namespace``: the client's)."""
    first = context.message
    model = "broadcasting" if context.handler.broadcast else "clustering"
    attributes: dict[str, Any] = {
        MESSAGING_SYSTEM: SYSTEM, OPERATION_NAME: PROCESS, OPERATION_TYPE: PROCESS,
        DESTINATION: first.topic, CONSUMER_GROUP: context.consumer_group,
        CONSUMPTION_MODEL: model, PARTITION: str(first.queue_id),
        QUEUE_OFFSET: first.queue_offset, ATTEMPT: first.reconsume_count + 1}
    if namespace:
        attributes[NAMESPACE] = namespace
    if first.stored_topic != first.topic:
        attributes[STORED_TOPIC] = first.stored_topic
    if len(context.messages) == 1:
        attributes[MESSAGE_ID] = first.msg_id
        attributes[BODY_SIZE] = len(first.body)
        if first.tags:
            attributes[TAG] = first.tags
    else:
        attributes[BATCH_COUNT] = len(context.messages)
        attributes[MESSAGE_IDS] = [message.msg_id for message in context.messages]
    return attributes


def merge_carrier(properties: dict[str, str], carrier: Mapping[str, str]) -> None:
    """Copy the propagator's entries into ``properties``: the trace context replaces what was
    there, other entries (baggage) only fill gaps; an entry that is no legal user property is
    dropped (and logged), so the message stays storable."""
    for name, value in carrier.items():
        if user_properties_problem({name: value}) is not None:
            log.debug("[tracing] propagator entry %r is no legal message property; not sent",
                      name)
            continue
        if name in (TRACEPARENT, TRACESTATE) or name not in properties:
            properties[name] = value


def inject_current(properties: Mapping[str, str] | None) -> Mapping[str, str] | None:
    """``properties`` plus the current context (global propagator); the same object when the
    propagator writes nothing (no span is current)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    if not carrier:
        return properties
    merged = dict(properties or {})
    merge_carrier(merged, carrier)
    return merged


__all__ = ["SpanMaker", "inject_current", "merge_carrier", "process_attributes",
           "sent_attributes"]
