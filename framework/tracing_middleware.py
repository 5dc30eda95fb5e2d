"""``TracingMiddleware``: a CONSUMER span around every handler call, with its outcome, and the
call's duration in the ``messaging.process.duration`` histogram (``error.type`` when it failed).

When the app traces (``App(tracing=...)``, ``framework.tracing``), ``App.start()`` gives its
consumers this middleware first, outside the app's own (``app.middleware`` stays as the
application made it), so the span covers the other middleware (the idempotency checks) too.
The span (``SpanMaker.process``) is current in the consume thread while the handler runs: spans
the handler starts, and messages it sends, are its children. Its outcome:

* success — status unset; ``postbox.skipped = true`` when a middleware skipped the handler
  (an idempotent duplicate);
* failure — status ERROR with the reason, ``error.type``, the exception recorded (not for the
  ``RetryLater`` / ``DeadLetter`` signals), and per message the event of what happens next,
  by the rule the consumer and broker apply: ``"retry"`` (delay level and reason; orderly
  groups retry in place), ``"dead_letter"`` (``DeadLetter``, or the retries are exhausted:
  the reconsume count reached ``reconsume_count_max``), or ``"dropped"`` (broadcast groups).

Imports OpenTelemetry (through ``framework.tracing_otel``): built only by
``framework.tracing.Tracing.middleware``. Thread-safe: it keeps no state per message.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from opentelemetry.trace import Span, Status, StatusCode

from .middleware import ConsumeContext, Middleware, NextCall
from .outcomes import ConsumeOutcome, DeadLetter, OutcomeKind, RetryLater, SkipMessage
from .tracing_metrics import ERROR_TYPE, error_type
from .tracing_otel import MESSAGE_ID

if TYPE_CHECKING:
    from .consumed_message import ConsumedMessage
    from .tracing import Tracing

RETRY_BASE_DELAY_LEVEL = 3
"""The broker's rule for a retry without a level of its own: level 3 + reconsume count."""
SKIPPED = "postbox.skipped"
REASON = "postbox.reason"
RETRY_DELAY_LEVEL = "postbox.retry.delay_level"
RETRY_IN_PLACE = "postbox.retry.in_place"


class TracingMiddleware(Middleware):
    """Makes the ``"process <topic>"`` span of each handler call (see the module docstring)."""

    def __init__(self, tracing: Tracing) -> None:
        self.tracing = tracing

    def around_consume(self, context: ConsumeContext, call_next: NextCall) -> ConsumeOutcome:
        """Run the rest of the chain inside the call's span, record how it ended and how long
        it took."""
        spans = self.tracing.spans
        started_s = time.perf_counter()
        with spans.process(context) as span:
            try:
                outcome = call_next()
            except SkipMessage:
                span.set_attribute(SKIPPED, True)
                spans.metrics.processed(context, time.perf_counter() - started_s)
                raise
            except Exception as error:  # a middleware failed: the message is retried
                record_failure(span, context, ConsumeOutcome(
                    OutcomeKind.RETRY, error, reason=f"middleware: {error}"))
                spans.metrics.processed(context, time.perf_counter() - started_s,
                                        failure=error_type(error))
                raise
            if outcome.succeeded:
                if context.skipped:
                    span.set_attribute(SKIPPED, True)
            else:
                record_failure(span, context, outcome)
        spans.metrics.processed(context, time.perf_counter() - started_s,
                                failure=None if outcome.succeeded else failure_type(outcome))
        return outcome


def record_failure(span: Span, context: ConsumeContext, outcome: ConsumeOutcome) -> None:
    """Status, exception and next-step events of a failed handler call."""
    error = outcome.error
    if error is not None and not isinstance(error, RetryLater | DeadLetter):
        span.record_exception(error)
    span.set_attribute(ERROR_TYPE, failure_type(outcome))
    span.set_status(Status(StatusCode.ERROR, outcome.reason or outcome.kind.value))
    for message in context.messages:
        name, attributes = next_step(context, message, outcome)
        span.add_event(name, {MESSAGE_ID: message.msg_id, **attributes})


def failure_type(outcome: ConsumeOutcome) -> str:
    """The ``error.type`` of a failed call: the exception's class, else the outcome's kind."""
    return error_type(outcome.error) if outcome.error is not None else outcome.kind.value


def next_step(context: ConsumeContext, message: ConsumedMessage,
              outcome: ConsumeOutcome) -> tuple[str, dict[str, str | int | bool]]:
    """The event name and attributes of what the consumer does with a failed message."""
    spec = context.handler
    reason = outcome.reason or outcome.kind.value
    if spec.broadcast:
        return "dropped", {REASON: reason}
    if outcome.kind is OutcomeKind.DEAD_LETTER:
        return "dead_letter", {REASON: reason}
    limit = spec.reconsume_count_max
    if limit is not None and message.reconsume_count >= limit:
        return "dead_letter", {
            REASON: f"retries exhausted after {message.reconsume_count + 1} attempts: {reason}"}
    if spec.orderly:
        return "retry", {REASON: reason, RETRY_IN_PLACE: True}
    level = outcome.delay_level or RETRY_BASE_DELAY_LEVEL + message.reconsume_count
    return "retry", {REASON: reason, RETRY_DELAY_LEVEL: level}


__all__ = ["TracingMiddleware", "failure_type", "next_step", "record_failure"]
