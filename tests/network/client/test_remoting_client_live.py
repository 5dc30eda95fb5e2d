"""The remoting client against the lab's live Apache RocketMQ 5.3.3 (name server + broker).

Routes and the global queue numbering from Apache's name server; the producer and admin side of
``RemotingBroker`` (create topic, topic config, queue ids, send with tags/keys/properties/queue
id/sharding key, concurrent sends coalesced into SEND_BATCH_MESSAGE, subscription groups, lookups
by unique key) — what Postbox sent is read back by the official Java client (the lab driver's
``pull``) with every field. Each test works in its own namespace, so runs share the lab.
"""

from __future__ import annotations

import base64
import itertools
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from postbox.network.client.connection import Connections
from postbox.network.client.remote_broker import RemotingBroker
from postbox.network.client.routes import RouteTable
from postbox.storage_engine import Message
from postbox.storage_engine.errors import InvalidMessageError
from tests.support.polling import wait_until

_runs = itertools.count()


@pytest.fixture
def namespace() -> str:
    return f"pbclient{next(_runs)}x{threading.get_ident() % 10_000}"


@pytest.fixture
def client(live_rocketmq, namespace: str) -> Iterator[RemotingBroker]:  # type: ignore[no-untyped-def]
    broker = RemotingBroker(live_rocketmq.namesrv, namespace=namespace, timeout_ms=30_000)
    yield broker
    broker.close()


def java_pull(live_rocketmq, wire_topic: str, expected: int) -> list[dict]:  # type: ignore[no-untyped-def]
    """Every message of ``wire_topic`` as the official Java client reads it."""
    found: list[dict] = []

    def pulled() -> bool:
        found[:] = live_rocketmq.driver.run("pull", topics=[wire_topic])["messages"]
        return len(found) >= expected
    wait_until(pulled, timeout_s=120, interval_s=2)
    return found


def test_route_of_a_topic_numbers_its_queues_globally(live_rocketmq, namespace: str) -> None:  # type: ignore[no-untyped-def]
    topic = f"{namespace}%routes"
    live_rocketmq.driver.run("create-topic", broker_addr=live_rocketmq.broker.address,
                             topic=topic, queues=3)
    live_rocketmq.driver.run("await-route", topics=[topic], timeout_ms=60_000)
    connections = Connections()
    try:
        route = RouteTable([live_rocketmq.namesrv], connections, namespace,
                           timeout_ms=30_000).route("routes")
    finally:
        connections.close()
    broker_name = live_rocketmq.broker.name
    assert [(ref.broker_name, ref.queue_id) for ref in route.queues] == [
        (broker_name, 0), (broker_name, 1), (broker_name, 2)]
    assert route.master(broker_name) == live_rocketmq.broker.address
    assert route.writable_queue_ids() == route.readable_queue_ids() == [0, 1, 2]


def test_producer_and_admin_side_against_apache(live_rocketmq, client: RemotingBroker,  # type: ignore[no-untyped-def]
                                                namespace: str) -> None:
    config = client.create_topic("orders", 4)
    assert (config.topic_name, config.read_queue_nums) == ("orders", 4)
    wait_until(lambda: client.topic_config("orders") is not None, timeout_s=60)
    assert client.topic_config("orders").write_queue_nums == 4  # type: ignore[union-attr]
    assert client.queue_ids("orders") == [0, 1, 2, 3]
    assert client.topic_config("never-created") is None and client.queue_ids("nope") == []

    first = client.send(Message("orders", b"first \xe2\x9c\x93", tags="TagA",
                                keys=["order-1", "shared"], properties={"region": "eu"}),
                        queue_id=2)
    assert (first.topic, first.queue_id, first.stored_topic) == ("orders", 2, "orders")
    assert first.status.value == "PUT_OK" and len(first.offset_msg_id) == 32
    assert first.unique_key and first.msg_id == first.unique_key
    sharded = [client.send(Message("orders", f"s{i}".encode()), sharding_key="customer-7")
               for i in range(3)]
    assert len({result.queue_id for result in sharded}) == 1

    def burst(thread: int) -> list:
        return [client.send(Message("orders", f"t{thread}-{i}".encode(),
                                    unique_key=f"{thread:02X}{i:030X}")) for i in range(25)]
    with ThreadPoolExecutor(4) as pool:
        results = [result for batch in pool.map(burst, range(4)) for result in batch]
    assert len({(r.queue_id, r.queue_offset) for r in results}) == 100

    messages = java_pull(live_rocketmq, f"{namespace}%orders", 104)
    by_key = {message["uniq_key"]: message for message in messages}
    assert len(by_key) == 104  # every message kept its own UNIQ_KEY, batches included
    java_first = by_key[first.unique_key]
    assert base64.b64decode(java_first["body_b64"]) == "first ✓".encode()
    assert java_first["queue_id"] == 2 and java_first["queue_offset"] == first.queue_offset
    assert java_first["properties"]["TAGS"] == "TagA"
    assert java_first["properties"]["KEYS"] == "order-1 shared"
    assert java_first["properties"]["region"] == "eu"
    assert java_first["offset_msg_id"] == first.offset_msg_id

    def found() -> list:
        return client.find_by_unique_key("orders", first.unique_key)
    wait_until(lambda: bool(found()), timeout_s=60)
    [view] = found()
    assert view.topic == "orders" and view.body == "first ✓".encode()
    assert (view.queue_id, view.queue_offset, view.log_position) == (
        2, first.queue_offset, first.log_position)
    assert view.tags == "TagA" and view.keys == ["order-1", "shared"]

    group = client.subscription_group("billing")
    assert group.group_name == "billing" and group.retry_max_times == 16
    assert "billing" in client.consumer_groups()
    assert client.dead_letters("billing") == []

    with pytest.raises(InvalidMessageError, match="queue id 9"):
        client.send(Message("orders", b"x"), queue_id=9)
