"""The official RocketMQ 5 clients against ``postbox broker start`` (issue 18, §3 third bullet).

The Java gRPC client (rocketmq-client-java 5.0.8, through the lab driver) produces a corpus —
tags, several keys, unicode user properties and bodies, FIFO message groups, delivery by
timestamp — and receives it with a SimpleConsumer and a PushConsumer; the Python client
(rocketmq-python-client) receives the same messages and sends its own to the Java consumer.
Every client must see every message, none flagged as corrupted (the Java client checks the
body digest), with properties, tags, keys, message groups, delivery timestamps and message ids
as sent; the simple consumer gets a message group's messages in send order.
"""

from __future__ import annotations

import threading
import time

import pytest
from rocketmq import ConsumeResult, MessageListener

from tests.broker_node.grpc_v2.rocketmq_clients import (
    configuration,
    message,
    start_producer,
    start_push_consumer,
    start_simple_consumer,
)
from tests.lab.postbox_side import Deliveries, PostboxEndpoint
from tests.support.polling import wait_until
from tests.support.rocketmq_lab import LabDriver

TOPIC = "ClientsCorpus"
DELAY_MS = 3000


def corpus() -> list[dict]:
    """24 messages: 16 normal (4 tags, 1-3 keys, unicode properties), 6 FIFO in 2 groups
    (sent interleaved), 2 delayed."""
    specs = []
    for index in range(16):
        specs.append({"tags": f"tag-{index % 4}", "body": f"normal-{index} ✓ grüße",
                      "keys": [f"key-{index}-{n}" for n in range(1 + index % 3)],
                      "properties": {"tenant": f"tënant-{index % 2}", "n": str(index),
                                     "note": "über · 東京"}})
    for index in range(6):
        group = f"fifo-{index % 2}"
        specs.append({"tags": "fifo", "body": f"{group}-{index // 2}", "message_group": group,
                      "keys": [f"fifo-key-{index}"]})
    for index in range(2):
        specs.append({"tags": "later", "body": f"delayed-{index}", "delay_ms": DELAY_MS,
                      "properties": {"kind": "delayed"}})
    return specs


@pytest.fixture
def java_clients(rocketmq_install, tmp_path) -> LabDriver:
    """The lab driver, without the live RocketMQ (only gRPC endpoints are used)."""
    return LabDriver(rocketmq_install, tmp_path / "driver", namesrv="")


@pytest.fixture
def python_clients():
    """Official Python clients to shut down at the end (before the broker stops)."""
    started: list = []
    yield started
    for client in reversed(started):
        client.shutdown()


@pytest.fixture
def postbox(tmp_path):
    endpoint = PostboxEndpoint(tmp_path / "postbox").start()
    yield endpoint
    endpoint.close()


def check_round_trip(seen: Deliveries, specs: list[dict], *, group_order: bool) -> None:
    """Every spec delivered exactly once (attempt 1), as sent, with the id its send returned;
    with ``group_order``, each message group's messages in send order."""
    assert seen.corrupted() == []
    by_body = seen.by_body()
    assert sorted(by_body) == sorted(spec["body"] for spec in specs)
    ids = dict(zip((spec["body"] for spec in specs), seen.sent_ids, strict=True))
    for spec in specs:
        (delivery,) = by_body[spec["body"]]
        assert delivery["message_id"] == ids[spec["body"]]
        assert delivery["topic"] == TOPIC
        assert delivery["tags"] == spec["tags"]
        assert sorted(delivery["keys"]) == sorted(spec.get("keys", []))
        assert delivery["properties"] == spec.get("properties", {})
        assert delivery["message_group"] == spec.get("message_group")
        assert delivery["delivery_attempt"] == 1
        if "delay_ms" in spec:
            assert delivery["delivery_timestamp"] is not None
            assert delivery["at_ms"] >= delivery["delivery_timestamp"] - 50  # never early
    for group in ("fifo-0", "fifo-1") if group_order else ():
        order = [d["body"] for d in seen.all if d["message_group"] == group]
        assert order == [f"{group}-{n}" for n in range(3)]  # one queue, send order


