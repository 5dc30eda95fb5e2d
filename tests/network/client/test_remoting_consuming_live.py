"""The remoting client's consumer calls against the lab's live Apache RocketMQ.

Messages are produced by the official Java producer (the lab driver); the client under test
(``Consuming`` over its own ``Connections`` and ``RouteTable``) pulls them, long-polls for
them, commits offsets, sends them back through the retry topic to the dead-letter queue,
joins groups and locks queues — each checked against what the Java side says or does.
Topic and group names are fresh per test (the lab broker lives for the whole session).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from postbox.network.client.consuming import Consuming
from postbox.storage_engine import ConsumeFrom, GetStatus, SendBackOutcome
from tests.support.consuming_clients import ConsumingClients

QUEUES = 2
WAIT_TIMEOUT_MS = 30_000


def fresh(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def client_id() -> str:
    return f"127.0.0.1@{os.getpid()}#{time.monotonic_ns()}"


@pytest.fixture
def consumers(live_rocketmq) -> Iterator[ConsumingClients]:
    made = ConsumingClients(live_rocketmq.namesrv, timeout_ms=30_000)  # a loaded lab is slow
    yield made
    made.close()


def make_topic(lab) -> str:
    topic = fresh("Consume")
    lab.driver.run("create-topic", broker_addr=lab.broker.address, topic=topic, queues=QUEUES,
                   message_type="NORMAL")
    lab.driver.run("await-route", topics=[topic], timeout_ms=60_000)
    return topic


def produce(lab, topic: str, *specs: dict) -> list[dict]:
    sends = [{"message": {"topic": topic, **spec}} for spec in specs]
    return lab.driver.run("produce", sends=sends)


def pull_all(consumer: Consuming, group: str, topic: str, tags: str | None = None):
    views = []
    for queue_id in range(QUEUES):
        result = consumer.pull(group, topic, queue_id, 0, 32, tags=tags)
        views.extend(result.messages)
    return views


def test_pulls_decode_what_the_java_producer_sent(live_rocketmq, consumers):
    lab = live_rocketmq
    topic = make_topic(lab)
    consumer = consumers.new()
    sent = produce(lab, topic, {"tags": "a", "keys": ["k1"], "properties": {"colour": "grün"},
                                "body": "héllo"},
                   {"tags": "b", "body": "two"}, {"tags": "a", "body": "three"})
    views = pull_all(consumer, "g_" + topic, topic)
    by_uniq = {view.unique_key: view for view in views}
    assert set(by_uniq) == {result["msg_id"] for result in sent}
    for result in sent:
        view = by_uniq[result["msg_id"]]
        assert (view.topic, view.queue_id, view.queue_offset) == (
            topic, result["queue_id"], result["queue_offset"])
        assert view.msg_id == result["offset_msg_id"]
        assert str(view.store_host) == lab.broker.address
    first = by_uniq[sent[0]["msg_id"]]
    assert (first.body, first.tags, first.keys) == ("héllo".encode(), "a", ["k1"])
    assert first.properties["colour"] == "grün"
    tagged = pull_all(consumer, "g_" + topic, topic, tags="a")
    assert sorted(view.body for view in tagged) == sorted([b"three", "héllo".encode()])
    idle = consumer.pull("g_" + topic, topic, 0, 50, 32)
    assert idle.status in (GetStatus.OFFSET_OVERFLOW_BADLY, GetStatus.OFFSET_OVERFLOW_ONE)


def test_a_parked_queue_wakes_when_a_message_arrives(live_rocketmq, consumers):
    lab = live_rocketmq
    topic = make_topic(lab)
    consumer = consumers.new()
    group = "g_" + topic
    positions = {}
    for queue_id in range(QUEUES):
        result = consumer.pull(group, topic, queue_id, 0, 32)
        assert result.status in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.OFFSET_OVERFLOW_ONE)
        positions[(topic, queue_id)] = 0
    outcome: list[tuple[bool, float]] = []

    def wait() -> None:
        started = time.monotonic()
        outcome.append((consumer.wait_for_arrival(positions, WAIT_TIMEOUT_MS),
                        time.monotonic() - started))

    waiter = threading.Thread(target=wait)
    waiter.start()
    sent = produce(lab, topic, {"body": "wake up"})
    waiter.join(WAIT_TIMEOUT_MS / 1000 + 5)
    assert outcome and outcome[0][0] is True
    assert outcome[0][1] < WAIT_TIMEOUT_MS / 1000
    queue_id = sent[0]["queue_id"]
    found = consumer.pull(group, topic, queue_id, 0, 32)  # the long poll's answer, kept
    assert [view.body for view in found.messages] == [b"wake up"]
    # the other queue's poll, if any, and this queue's next one (the pull caught up)
    assert consumer.puller.flight_count() <= QUEUES
    assert consumer.pull(group, topic, queue_id, 1, 32).status is (
        GetStatus.OFFSET_OVERFLOW_ONE)


def test_wake_and_cancel_end_a_wait(live_rocketmq, consumers):
    lab = live_rocketmq
    topic = make_topic(lab)
    consumer = consumers.new()
    group = "g_" + topic
    consumer.pull(group, topic, 0, 0, 32)
    positions = {(topic, 0): 0}
    results: list[tuple[bool, float]] = []

    def wait(cancel=None) -> None:
        started = time.monotonic()
        results.append((consumer.wait_for_arrival(positions, WAIT_TIMEOUT_MS, cancel),
                        time.monotonic() - started))

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.5)  # let it park: the wake below must cut a wait in progress
    consumer.wake_waiters()
    waiter.join(10)
    stop = threading.Event()
    canceller = threading.Thread(target=wait, args=(stop.is_set,))
    canceller.start()
    time.sleep(0.5)
    stop.set()
    canceller.join(10)
    assert [woken for woken, _ in results] == [False, False]
    assert all(seconds < 5 for _, seconds in results)
    assert consumer.wait_for_arrival(positions, 300) is False  # a plain timeout


def test_offsets_round_trip_and_consume_from(live_rocketmq, consumers):
    lab = live_rocketmq
    topic = make_topic(lab)
    consumer = consumers.new()
    produce(lab, topic, *({"body": f"m{index}"} for index in range(4)))
    group = "g_" + topic
    assert consumer.query_offset(group, topic, 0) is None
    consumer.commit_offset(group, topic, 0, 1)
    assert consumer.query_offset(group, topic, 0) == 1
    assert consumer.start_offset(group, topic, 0, ConsumeFrom.FIRST) == 1  # committed wins
    other = "h_" + topic
    maxima = [consumer.pull(other, topic, q, 0, 32).max_offset for q in range(QUEUES)]
    assert [consumer.start_offset(other, topic, q, ConsumeFrom.FIRST)
            for q in range(QUEUES)] == [0, 0]
    assert [consumer.start_offset(other, topic, q, ConsumeFrom.TIMESTAMP, 0)
            for q in range(QUEUES)] == [0, 0]
    assert [consumer.start_offset(other, topic, q, ConsumeFrom.TIMESTAMP,
                                  int(time.time() * 1000) + 60_000)
            for q in range(QUEUES)] == maxima
    # a young queue (its first message still in memory) starts a new group at 0, as embedded
    assert [consumer.start_offset(other, topic, q, ConsumeFrom.LAST)
            for q in range(QUEUES)] == [0, 0]


def test_send_back_goes_through_the_retry_topic_to_the_dead_letter_queue(live_rocketmq,
                                                                         consumers):
    lab = live_rocketmq
    topic = make_topic(lab)
    consumer = consumers.new()
    group = "g_" + topic
    me = client_id()
    consumer.register_consumer(group, me, [topic, f"%RETRY%{group}"])
    sent = produce(lab, topic, {"tags": "t", "keys": ["order-1"], "body": "poison"})
    (view,) = pull_all(consumer, group, topic)
    result = consumer.send_back(group, view, delay_level=1, max_reconsume_times=1)
    assert (result.outcome, result.reconsume_count) == (SendBackOutcome.RETRY, 1)
    retry = f"%RETRY%{group}"
    retried = poll_until(consumer, group, retry)
    assert retried.unique_key == sent[0]["msg_id"] and retried.body == b"poison"
    assert retried.reconsume_count == 1 and retried.properties["RETRY_TOPIC"] == topic
    assert retried.properties["ORIGIN_MESSAGE_ID"] in (sent[0]["msg_id"],
                                                        sent[0]["offset_msg_id"])
    dead = consumer.send_back(group, retried, delay_level=0, max_reconsume_times=1)
    assert dead.outcome is SendBackOutcome.DEAD_LETTER
    letter = poll_until(consumer, group, f"%DLQ%{group}")
    assert letter.unique_key == sent[0]["msg_id"] and letter.properties["RETRY_TOPIC"] == topic
    consumer.unregister_consumer(group, me)


def poll_until(consumer: Consuming, group: str, topic: str, timeout_s: float = 60.0):
    """The first message of ``topic`` (any queue) once the broker delivered one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        consumer.routes.invalidate(topic)  # the route appears once the broker created it
        try:
            queue_ids = consumer.routes.route(topic).readable_queue_ids()
        except LookupError:
            queue_ids = []
        for queue_id in queue_ids:
            result = consumer.pull(group, topic, queue_id, 0, 32, suspend_timeout_ms=1_000)
            if result.messages:
                return result.messages[0]
        time.sleep(0.2)
    raise AssertionError(f"nothing arrived in {topic} within {timeout_s} s")


