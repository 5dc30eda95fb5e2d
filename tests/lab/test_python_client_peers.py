"""The official Python client (rocketmq-python-client, gRPC) with RocketMQ 5's other message
types, against the lab's live Apache proxy and against ``postbox broker start`` (``grpc_target``,
one module-scoped target each): the same scenario, the same assertions.

- Transactions: a ``Producer`` with a ``TransactionChecker`` commits one half, rolls one back and
  leaves two open ("unknown"); the broker's check-back (RecoverOrphanedTransactionCommand on the
  Telemetry stream) settles those, one commit and one rollback. A ``SimpleConsumer`` started
  first sees exactly the two committed messages, each once.
- Timers: messages sent with ``delivery_timestamp`` a few seconds ahead are received at that
  moment (the timer precision is 1 s: Apache's ``timerPrecisionMs``; Postbox keeps the exact
  millisecond), never before the moment less that precision; the lateness is printed. The
  client (5.1.x) puts ``delivery_timestamp`` into the protocol's ``Timestamp.seconds`` as
  given, although its docstring says milliseconds: in seconds it works on both; in
  milliseconds Apache's proxy refuses the send (INTERNAL_SERVER_ERROR "Timestamp is not
  valid") and Postbox reads it as milliseconds (a seconds value past year 5138 can only be
  one).
- FIFO: six messages in two message groups, sent interleaved to a FIFO topic, received by a
  ``SimpleConsumer`` of a group that consumes orderly; the head of one group is not acked at its
  first attempt, comes back after the invisible time, and each group's messages settle in send
  order with no head delivered after its retry.

The figures (timer lateness, check-back and FIFO times) are printed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from rocketmq import Producer, TransactionChecker, TransactionResolution
from rocketmq.v5.exception import ClientException

from postbox.storage_engine import Broker
from tests.broker_node.grpc_v2.rocketmq_clients import (
    configuration,
    message,
    start_producer,
    start_simple_consumer,
)
from tests.lab.postbox_side import BROKER_CONF, PostboxEndpoint

pytestmark = pytest.mark.peers  # `make test-peers` (CI runs it beside the other passes)

TX_TOPIC, TIMER_TOPIC, FIFO_TOPIC = "PeersPyTx", "PeersPyTimer", "PeersPyFifo"
TX_GROUP, TIMER_GROUP, FIFO_GROUP = "peers-py-tx", "peers-py-timer", "peers-py-fifo"
RETRY_MAX_TIMES = 2
INVISIBLE_S = 10  # the Apache proxy refuses less (minInvisibleTimeMillsForRecv)
PRECISION_MS = 1000  # Apache's timerPrecisionMs
RECEIVE_SLACK_MS = 15_000
"""A received timer may come this much later than its moment plus the precision: the figures are
printed, not compared tightly (the machine is shared and loaded; the timer benchmark measures
lateness). Measured: Postbox 5-22 ms, Apache 0.1-0.4 s. Never earlier than the moment less the
precision: that is asserted strictly."""
CHECK_TIMEOUT_S = {"apache": 120, "postbox": 60}  # Apache's check pass runs every 30 s


@dataclass(frozen=True)
class GrpcTarget:
    name: str
    endpoint: str


@pytest.fixture(scope="module", params=["apache", "postbox"])
def grpc_target(request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcTarget]:
    if request.param == "apache":
        lab = request.getfixturevalue("live_rocketmq")
        lab.driver.run("lab-setup", broker_addr=lab.broker.address, topics=[
            {"topic": TX_TOPIC, "queues": 2, "message_type": "TRANSACTION"},
            {"topic": TIMER_TOPIC, "queues": 2, "message_type": "DELAY"},
            {"topic": FIFO_TOPIC, "queues": 2, "message_type": "FIFO"}], groups=[
            {"group": FIFO_GROUP, "retry_max_times": RETRY_MAX_TIMES, "orderly": True},
            {"group": TX_GROUP, "retry_max_times": RETRY_MAX_TIMES},
            {"group": TIMER_GROUP, "retry_max_times": RETRY_MAX_TIMES}])
        yield GrpcTarget("apache", lab.proxy_endpoint)
        return
    directory = tmp_path_factory.mktemp("postbox-grpc")
    endpoint = PostboxEndpoint(directory, retry_max_times={
        FIFO_GROUP: RETRY_MAX_TIMES, TX_GROUP: RETRY_MAX_TIMES, TIMER_GROUP: RETRY_MAX_TIMES},
        orderly=frozenset({FIFO_GROUP}))
    (directory / "broker.conf").write_text(BROKER_CONF)
    with Broker.open(endpoint.config()) as broker:
        for topic in (TX_TOPIC, TIMER_TOPIC, FIFO_TOPIC):
            broker.create_topic(topic, 2)
    endpoint.start()
    try:
        yield GrpcTarget("postbox", endpoint.address)
    finally:
        endpoint.close()


@pytest.fixture
def clients() -> Iterator[list]:
    started: list = []
    yield started
    for client in started:
        client.shutdown()


@dataclass(frozen=True)
class Delivery:
    body: str
    attempt: int
    at_ms: int
    group: str | None


def receive_until(consumer, done: Callable[[list[Delivery]], bool], timeout_s: float, *,
                  keep: Callable[[Delivery], bool] = lambda delivery: False,
                  quiet_s: float = 0.0) -> list[Delivery]:
    """Receive (acking all but those ``keep`` says) until ``done``, then ``quiet_s`` longer."""
    deliveries: list[Delivery] = []
    deadline = time.monotonic() + timeout_s
    quiet_until: float | None = None
    while True:
        now = time.monotonic()
        if quiet_until is None and done(deliveries):
            quiet_until = now + quiet_s
        if quiet_until is not None and now >= quiet_until:
            return deliveries
        assert now < deadline, f"still waiting after {timeout_s} s: {deliveries}"
        for item in consumer.receive(16, INVISIBLE_S):
            delivery = Delivery(item.body.decode(), item.delivery_attempt,
                                int(time.time() * 1000), item.message_group)
            deliveries.append(delivery)
            if not keep(delivery):
                consumer.ack(item)


def ready_consumer(clients: list, target: GrpcTarget, group: str, topic: str):
    """A simple consumer that has asked once already (an Apache group starts at the end of
    the queue at its first receive: nothing sent afterwards is missed). The Apache proxy may
    refuse a receive that comes before the client's settings (``"settings" is null``): it is
    asked again."""
    consumer = start_simple_consumer(clients, configuration(target.endpoint), group, topic,
                                     await_duration_s=2)
    for attempt in range(10):
        try:
            consumer.receive(16, INVISIBLE_S)
            return consumer
        except Exception:  # the Apache proxy refuses a receive before the settings
            time.sleep(0.5 * (attempt + 1))
    consumer.receive(16, INVISIBLE_S)
    return consumer


class Checker(TransactionChecker):
    """Answers a check from the body: ``unknown-commit`` commits, anything else rolls back."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.checked: dict[str, int] = {}

    def check(self, checked) -> TransactionResolution:
        body = checked.body.decode()
        with self.lock:
            self.checked[body] = int(time.time() * 1000)
        return (TransactionResolution.COMMIT if body == "unknown-commit"
                else TransactionResolution.ROLLBACK)