def test_java_producer_simple_and_push_consumers_round_trip(java_clients, postbox):
    specs = corpus()
    names = [spec["body"] for spec in specs]
    common = {"endpoints": postbox.address, "topic": TOPIC, "expect": names, "max_attempts": 1,
              "timeout_ms": 60_000, "quiet_ms": 1500}
    simple = Deliveries(java_clients.run("grpc-simple", group="java-simple", invisible_ms=20_000,
                                         send=specs, **common))
    check_round_trip(simple, specs, group_order=True)
    delayed = [d for d in simple.all if d["body"].startswith("delayed-")]
    print("delayed delivery lateness ms:",
          [d["at_ms"] - d["delivery_timestamp"] for d in delayed])

    push = Deliveries(java_clients.run("grpc-push", group="java-push", **common))
    push.report["sent"] = simple.sent_ids  # the push run sent nothing itself
    # fifo=false (docs/remoting.md): the push consumer's threads may reorder a group
    check_round_trip(push, specs, group_order=False)


class Recorder(MessageListener):
    """Records every delivery (body, message id, attempt); consumes successfully."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list = []

    def consume(self, view) -> ConsumeResult:
        with self.lock:
            self.seen.append(view)
        return ConsumeResult.SUCCESS

    def bodies(self) -> list[bytes]:
        with self.lock:
            return [view.body for view in self.seen]


def test_python_and_java_clients_read_each_others_messages(java_clients, postbox,
                                                           python_clients):
    clients = python_clients
    specs = [spec for spec in corpus() if "delay_ms" not in spec]
    names = [spec["body"] for spec in specs]
    sent = Deliveries(java_clients.run(
        "grpc-simple", endpoints=postbox.address, topic=TOPIC, group="java-first",
        invisible_ms=20_000, send=specs, expect=names, max_attempts=1, timeout_ms=60_000,
        quiet_ms=0))
    ids = dict(zip(names, sent.sent_ids, strict=True))

    config = configuration(postbox.address)
    simple = start_simple_consumer(clients, config, "py-simple", TOPIC, await_duration_s=2)
    received = {}

    def receive_all():
        for view in simple.receive(32, 20):
            received[view.body.decode()] = view
            simple.ack(view)
        return len(received) == len(specs)

    wait_until(receive_all, timeout_s=30)
    for spec in specs:
        view = received[spec["body"]]
        assert not view.corrupted
        assert view.message_id == ids[spec["body"]]
        assert view.tag == spec["tags"]
        assert sorted(view.keys) == sorted(spec["keys"])
        assert view.properties == spec.get("properties", {})
        assert view.message_group == spec.get("message_group")

    listener = Recorder()
    start_push_consumer(clients, config, "py-push", TOPIC, listener)
    wait_until(lambda: len(listener.bodies()) >= len(specs), timeout_s=30)
    assert sorted(body.decode() for body in listener.bodies()) == sorted(names)
    with listener.lock:
        assert not any(view.corrupted for view in listener.seen)

    producer = start_producer(clients, config, "FromPython")
    python_ids = {}
    for index in range(6):
        body = f"from-python-{index} ✓"
        receipt = producer.send(message("FromPython", body.encode(), tag=f"py-{index % 2}",
                                        keys=(f"pk-{index}", "pk-all"),
                                        properties={"origin": "python", "i": str(index)}))
        python_ids[body] = receipt.message_id
    started = time.monotonic()
    seen = Deliveries(java_clients.run(
        "grpc-simple", endpoints=postbox.address, topic="FromPython", group="java-reader",
        invisible_ms=20_000, expect=list(python_ids), max_attempts=1, timeout_ms=60_000,
        quiet_ms=0))
    print(f"java reader took {time.monotonic() - started:.1f} s")
    assert seen.corrupted() == []
    for body, (delivery,) in seen.by_body().items():
        index = int(body.split("-")[2].split()[0])
        assert delivery["message_id"] == python_ids[body]
        assert delivery["tags"] == f"py-{index % 2}"
        assert sorted(delivery["keys"]) == sorted([f"pk-{index}", "pk-all"])
        assert delivery["properties"] == {"origin": "python", "i": str(index)}
    assert sorted(seen.by_body()) == sorted(python_ids)
