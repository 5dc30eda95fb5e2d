"""OpenTelemetry traces through messages: producer.send → broker → handler, retries and DLQ."""

from __future__ import annotations

import threading

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from postbox.framework import App, ConsumerOptions, DeadLetter, Middleware, RetryLater
from postbox.framework.tracing import TRACEPARENT
from postbox.framework.tracing_middleware import TracingMiddleware
from postbox.storage_engine import Broker
from tests.support.polling import wait_until
from tests.support.tracing import parent_id, spans, traceparent_of  # noqa: F401  (fixture)

FAST = ConsumerOptions(long_polling_ms=100, rebalance_interval_ms=100, persist_interval_ms=100)


def test_send_and_handle_make_one_trace(open_broker, client, spans):  # noqa: F811
    broker = open_broker()
    app = App(broker=client(broker), consumer_options=FAST, tracing=spans.tracing)
    seen: dict[str, object] = {}
    handled = threading.Event()

    @app.handler(topic="orders", consumer_group="billing")
    def bill(message):
        seen["traceparent"] = message.properties.get(TRACEPARENT)
        seen["current"] = trace.get_current_span().get_span_context()
        with spans.tracer.start_as_current_span("charge"):
            pass
        handled.set()

    app.start()
    with spans.tracer.start_as_current_span("checkout") as checkout:
        sent = app.producer.send("orders", b"order-1", tags="paid")
    assert handled.wait(30)
    app.stop()

    [publish] = spans.named("send orders")
    [process] = spans.named("process orders")
    [charge] = spans.named("charge")
    assert publish.kind is SpanKind.PRODUCER and process.kind is SpanKind.CONSUMER
    trace_id = checkout.get_span_context().trace_id
    assert {span.context.trace_id for span in (publish, process, charge)} == {trace_id}
    assert parent_id(publish) == checkout.get_span_context().span_id
    assert parent_id(process) == publish.context.span_id
    assert parent_id(charge) == process.context.span_id
    assert seen["traceparent"] == traceparent_of(publish)
    assert seen["current"] == process.context  # current while the handler ran
    attributes = dict(publish.attributes)
    address, port = attributes.pop("server.address", None), attributes.pop("server.port", None)
    namespace = getattr(app.client, "namespace", "")  # a remote run's clients have their own
    in_namespace = {"messaging.rocketmq.namespace": namespace} if namespace else {}
    assert attributes == {
        "messaging.system": "rocketmq", "messaging.operation.name": "send",
        "messaging.operation.type": "send", "messaging.destination.name": "orders",
        "messaging.message.id": sent.msg_id, "messaging.rocketmq.message.tag": "paid",
        "messaging.rocketmq.message.type": "normal",
        "messaging.destination.partition.id": str(sent.queue_id),
        "postbox.queue_offset": sent.queue_offset, "postbox.log_position": sent.log_position,
        **in_namespace}
    if isinstance(app.client, Broker):
        assert address is None and port is None  # an embedded store has no server
    else:  # the broker that stored it (from its offsetMsgId)
        assert isinstance(address, str) and isinstance(port, int) and port > 0
    assert dict(process.attributes) == {
        "messaging.system": "rocketmq", "messaging.operation.name": "process",
        "messaging.operation.type": "process", "messaging.destination.name": "orders",
        "messaging.consumer.group.name": "billing",
        "messaging.rocketmq.consumption_model": "clustering",
        "messaging.destination.partition.id": str(sent.queue_id),
        "postbox.queue_offset": sent.queue_offset, "postbox.attempt": 1,
        "messaging.message.id": sent.msg_id, "messaging.message.body.size": 7,
        "messaging.rocketmq.message.tag": "paid", **in_namespace}
    assert process.status.status_code is StatusCode.UNSET and not process.events


