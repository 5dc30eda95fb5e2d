"""FIFO consumption over gRPC (a consumer group with ``consumeMessageOrderly``), with raw calls
against ``postbox broker start``: within a message group one message is in flight at a time, a
message not acknowledged in its invisible time is redelivered before its successors (from the
same queue, its delivery attempt + 1), after max attempts it goes to ``%DLQ%group`` and only then
its successors come; two message groups sharing one queue do not block each other; a group
that does not consume orderly gets every message at once; the official Python push consumer,
told ``fifo``, consumes a message group in order, retrying in place."""

from __future__ import annotations

import threading
import time

from rocketmq import ConsumeResult

from postbox.broker_node.grpc_v2.protocol import Code, definition, service
from postbox.storage_engine import Broker, SubscriptionGroupConfig
from tests.broker_node.grpc_v2.raw_calls import TIMEOUT_S, pull_all, queue, resource, stub
from tests.broker_node.grpc_v2.rocketmq_clients import (
    configuration,
    message,
    start_producer,
    start_push_consumer,
)
from tests.support.polling import wait_until

TOPIC, ORDERED, PLAIN = "orders", "ordered", "plain"


def prepare(broker: Broker) -> None:
    broker.create_topic(TOPIC, 1)  # every message group in one queue
    broker.tables.subscription_groups.put(SubscriptionGroupConfig(
        ORDERED, retry_max_times=1, extra={"consumeMessageOrderly": True}))


def send(address: str, group: str, body: str) -> None:
    proto = definition.Message(topic=resource(TOPIC), body=body.encode())
    proto.system_properties.message_id = "0102AB" + body.encode().hex().upper()
    proto.system_properties.message_type = definition.FIFO
    proto.system_properties.message_group = group
    response = stub(address).SendMessage(service.SendMessageRequest(messages=[proto]),
                                         timeout=TIMEOUT_S)
    assert response.status.code == Code.OK, response.status


def receive(address: str, group: str, *, invisible_s: int = 2, wait_s: int = 1,
            batch: int = 16) -> list[definition.Message]:
    request = service.ReceiveMessageRequest(group=resource(group), message_queue=queue(TOPIC),
                                            batch_size=batch)
    request.invisible_duration.seconds = invisible_s
    request.long_polling_timeout.seconds = wait_s
    return [response.message for response in stub(address).ReceiveMessage(
        request, timeout=TIMEOUT_S) if response.HasField("message")]


def ack(address: str, group: str, item: definition.Message) -> None:
    entry = service.AckMessageEntry(message_id=item.system_properties.message_id,
                                    receipt_handle=item.system_properties.receipt_handle)
    response = stub(address).AckMessage(service.AckMessageRequest(
        group=resource(group), topic=resource(TOPIC), entries=[entry]), timeout=TIMEOUT_S)
    assert response.status.code == Code.OK, response.status


def seen(messages: list[definition.Message]) -> list[tuple[str, int]]:
    return [(m.body.decode(), m.system_properties.delivery_attempt) for m in messages]


def receive_until(address: str, group: str, timeout_s: float) -> list[definition.Message]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := receive(address, group):
            return found
    return []


def test_a_failed_head_comes_back_before_its_successors(broker_server):
    server = broker_server(prepare=prepare)
    for body in ("a0", "b0", "a1", "b1", "a2"):
        send(server.address, body[0].upper(), body)
    first = receive(server.address, ORDERED)
    assert seen(first) == [("a0", 1), ("b0", 1)]
    ack(server.address, ORDERED, first[1])
    group_b = receive(server.address, ORDERED)
    assert seen(group_b) == [("b1", 1)]  # A is not in B's way
    ack(server.address, ORDERED, group_b[0])
    assert receive(server.address, ORDERED) == []  # a1 waits behind a0
    again = receive_until(server.address, ORDERED, 10)  # a0's invisible time (2 s) runs out
    assert seen(again) == [("a0", 2)]
    ack(server.address, ORDERED, again[0])
    rest = []
    for _ in range(2):
        rest.extend(found := receive_until(server.address, ORDERED, 5))
        for item in found:
            ack(server.address, ORDERED, item)
    assert seen(rest) == [("a1", 1), ("a2", 1)]
    assert receive(server.address, ORDERED) == []
    plain = receive(server.address, PLAIN)  # a group that does not consume orderly: at once
    assert sorted(body for body, _ in seen(plain)) == ["a0", "a1", "a2", "b0", "b1"]


def test_after_max_attempts_the_head_is_dead_lettered_then_successors_come(broker_server):
    server = broker_server(prepare=prepare)
    for body in ("c0", "c1"):
        send(server.address, "C", body)
    assert seen(receive(server.address, ORDERED, invisible_s=1)) == [("c0", 1)]
    second = receive_until(server.address, ORDERED, 10)
    assert seen(second) == [("c0", 2)]  # retry_max_times 1: two attempts, then the DLQ
    later = receive_until(server.address, ORDERED, 10)
    assert seen(later) == [("c1", 1)]
    ack(server.address, ORDERED, later[0])
    dead = pull_all(server.address, "inspector", f"%DLQ%{ORDERED}")
    assert [message.body for message in dead] == [b"c0"]


class InOrder:
    """A FIFO push consumer's listener: ``b1`` fails once, ``b3`` always."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, int]] = []
        self.failed: set[str] = set()

    def consume(self, message) -> ConsumeResult:
        body = message.body.decode()
        with self.lock:
            self.seen.append((body, message.delivery_attempt))
            first_failure = body == "b1" and body not in self.failed
            self.failed.add(body)
        return ConsumeResult.FAILURE if first_failure or body == "b3" else ConsumeResult.SUCCESS


def test_the_official_push_consumer_consumes_a_message_group_in_order(broker_server, clients):
    server = broker_server(prepare=prepare)
    config = configuration(server.address)
    producer = start_producer(clients, config, TOPIC)
    for index in range(5):
        built = message(TOPIC, f"b{index}".encode())
        built.message_group = "B"
        producer.send(built)
    listener = InOrder()
    consumer = start_push_consumer(clients, config, ORDERED, TOPIC, listener)
    assert consumer.fifo  # the settings answer told the client to consume in order
    wait_until(lambda: [body for body, _ in listener.seen if body == "b4"], timeout_s=30)
    with listener.lock:
        bodies = [body for body, _ in listener.seen]
    # b1 retried in place before b2; b3 fails twice (retry_max_times 1), goes to the DLQ,
    # and only then b4 comes
    assert bodies == ["b0", "b1", "b1", "b2", "b3", "b3", "b4"]
    dead = wait_until(lambda: pull_all(server.address, "inspector", f"%DLQ%{ORDERED}"))
    assert [item.body for item in dead] == [b"b3"]