def test_members_see_each_other_and_are_notified(live_rocketmq, consumers):
    lab = live_rocketmq
    topic = make_topic(lab)
    group = "g_" + topic
    first, second = consumers.new(), consumers.new()
    first_id, second_id = client_id(), client_id()
    changed = threading.Event()
    first.add_membership_listener(lambda name: changed.set() if name == group else None)
    first.register_consumer(group, first_id, [topic])
    changed.clear()
    second.register_consumer(group, second_id, [topic])
    assert changed.wait(30), "no NOTIFY_CONSUMER_IDS_CHANGED after the second member joined"
    assert first.consumer_ids(group) == sorted([first_id, second_id])
    changed.clear()
    second.unregister_consumer(group, second_id)
    assert changed.wait(30), "no notice after the second member left"
    assert second.consumer_ids(group) == [first_id]


def test_queue_locks_are_exclusive(live_rocketmq, consumers):
    lab = live_rocketmq
    topic = make_topic(lab)
    group = "g_" + topic
    first, second = consumers.new(), consumers.new()
    first_id, second_id = client_id(), client_id()
    queues = [(topic, 0), (topic, 1)]
    assert first.lock_queues(group, first_id, queues) == set(queues)
    assert second.lock_queues(group, second_id, queues) == set()
    assert first.lock_queues(group, first_id, queues) == set(queues)  # renewal
    first.unlock_queues(group, first_id, [(topic, 0)])
    assert second.lock_queues(group, second_id, queues) == {(topic, 0)}


def test_two_members_sharing_one_client_are_both_listed(live_rocketmq, consumers):
    """RocketMQ's broker keys a group's members by connection: each client id heartbeats over
    connections of its own, so both are members (a shared connection listed only the last)."""
    lab = live_rocketmq
    topic = make_topic(lab)
    group = "g_" + topic
    shared = consumers.new()
    first_id, second_id = client_id(), client_id()
    shared.register_consumer(group, first_id, [topic])
    shared.register_consumer(group, second_id, [topic])
    assert shared.consumer_ids(group) == sorted([first_id, second_id])
    shared.unregister_consumer(group, second_id)
    assert shared.consumer_ids(group) == [first_id]