def test_transactions_commit_roll_back_and_answer_check_back(grpc_target: GrpcTarget,
                                                             clients: list) -> None:
    consumer = ready_consumer(clients, grpc_target, TX_GROUP, TX_TOPIC)
    checker = Checker()
    producer = Producer(configuration(grpc_target.endpoint), (TX_TOPIC,), checker)
    producer.startup()
    clients.append(producer)
    sent_ms = int(time.time() * 1000)
    for body, end in (("commit", "commit"), ("rollback", "rollback"),
                      ("unknown-commit", None), ("unknown-rollback", None)):
        transaction = producer.begin_transaction()
        receipt = producer.send(message(TX_TOPIC, body.encode(), keys=(f"tx-{body}",)),
                                transaction)
        assert receipt.message_id
        if end is not None:
            getattr(transaction, end)()

    def settled(deliveries: list[Delivery]) -> bool:
        with checker.lock:
            both_checked = {"unknown-commit", "unknown-rollback"} <= set(checker.checked)
        return both_checked and {d.body for d in deliveries} >= {"commit", "unknown-commit"}

    deliveries = receive_until(consumer, settled, CHECK_TIMEOUT_S[grpc_target.name],
                               quiet_s=3)
    print(f"{grpc_target.name}: check-back after "
          f"{ {body: at - sent_ms for body, at in checker.checked.items()} } ms")
    assert sorted(d.body for d in deliveries) == ["commit", "unknown-commit"]
    assert all(d.attempt == 1 for d in deliveries)


