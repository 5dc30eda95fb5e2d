"""OpenTelemetry messaging metrics of an app's producer and consumers, beside its spans.

Two histograms in seconds, as OpenTelemetry's messaging semantic conventions name them:

* ``messaging.client.operation.duration`` — each send (one measurement per ``send`` call, one
  per ``send_batch`` call), including failed ones (``error.type`` set);
* ``messaging.process.duration`` — each handler call (middleware included), the conventions'
  metric for processing (the operation-duration metric is not meant for it).

Attributes follow the conventions' lists for these metrics (``messaging.system``,
``messaging.operation.name`` / ``.type``, ``messaging.destination.name``,
``messaging.destination.partition.id``, ``messaging.consumer.group.name``, ``server.address`` /
``server.port`` for a remote broker, ``error.type``); no message id or other per-message value,
so the number of series stays bounded by topics × queues × groups. Instruments come from the
meter provider given to ``Tracing`` (default: the global one, a no-op until the application
installs an SDK). Imported only when ``opentelemetry`` is installed (``framework.tracing_otel``
imports it); thread-safe, as the instruments are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opentelemetry import metrics

from postbox.storage_engine import SendResult
from postbox.storage_engine.formats import decode_offset_msg_id

if TYPE_CHECKING:
    from .middleware import ConsumeContext

OPERATION_DURATION = "messaging.client.operation.duration"
PROCESS_DURATION = "messaging.process.duration"
DURATION_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                      7.5, 10.0)
"""The bucket boundaries the conventions advise for both histograms."""

SYSTEM = "rocketmq"
MESSAGING_SYSTEM = "messaging.system"
OPERATION_NAME = "messaging.operation.name"
OPERATION_TYPE = "messaging.operation.type"
DESTINATION = "messaging.destination.name"
PARTITION = "messaging.destination.partition.id"
CONSUMER_GROUP = "messaging.consumer.group.name"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"


def server_of(result: SendResult) -> dict[str, Any]:
    """``server.address`` / ``server.port`` of the broker that stored a message (from its
    offsetMsgId); empty when the id does not decode (a broker's odd id costs the address)."""
    try:
        host, _ = decode_offset_msg_id(result.offset_msg_id)
    except ValueError:
        return {}
    return {SERVER_ADDRESS: host.ip, SERVER_PORT: host.port}


def error_type(error: BaseException) -> str:
    """The ``error.type`` of an exception: its class name (low cardinality)."""
    return type(error).__qualname__


class MessagingMetrics:
    """The two histograms of one ``Tracing``."""

    def __init__(self, meter_provider: Any, name: str, version: str) -> None:
        meter = metrics.get_meter(name, version, meter_provider=meter_provider)
        self.operation_duration = meter.create_histogram(
            OPERATION_DURATION, unit="s",
            description="Duration of messaging operation initiated by a producer or consumer "
                        "client.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S)
        self.process_duration = meter.create_histogram(
            PROCESS_DURATION, unit="s", description="Duration of processing operation.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S)

    def sent(self, topic: str, seconds: float, *, result: SendResult | None = None,
             error: BaseException | None = None, remote: bool = False) -> None:
        """Record one send call to ``topic``: its result (the first of a batch) or its
        error."""
        attributes: dict[str, Any] = {MESSAGING_SYSTEM: SYSTEM, OPERATION_NAME: "send",
                                      OPERATION_TYPE: "send", DESTINATION: topic}
        if result is not None:
            attributes[PARTITION] = str(result.queue_id)
            if remote:
                attributes.update(server_of(result))
        if error is not None:
            attributes[ERROR_TYPE] = error_type(error)
        self.operation_duration.record(seconds, attributes)

    def processed(self, context: ConsumeContext, seconds: float, *,
                  failure: str | None = None) -> None:
        """Record one handler call; ``failure`` is its ``error.type`` when it failed."""
        first = context.message
        attributes: dict[str, Any] = {
            MESSAGING_SYSTEM: SYSTEM, OPERATION_NAME: "process", OPERATION_TYPE: "process",
            DESTINATION: first.topic, CONSUMER_GROUP: context.consumer_group,
            PARTITION: str(first.queue_id)}
        if failure is not None:
            attributes[ERROR_TYPE] = failure
        self.process_duration.record(seconds, attributes)


__all__ = ["DURATION_BUCKETS_S", "OPERATION_DURATION", "PROCESS_DURATION", "MessagingMetrics",
           "error_type", "server_of"]