def test_every_attempt_is_a_child_of_the_one_publish_span(open_broker, client,
                                                          spans):  # noqa: F811
    broker = open_broker()
    app = App(broker=client(broker), consumer_options=FAST, tracing=spans.tracing)
    attempts: list[str | None] = []

    @app.handler(topic="jobs", consumer_group="workers", reconsume_count_max=1)
    def flaky(message):
        attempts.append(message.properties.get(TRACEPARENT))
        if message.reconsume_count == 0:
            raise RetryLater(delay_level=1, reason="provider busy")
        raise RuntimeError("provider down")

    app.start()
    sent = app.producer.send("jobs", b"job-1")
    first, second = spans.wait_for("process jobs", 2)
    app.stop()

    [publish] = spans.named("send jobs")
    assert attempts == [traceparent_of(publish)] * 2  # the retry copy kept the property
    assert parent_id(first) == parent_id(second) == publish.context.span_id
    assert [first.attributes["postbox.attempt"], second.attributes["postbox.attempt"]] == [1, 2]
    assert second.attributes["postbox.stored_topic"] == "%RETRY%workers"
    assert [(event.name, dict(event.attributes)) for event in first.events] == [
        ("retry", {"messaging.message.id": sent.msg_id, "postbox.reason": "provider busy",
                   "postbox.retry.delay_level": 1})]
    assert first.status.status_code is StatusCode.ERROR
    assert first.attributes["error.type"] == "RetryLater"
    exception, dead = second.events  # the failure recorded, then what follows
    assert exception.name == "exception"
    assert exception.attributes["exception.type"] == "RuntimeError"
    assert (dead.name, dead.attributes["postbox.reason"]) == (
        "dead_letter", "retries exhausted after 2 attempts: RuntimeError: provider down")
    assert second.status.status_code is StatusCode.ERROR
    assert second.status.description == "RuntimeError: provider down"


def test_dead_letter_request_is_an_event_without_exception(open_broker, client,
                                                           spans):  # noqa: F811
    broker = open_broker()
    app = App(broker=client(broker), consumer_options=FAST, tracing=spans.tracing)

    @app.handler(topic="jobs", consumer_group="workers")
    def poison(message):
        raise DeadLetter("cannot parse")

    app.start()
    app.producer.send("jobs", b"{")
    [process] = spans.wait_for("process jobs")
    app.stop()

    assert [event.name for event in process.events] == ["dead_letter"]
    assert process.events[0].attributes["postbox.reason"] == "cannot parse"
    assert process.status.status_code is StatusCode.ERROR
    assert process.attributes["error.type"] == "DeadLetter"


def test_batch_span_links_each_message(open_broker, client, spans):  # noqa: F811
    broker = open_broker()
    app = App(broker=client(broker), consumer_options=FAST, tracing=spans.tracing)
    batches: list[int] = []

    @app.handler(topic="events", consumer_group="batcher", batch_size=3, consume_from="first")
    def handle(messages):
        batches.append(len(messages))

    for index in range(3):  # each under its own request span, all in one queue
        with spans.tracer.start_as_current_span(f"request-{index}"):
            app.producer.send("events", f"e{index}", sharding_key="one-queue")
    read_back(app, "events", "e0", "e1", "e2")  # all three consumable: the first pull has them
    app.start()
    [process] = spans.wait_for("process events")
    app.stop()

    assert batches == [3]
    publishes = spans.named("send events")
    assert process.parent is None  # a batch has three parents: it links them instead
    assert [link.context.span_id for link in process.links] == [
        span.context.span_id for span in publishes]
    assert process.attributes["messaging.batch.message_count"] == 3
    assert len(process.attributes["postbox.message_ids"]) == 3


def test_caller_traceparent_is_the_parent_and_a_bad_one_is_left_alone(open_broker, client,
                                                                     spans):  # noqa: F811
    app = App(broker=client(open_broker()), tracing=spans.tracing)
    upstream = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    app.producer.send("orders", b"a", properties={TRACEPARENT: upstream})
    app.producer.send("orders", b"b", properties={TRACEPARENT: "not-a-traceparent"})

    child, unrelated = spans.named("send orders")
    assert f"{child.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
    assert parent_id(child) == 0xb7ad6b7169203331
    assert unrelated.parent is None
    stored = read_back(app, "orders", "a", "b")
    assert stored["a"][TRACEPARENT] == traceparent_of(child)  # the trace goes on through it
    assert stored["b"][TRACEPARENT] == "not-a-traceparent"
    app.stop()


def test_tracing_off_adds_no_span_and_no_property(open_broker, client, spans):  # noqa: F811
    app = App(broker=client(open_broker()), tracing=False)
    received = threading.Event()

    @app.handler(topic="orders", consumer_group="billing", consume_from="first")
    def handle(message):
        received.set()

    with spans.tracer.start_as_current_span("checkout"):
        app.producer.send("orders", b"a")
    app.start()
    assert received.wait(30)
    chain = app.consumer("billing")._middleware
    app.stop()
    assert chain == []  # no tracing middleware
    assert [span.name for span in spans.finished()] == ["checkout"]
    assert TRACEPARENT not in read_back(app, "orders", "a")["a"]


