"""OpenTelemetry through ``Producer.send_in_transaction``: one PRODUCER span covers the half's
send, the local transaction and the end call, with the outcome as attributes; the committed
message's handler span is its child; an ``execute`` that raises marks the span."""

from __future__ import annotations

import threading

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from postbox.framework import App, ConsumerOptions, TransactionState
from postbox.framework.tracing import TRACEPARENT
from tests.support.tracing import parent_id, spans, traceparent_of  # noqa: F401  (fixture)

FAST = ConsumerOptions(long_polling_ms=100, rebalance_interval_ms=100, persist_interval_ms=100)


def test_one_span_covers_half_execute_and_end(open_broker, client, spans):  # noqa: F811
    app = App(broker=client(open_broker()), consumer_options=FAST, tracing=spans.tracing)
    carried: list[str | None] = []
    handled = threading.Event()

    @app.handler(topic="payments", consumer_group="ledger", consume_from="first")
    def book(message):
        carried.append(message.properties.get(TRACEPARENT))
        handled.set()

    inside: list[object] = []

    def execute(half):
        inside.append(trace.get_current_span().get_span_context())
        with spans.tracer.start_as_current_span("debit"):
            pass
        return True

    with spans.tracer.start_as_current_span("checkout") as checkout:
        committed = app.producer.send_in_transaction(
            "payments", b"paid", execute=execute, check=lambda message: None, tags="card")
        rolled = app.producer.send_in_transaction(
            "payments", b"declined", execute=lambda half: False, check=lambda message: None)
        pending = app.producer.send_in_transaction(
            "payments", b"later", execute=lambda half: TransactionState.UNKNOWN,
            check=lambda message: False)
    app.start()
    assert handled.wait(30)
    [process] = spans.wait_for("process payments")
    app.stop()

    first, second, third = spans.named("send payments")
    [debit] = spans.named("debit")
    assert {span.kind for span in (first, second, third)} == {SpanKind.PRODUCER}
    assert {parent_id(span) for span in (first, second, third)} == \
        {checkout.get_span_context().span_id}
    assert inside == [first.context]  # execute ran inside the span
    assert parent_id(debit) == first.context.span_id
    assert first.start_time <= debit.start_time and debit.end_time <= first.end_time
    assert carried == [traceparent_of(first)]  # the committed message carries the span
    assert parent_id(process) == first.context.span_id
    expected = {"messaging.system": "rocketmq", "messaging.operation.name": "send",
                "messaging.operation.type": "send", "messaging.destination.name": "payments",
                "messaging.rocketmq.message.type": "transaction"}
    for span, result, state in ((first, committed, "commit"), (second, rolled, "rollback"),
                                (third, pending, "unknown")):
        attributes = dict(span.attributes)
        assert {name: attributes[name] for name in expected} == expected
        assert attributes["messaging.message.id"] == result.send_result.msg_id
        assert attributes["postbox.transaction.state"] == state
        assert attributes["postbox.transaction.ended"] is True
        assert span.status.status_code is StatusCode.UNSET
    assert first.attributes["messaging.rocketmq.message.tag"] == "card"


def test_an_execute_that_raises_marks_the_span(open_broker, client, spans):  # noqa: F811
    def execute(half):
        raise ConnectionError("ledger down")

    with App(broker=client(open_broker()), tracing=spans.tracing) as app, \
            pytest.raises(ConnectionError):
        app.producer.send_in_transaction("payments", b"paid", execute=execute,
                                         check=lambda message: None)
    [span] = spans.named("send payments")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "ConnectionError"
    assert [event.name for event in span.events] == ["exception"]
    assert "postbox.transaction.state" not in span.attributes


def test_no_span_without_tracing(open_broker, client, spans):  # noqa: F811
    with App(broker=client(open_broker()), tracing=False) as app, \
            spans.tracer.start_as_current_span("checkout"):
        result = app.producer.send_in_transaction(
            "payments", b"paid", execute=lambda half: True, check=lambda message: None)
    assert result.state is TransactionState.COMMIT
    assert [span.name for span in spans.finished()] == ["checkout"]