def test_timer_messages_arrive_at_their_moment(grpc_target: GrpcTarget, clients: list) -> None:
    consumer = ready_consumer(clients, grpc_target, TIMER_GROUP, TIMER_TOPIC)
    producer = start_producer(clients, configuration(grpc_target.endpoint), TIMER_TOPIC)
    now_s = int(time.time())
    moments = {f"at-{seconds}s": (now_s + seconds) * 1000 for seconds in (4, 6)}
    for body, moment in moments.items():  # the client sends the value as Timestamp.seconds
        producer.send(message(TIMER_TOPIC, body.encode(), delivery_timestamp_ms=moment // 1000))
    in_ms = message(TIMER_TOPIC, b"ms", delivery_timestamp_ms=(now_s + 4) * 1000)
    if grpc_target.name == "apache":  # out of Timestamp's range: the proxy refuses it
        with pytest.raises(ClientException, match="Timestamp is not valid"):
            producer.send(in_ms)
    else:  # Postbox reads a seconds field that large as milliseconds
        moments["ms"] = (now_s + 4) * 1000
        producer.send(in_ms)
    deliveries = receive_until(consumer, lambda seen: len(seen) >= len(moments), 60,
                               quiet_s=2)
    lateness = {d.body: d.at_ms - moments[d.body] for d in deliveries}
    print(f"{grpc_target.name}: timer lateness {lateness} ms")
    assert sorted(d.body for d in deliveries) == sorted(moments)
    for body, late_ms in lateness.items():
        assert -PRECISION_MS <= late_ms <= PRECISION_MS + RECEIVE_SLACK_MS, (body, late_ms)


def test_fifo_group_redelivers_a_failed_head_before_its_successors(grpc_target: GrpcTarget,
                                                                   clients: list) -> None:
    consumer = ready_consumer(clients, grpc_target, FIFO_GROUP, FIFO_TOPIC)
    producer = start_producer(clients, configuration(grpc_target.endpoint), FIFO_TOPIC)
    sent = [f"g{index % 2}-{index // 2}" for index in range(6)]
    for body in sent:
        fifo = message(FIFO_TOPIC, body.encode())
        fifo.message_group = body[:2]
        producer.send(fifo)

    def keep(delivery: Delivery) -> bool:
        return delivery.body == "g0-0" and delivery.attempt == 1

    def done(deliveries: list[Delivery]) -> bool:
        acked = {d.body for d in deliveries if not keep(d)}
        return acked >= set(sent)

    started = time.monotonic()
    deliveries = receive_until(consumer, done, 90, keep=keep, quiet_s=2)
    by_group = {group: [(d.body, d.attempt) for d in deliveries if d.group == group]
                for group in ("g0", "g1")}
    print(f"{grpc_target.name}: FIFO deliveries {by_group} in "
          f"{time.monotonic() - started:.1f} s")
    for group, seen in by_group.items():
        order = [f"{group}-{n}" for n in range(3)]
        assert [body for body, attempt in seen if attempt == 1] == order, seen
        last = {body: index for index, (body, _) in enumerate(seen)}
        assert sorted(last, key=last.__getitem__) == order, seen  # settled in send order
    retried = [index for index, item in enumerate(by_group["g0"]) if item == ("g0-0", 2)]
    assert retried, by_group
    assert all(body != "g0-0" for body, _ in by_group["g0"][retried[0] + 1:]), by_group