def test_tracing_runs_outside_the_apps_own_middleware(open_broker, client,
                                                      spans):  # noqa: F811
    app = App(broker=client(open_broker()), tracing=spans.tracing)
    own = Middleware()
    app.add_middleware(own)
    app.handler(topic="orders", consumer_group="billing")(lambda message: None)
    app.start(threads=False)
    chain = app.consumers[0]._middleware
    app.stop()
    assert app.middleware == [own]  # the application's list is left as it made it
    assert isinstance(chain[0], TracingMiddleware) and chain[1:] == [own]
    added = App(broker=client(open_broker("second")), tracing=spans.tracing)
    mine = TracingMiddleware(spans.tracing)
    added.add_middleware(mine)
    added.handler(topic="orders", consumer_group="billing")(lambda message: None)
    added.start(threads=False)
    assert added.consumers[0]._middleware == [mine]  # not a second one
    added.stop()


def test_tracing_setting_is_checked(tmp_path):
    with pytest.raises(Exception, match="tracing= takes True, False or"):
        App(store_url=str(tmp_path / "s"), tracing="yes")  # type: ignore[arg-type]


def read_back(app: App, topic: str, *bodies: str) -> dict[str, dict[str, str]]:
    """Body text → properties of the stored messages of ``topic`` (pulled by a reader), once
    all ``bodies`` are there."""
    client = app.client
    found: dict[str, dict[str, str]] = {}

    def pull_all() -> bool:
        for queue_id in client.queue_ids(topic):
            for view in client.pull("trace-reader", topic, queue_id, 0, 32).messages:
                found[bytes(view.body).decode()] = view.properties
        return set(bodies) <= set(found)

    wait_until(pull_all, what=f"messages of {topic}")
    return found


def test_async_handler_runs_inside_the_process_span(open_broker, client, spans):  # noqa: F811
    app = App(broker=client(open_broker()), consumer_options=FAST, tracing=spans.tracing)
    current: list[object] = []
    handled = threading.Event()

    @app.handler(topic="orders", consumer_group="billing")
    async def bill(message):
        current.append(trace.get_current_span().get_span_context())
        await app.producer.send_async("receipts", b"receipt")  # a send from the handler
        handled.set()

    app.start()
    app.producer.send("orders", b"order-1")
    assert handled.wait(30)
    app.stop()

    [process] = spans.named("process orders")
    [receipt] = spans.named("send receipts")
    assert current == [process.context]  # the worker thread's span, inside the coroutine
    assert parent_id(receipt) == process.context.span_id


def test_without_an_sdk_a_carried_context_passes_through_unchanged(open_broker, client):
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # no SDK set
    app = App(broker=client(open_broker()), consumer_options=FAST)  # tracing=True: global
    upstream = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    handled = threading.Event()

    @app.handler(topic="orders", consumer_group="billing")
    def forward(message):
        app.producer.send("receipts", b"r")  # inside the (non-recording) process span
        handled.set()

    app.start()
    app.producer.send("orders", b"o", properties={TRACEPARENT: upstream})
    app.producer.send("plain", b"p")
    assert handled.wait(30)
    app.stop()
    assert read_back(app, "orders", "o")["o"][TRACEPARENT] == upstream
    assert read_back(app, "receipts", "r")["r"][TRACEPARENT] == upstream
    assert TRACEPARENT not in read_back(app, "plain", "p")["p"]


def test_orderly_retries_in_place_and_broadcast_drops(open_broker, client, spans):  # noqa: F811
    broker = open_broker()
    options = ConsumerOptions(long_polling_ms=100, rebalance_interval_ms=100,
                              persist_interval_ms=100, orderly_suspend_ms=20)
    app = App(broker=client(broker), consumer_options=options, tracing=spans.tracing)

    @app.handler(topic="ledger", consumer_group="books", orderly=True)
    def book(message):
        if message.reconsume_count == 0:
            raise RuntimeError("locked")

    @app.handler(topic="notices", consumer_group="screens", broadcast=True)
    def show(message):
        raise RuntimeError("screen off")

    app.start()
    app.producer.send("ledger", b"entry", sharding_key="account-1")
    app.producer.send("notices", b"notice")
    first, second = spans.wait_for("process ledger", 2)
    [notice] = spans.wait_for("process notices")
    app.stop()

    assert [event.name for event in first.events] == ["exception", "retry"]
    assert first.events[1].attributes["postbox.retry.in_place"] is True
    assert second.attributes["postbox.attempt"] == 2 and not second.events
    assert parent_id(first) == parent_id(second) == spans.named("send ledger")[0].context.span_id
    assert notice.attributes["messaging.rocketmq.consumption_model"] == "broadcasting"
    assert [event.name for event in notice.events] == ["exception", "dropped"]
