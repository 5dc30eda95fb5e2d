"""The official rocketmq-python-client against a Postbox broker running as its own process:
send (normal, tagged, keyed, with properties, delayed), SimpleConsumer and PushConsumer
receive and ack, redelivery after the invisible time, and the DLQ after max attempts."""

from __future__ import annotations

import threading
import time

from rocketmq import ConsumeResult, MessageListener

from postbox.storage_engine import Broker, SubscriptionGroupConfig
from tests.broker_node.grpc_v2.raw_calls import pull_all
from tests.broker_node.grpc_v2.rocketmq_clients import (
    configuration,
    message,
    start_producer,
    start_push_consumer,
    start_simple_consumer,
)
from tests.support.polling import wait_until


def test_send_and_simple_consume_with_tags_keys_properties(broker_server, clients):
    server = broker_server()
    config = configuration(server.address)
    producer = start_producer(clients, config, "orders")
    sent = {}
    for index, (tag, keys) in enumerate([(None, ()), ("paid", ()), ("paid", ("o-1", "o-2")),
                                         ("refund", ("o-3",))]):
        receipt = producer.send(message("orders", f"body-{index}".encode(), tag=tag, keys=keys,
                                        properties={"tenant": "t1", "n": str(index)}))
        sent[receipt.message_id] = (index, tag, set(keys))
    consumer = start_simple_consumer(clients, config, "billing", "orders", "paid || refund")

    received = {}

    def receive_all():
        for item in consumer.receive(32, 10):
            received[item.message_id] = item
            consumer.ack(item)
        return len(received) == 3

    wait_until(receive_all)
    for message_id, item in received.items():
        index, tag, keys = sent[message_id]
        assert item.topic == "orders"
        assert item.body == f"body-{index}".encode()
        assert item.tag == tag
        assert set(item.keys) == keys
        assert item.properties == {"tenant": "t1", "n": str(index)}
        assert item.delivery_attempt == 1
        assert item.born_host
    assert {index for index, _, _ in (sent[m] for m in received)} == {1, 2, 3}
    consumer.await_duration = 1
    assert consumer.receive(32, 1) == []  # acked messages are not delivered again


def test_unacked_message_is_redelivered_after_its_invisible_time(broker_server, clients):
    server = broker_server()
    config = configuration(server.address)
    producer = start_producer(clients, config, "jobs")
    receipt = producer.send(message("jobs", b"work", tag="a"))
    consumer = start_simple_consumer(clients, config, "workers", "jobs", await_duration_s=3)

    first = wait_until(lambda: consumer.receive(1, 1))[0]
    assert first.message_id == receipt.message_id and first.delivery_attempt == 1
    received_at = time.monotonic()
    again = wait_until(lambda: consumer.receive(1, 1))[0]  # not acked: back after ~1 s
    assert time.monotonic() - received_at >= 0.9
    assert again.message_id == receipt.message_id
    assert again.topic == "jobs" and again.body == b"work" and again.tag == "a"
    assert again.delivery_attempt == 2
    consumer.ack(again)
    consumer.await_duration = 1
    assert consumer.receive(1, 2) == []


def test_delayed_message_is_delivered_after_its_delivery_time(broker_server, clients):
    server = broker_server()
    config = configuration(server.address)
    producer = start_producer(clients, config, "later")
    consumer = start_simple_consumer(clients, config, "g-later", "later", await_duration_s=3)
    deliver_at_ms = int(time.time() * 1000) + 1500
    receipt = producer.send(message("later", b"tick", delivery_timestamp_ms=deliver_at_ms))
    item = wait_until(lambda: consumer.receive(1, 5))[0]
    received_ms = int(time.time() * 1000)
    assert deliver_at_ms <= received_ms < deliver_at_ms + 3000
    assert item.message_id == receipt.message_id and item.body == b"tick"
    consumer.ack(item)


class Recorder(MessageListener):
    """Succeeds except for bodies starting with ``fail``; records every delivery."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.deliveries: list[tuple[bytes, int]] = []

    def consume(self, message) -> ConsumeResult:
        with self.lock:
            self.deliveries.append((message.body, message.delivery_attempt))
        return ConsumeResult.FAILURE if message.body.startswith(b"fail") else ConsumeResult.SUCCESS

    def count(self, body: bytes) -> int:
        with self.lock:
            return sum(1 for delivered, _ in self.deliveries if delivered == body)


def test_push_consumer_acks_and_dead_letters_after_max_attempts(broker_server, clients):
    def three_attempts(broker: Broker) -> None:
        broker.tables.subscription_groups.put(
            SubscriptionGroupConfig("pushers", retry_max_times=2))

    server = broker_server(prepare=three_attempts)
    config = configuration(server.address)
    producer = start_producer(clients, config, "events")
    bodies = [f"ok-{index}".encode() for index in range(20)]
    for body in bodies[:10]:
        producer.send(message("events", body))
    listener = Recorder()
    start_push_consumer(clients, config, "pushers", "events", listener)
    producer.send(message("events", b"fail-1", tag="bad", keys=("k-fail",)))
    for body in bodies[10:]:
        producer.send(message("events", body))

    wait_until(lambda: all(listener.count(body) == 1 for body in bodies), timeout_s=20)
    wait_until(lambda: listener.count(b"fail-1") == 3, timeout_s=20)
    dead = wait_until(lambda: pull_all(server.address, "pushers", "%DLQ%pushers"), timeout_s=20)
    assert [item.body for item in dead] == [b"fail-1"]
    assert dead[0].system_properties.tag == "bad"
    assert list(dead[0].system_properties.keys) == ["k-fail"]
    with listener.lock:
        attempts = [attempt for body, attempt in listener.deliveries if body == b"fail-1"]
    assert attempts == [1, 2, 3]
    assert all(listener.count(body) == 1 for body in bodies)  # acked: never redelivered
