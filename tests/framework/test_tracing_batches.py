"""OpenTelemetry through ``Producer.send_batch``: one PRODUCER span per message, each the parent
of its handler's span, as if it had been sent alone; a failed batch marks every span."""

from __future__ import annotations

import threading

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from postbox.framework import App, BatchMessage, ConsumerOptions
from postbox.framework.tracing import TRACEPARENT
from postbox.storage_engine import StoreClosedError
from tests.support.tracing import parent_id, spans, traceparent_of  # noqa: F401  (fixture)

FAST = ConsumerOptions(long_polling_ms=100, rebalance_interval_ms=100, persist_interval_ms=100)
UPSTREAM = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_each_message_of_a_batch_has_its_own_publish_span(open_broker, client,
                                                          spans):  # noqa: F811
    app = App(broker=client(open_broker()), consumer_options=FAST, tracing=spans.tracing)
    carried: dict[str, str | None] = {}
    done = threading.Event()

    @app.handler(topic="orders", consumer_group="billing", consume_from="first")
    def bill(message):
        carried[message.msg_id] = message.properties.get(TRACEPARENT)
        if len(carried) == 3:
            done.set()

    with spans.tracer.start_as_current_span("checkout") as checkout:
        results = app.producer.send_batch("orders", [
            BatchMessage(b"a", tags="paid"), b"b",
            BatchMessage(b"c", properties={TRACEPARENT: UPSTREAM})])
    app.start()
    assert done.wait(30)
    processes = spans.wait_for("process orders", 3)
    app.stop()

    publishes = {span.attributes["messaging.message.id"]: span
                 for span in spans.named("send orders")}
    assert list(publishes) == [result.msg_id for result in results]
    first, second, third = (publishes[result.msg_id] for result in results)
    assert {span.kind for span in publishes.values()} == {SpanKind.PRODUCER}
    # the current span is the parent, unless the message carries a context of its own
    assert parent_id(first) == parent_id(second) == checkout.get_span_context().span_id
    assert f"{third.context.trace_id:032x}" == UPSTREAM.split("-")[1]
    assert parent_id(third) == int(UPSTREAM.split("-")[2], 16)
    assert first.attributes["messaging.rocketmq.message.tag"] == "paid"
    for result in results:
        publish = publishes[result.msg_id]
        assert publish.attributes["postbox.queue_offset"] == result.queue_offset
        assert publish.attributes["messaging.destination.partition.id"] == str(result.queue_id)
        assert carried[result.msg_id] == traceparent_of(publish)
    for process in processes:
        publish = publishes[process.attributes["messaging.message.id"]]
        assert parent_id(process) == publish.context.span_id


def test_a_failed_batch_ends_every_span_with_its_error(open_broker, client,
                                                       spans):  # noqa: F811
    broker = client(open_broker())
    app = App(broker=broker, tracing=spans.tracing)
    broker.close()
    with spans.tracer.start_as_current_span("checkout"), pytest.raises(StoreClosedError):
        app.producer.send_batch("orders", [b"a", b"b"])

    failed = spans.named("send orders")
    assert len(failed) == 2
    for span in failed:
        assert span.status.status_code is StatusCode.ERROR
        assert [event.name for event in span.events] == ["exception"]
