"""OpenTelemetry messaging metrics beside the spans: ``messaging.client.operation.duration`` for
each send call and ``messaging.process.duration`` for each handler call, histograms in seconds
with the semantic conventions' attributes (and nothing per message)."""

from __future__ import annotations

import threading

import pytest

from postbox.framework import App, BatchMessage, ConsumerOptions, RetryLater
from postbox.storage_engine.errors import InvalidQueueError
from tests.support.tracing import spans  # noqa: F401  (fixture)

FAST = ConsumerOptions(long_polling_ms=100, rebalance_interval_ms=100, persist_interval_ms=100)
SEND = {"messaging.system": "rocketmq", "messaging.operation.name": "send",
        "messaging.operation.type": "send"}
PROCESS = {"messaging.system": "rocketmq", "messaging.operation.name": "process",
           "messaging.operation.type": "process"}
SERVER = ("server.address", "server.port")


def without_server(attributes) -> dict:
    """The attributes but the broker's address (present over a remote transport only)."""
    return {name: value for name, value in attributes.items() if name not in SERVER}


def test_each_send_call_is_measured_once(open_broker, client, spans):  # noqa: F811
    app = App(broker=client(open_broker()), tracing=spans.tracing)
    one = app.producer.send("orders", b"a", queue_id=0)
    two = app.producer.send("orders", b"b", queue_id=0)
    batch = app.producer.send_batch("orders", [b"c", BatchMessage(b"d", tags="x")], queue_id=1)
    with pytest.raises(InvalidQueueError, match="999"):
        app.producer.send("orders", b"e", queue_id=999)
    app.stop()

    points = {tuple(sorted(without_server(point.attributes).items())): point
              for point in spans.histogram("messaging.client.operation.duration")}
    queue_0 = {**SEND, "messaging.destination.name": "orders",
               "messaging.destination.partition.id": str(one.queue_id)}
    queue_1 = {**queue_0, "messaging.destination.partition.id": str(batch[0].queue_id)}
    failed = {**SEND, "messaging.destination.name": "orders",
              "error.type": "InvalidQueueError"}
    assert two.queue_id == one.queue_id == 0
    assert {key: point.count for key, point in points.items()} == {
        tuple(sorted(queue_0.items())): 2,   # two sends
        tuple(sorted(queue_1.items())): 1,   # one batch call, one operation
        tuple(sorted(failed.items())): 1}
    assert all(point.sum > 0 for point in points.values())
    refused_span = spans.named("send orders")[-1]
    assert refused_span.attributes["error.type"] == "InvalidQueueError"
    assert next(iter(points.values())).explicit_bounds[:3] == (0.005, 0.01, 0.025)


def test_each_handler_call_is_measured_with_its_group_and_outcome(open_broker, client,
                                                                    spans):  # noqa: F811
    app = App(broker=client(open_broker()), consumer_options=FAST, tracing=spans.tracing)
    done = threading.Event()
    calls: list[int] = []
    queues: list[int] = []  # the queue each call's message reports (a retry's may differ)

    @app.handler(topic="orders", consumer_group="billing", consume_from="first")
    def bill(message):
        calls.append(message.reconsume_count)
        queues.append(message.queue_id)
        if message.reconsume_count == 0:
            raise RetryLater(delay_level=1, reason="provider busy")
        done.set()

    sent = app.producer.send("orders", b"order-1")
    app.start()
    assert done.wait(30)
    app.stop()

    points = [(without_server(point.attributes), point.count)
              for point in spans.histogram("messaging.process.duration")]
    handled = {**PROCESS, "messaging.destination.name": "orders",
               "messaging.consumer.group.name": "billing"}
    assert calls == [0, 1]
    assert queues[0] == sent.queue_id
    assert sorted(points, key=lambda item: "error.type" in item[0]) == [
        ({**handled, "messaging.destination.partition.id": str(queues[1])}, 1),
        ({**handled, "messaging.destination.partition.id": str(queues[0]),
          "error.type": "RetryLater"}, 1)]
    assert spans.histogram("messaging.client.operation.duration")[0].count == 1


def test_tracing_off_measures_nothing(open_broker, client, spans):  # noqa: F811
    app = App(broker=client(open_broker()), tracing=False)
    app.producer.send("orders", b"a")
    app.stop()
    assert spans.histogram("messaging.client.operation.duration") == []
