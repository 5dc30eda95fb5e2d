"""OpenTelemetry traces through messages, when ``opentelemetry-api`` is installed.

One trace shows a business transaction → the send of its message → each handler attempt:
``Producer.send`` (and so the outbox relay) wraps the broker hop in a PRODUCER span
``"send <topic>"`` and writes that span's W3C trace context into the message's user
properties (``traceparent``, ``tracestate``, through the global propagator); the consumer's
``TracingMiddleware`` starts a CONSUMER span ``"process <topic>"`` whose parent is the context
read back from those properties, and makes it current while the handler runs. ``outbox.send``
stores the caller's current context in the stub's properties, so the relay's send span,
made later in another thread or process, is a child of the business transaction's span. A
retried message keeps its properties, so every attempt is a child of the same send span. The
same ``Tracing`` measures sends (``messaging.client.operation.duration``) and handler calls
(``messaging.process.duration``) through OpenTelemetry's metrics API. Span names, attributes,
events and metrics: ``docs/observability.md``.

This module imports nothing of OpenTelemetry: ``framework.tracing_otel`` (which does) is
imported only when a ``Tracing`` is made or a context is injected, and only when the package is
installed (``opentelemetry_installed``). Without it, nothing is imported, no span is made and no
property is added. ``Tracing`` is immutable and thread-safe (the tracer and propagator are).
"""

from __future__ import annotations

import copy
import functools
import importlib.util
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from postbox.storage_engine import SendResult

from .errors import ConfigurationError

if TYPE_CHECKING:
    from .middleware import Middleware
    from .transactions import TransactionResult

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
"""The W3C trace-context names, used as message user properties (RocketMQ reserves neither)."""

OTEL_PACKAGE = "opentelemetry"
INSTALL_HINT = "pip install 'postbox[otel]' (the otel extra: opentelemetry-api)"


@functools.cache
def opentelemetry_installed() -> bool:
    """Whether ``opentelemetry`` can be imported (found without importing it). Asked once per
    process: ``outbox.send`` asks on every call, and a search of ``sys.path`` for a package
    that is absent costs about 80 µs."""
    try:
        return importlib.util.find_spec(OTEL_PACKAGE) is not None
    except (ImportError, ValueError):  # blocked (sys.modules entry None) or a broken install
        return False


class Tracing:
    """The spans and messaging metrics one app makes: a tracer from ``tracer_provider``
    (default: the global one, read when each span starts), the propagator that writes and reads
    message properties (default: the global one, W3C trace context and baggage unless
    configured otherwise) and the histograms from ``meter_provider`` (default: the global one).

    Raises:
        ConfigurationError: ``opentelemetry`` is not installed.
    """

    def __init__(self, tracer_provider: Any = None, *, propagator: Any = None,
                 meter_provider: Any = None) -> None:
        if not opentelemetry_installed():
            raise ConfigurationError(f"tracing needs OpenTelemetry: {INSTALL_HINT}")
        from .tracing_otel import SpanMaker

        self.spans = SpanMaker(tracer_provider, propagator, meter_provider)

    def for_client(self, client: object) -> Tracing:
        """This tracing for the spans of ``client``'s sends and consumers: they carry its
        RocketMQ namespace (``messaging.rocketmq.namespace``) when it has one (a
        ``rocketmq://…?namespace=NS`` client); the same object otherwise."""
        namespace = getattr(client, "namespace", "")
        if not isinstance(namespace, str) or namespace == self.spans.namespace:
            return self
        bound = copy.copy(self)
        bound.spans = self.spans.in_namespace(namespace)
        return bound

    def publish(self, topic: str, properties: dict[str, str],
                deliver: Callable[[dict[str, str]], SendResult], *, message_id: str,
                tags: str | None, remote: bool) -> SendResult:
        """Run ``deliver(properties)`` inside a PRODUCER span, its context added to the
        properties (see ``SpanMaker.publish``)."""
        return self.spans.publish(topic, properties, deliver, message_id=message_id, tags=tags,
                                  remote=remote)

    def publish_batch(self, topic: str, messages: list[tuple[dict[str, str], str, str | None]],
                      deliver: Callable[[list[dict[str, str]]], list[SendResult]], *,
                      remote: bool) -> list[SendResult]:
        """Run ``deliver`` (one call for the batch) with a PRODUCER span per message, each
        message's properties carrying its span's context (see ``SpanMaker.publish_batch``);
        ``messages`` are (properties, message id, tags)."""
        return self.spans.publish_batch(topic, messages, deliver, remote=remote)

    def transaction(self, topic: str, properties: dict[str, str],
                    run: Callable[[dict[str, str]], TransactionResult], *, message_id: str,
                    tags: str | None, remote: bool) -> TransactionResult:
        """Run ``run(properties)`` (``send_in_transaction``'s half send, local transaction and
        end) inside one PRODUCER span whose context the half carries (see
        ``SpanMaker.transaction``)."""
        return self.spans.transaction(topic, properties, run, message_id=message_id, tags=tags,
                                      remote=remote)

    def middleware(self) -> Middleware:
        """A ``TracingMiddleware`` making this tracing's CONSUMER spans."""
        from .tracing_middleware import TracingMiddleware

        return TracingMiddleware(self)


TracingSetting = Tracing | bool
"""``App(tracing=...)``: ``True`` (default) traces when OpenTelemetry is installed, ``False``
never, a ``Tracing`` with its own provider or propagator."""


def resolve_tracing(setting: TracingSetting) -> Tracing | None:
    """The ``Tracing`` an app uses for ``setting``, or None (off, or not installed)."""
    if isinstance(setting, Tracing):
        return setting
    if setting is True:
        return Tracing() if opentelemetry_installed() else None
    if setting is False:
        return None
    raise ConfigurationError(f"tracing= takes True, False or a framework.tracing.Tracing, got "
                             f"{setting!r}")


def traced_chain(middleware: list[Middleware], tracing: Tracing | None,
                 client: object = None) -> list[Middleware]:
    """The middleware a consumer of ``client`` runs: ``tracing``'s middleware first (outermost,
    so its span covers the others), then ``middleware`` — unless the app has no tracing or the
    application added a ``TracingMiddleware`` itself. ``middleware`` is not changed."""
    if tracing is None:
        return list(middleware)
    from .tracing_middleware import TracingMiddleware

    if any(isinstance(layer, TracingMiddleware) for layer in middleware):
        return list(middleware)
    return [tracing.for_client(client).middleware(), *middleware]


def inject_current_context(properties: Mapping[str, str] | None) -> Mapping[str, str] | None:
    """``properties`` plus the current trace context (global propagator), for a message sent
    later (``outbox.send``); unchanged when OpenTelemetry is not installed, no span is current,
    or the caller set ``traceparent`` itself."""
    if properties is not None and TRACEPARENT in properties:
        return properties
    if not opentelemetry_installed():
        return properties
    from .tracing_otel import inject_current

    return inject_current(properties)


__all__ = ["TRACEPARENT", "TRACESTATE", "Tracing", "TracingSetting", "inject_current_context",
           "opentelemetry_installed", "resolve_tracing", "traced_chain"]
