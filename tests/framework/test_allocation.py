"""Tests for ``framework.allocation``: RocketMQ's examples (§12.5) and properties of every strategy.

Hypothesis prints the failing example (and ``@reproduce_failure`` with its seed) on a failure.
"""

from __future__ import annotations

import hashlib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.framework.allocation import (
    Averaging,
    ByCircle,
    ConsistentHash,
    MessageQueue,
    averaging_range,
    md5_hash,
    strategy_by_name,
)

GROUP = "group-a"
STRATEGIES = [Averaging(), ByCircle(), ConsistentHash()]


def queues_of(count: int, topic: str = "orders") -> list[MessageQueue]:
    return [MessageQueue(topic, queue_id) for queue_id in range(count)]


def consumer_ids(count: int) -> list[str]:
    return [f"10.0.0.{i}@{1000 + i}" for i in range(count)]  # sorts in index order for i < 10


def allocation_by_id(strategy, queues, ids) -> dict[str, list[MessageQueue]]:
    return {consumer: strategy.allocate(GROUP, consumer, queues, ids) for consumer in ids}


# ---- MessageQueue ------------------------------------------------------------------------

def test_message_queues_sort_by_topic_then_broker_then_queue_id():
    unsorted = [
        MessageQueue("b", 0, "broker-a"),
        MessageQueue("a", 1, "broker-a"),
        MessageQueue("a", 0, "broker-b"),
        MessageQueue("a", 2, "broker-a"),
    ]
    assert sorted(unsorted) == [
        MessageQueue("a", 1, "broker-a"),
        MessageQueue("a", 2, "broker-a"),
        MessageQueue("a", 0, "broker-b"),
        MessageQueue("b", 0, "broker-a"),
    ]


def test_message_queue_is_hashable_frozen_and_defaults_broker_name():
    queue = MessageQueue("orders", 3)
    assert queue.broker_name == "postbox"
    assert queue == MessageQueue("orders", 3, "postbox")
    assert len({queue, MessageQueue("orders", 3)}) == 1
    with pytest.raises(AttributeError):
        queue.queue_id = 4  # type: ignore[misc]


def test_message_queue_java_string_matches_rocketmq_to_string():
    assert MessageQueue("TopicTest", 7, "broker-a").java_string() == (
        "MessageQueue [topic=TopicTest, brokerName=broker-a, queueId=7]")


# ---- averaging and circle: RocketMQ's examples -------------------------------------------

def test_averaging_ten_queues_four_consumers_gives_contiguous_3_3_2_2():
    queues, ids = queues_of(10), consumer_ids(4)
    shares = allocation_by_id(Averaging(), queues, ids)
    assert [[q.queue_id for q in shares[consumer]] for consumer in ids] == [
        [0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]


def test_by_circle_ten_queues_four_consumers():
    queues, ids = queues_of(10), consumer_ids(4)
    shares = allocation_by_id(ByCircle(), queues, ids)
    assert [{q.queue_id for q in shares[consumer]} for consumer in ids] == [
        {0, 4, 8}, {1, 5, 9}, {2, 6}, {3, 7}]


@pytest.mark.parametrize("strategy", [Averaging(), ByCircle()], ids=lambda s: s.name)
def test_fewer_queues_than_consumers_leaves_the_last_consumers_empty(strategy):
    queues, ids = queues_of(3), consumer_ids(5)
    shares = allocation_by_id(strategy, queues, ids)
    assert [[q.queue_id for q in shares[consumer]] for consumer in ids] == [
        [0], [1], [2], [], []]


@pytest.mark.parametrize(("queue_count", "consumer_count", "index", "expected"), [
    (10, 4, 0, (0, 3)), (10, 4, 1, (3, 3)), (10, 4, 2, (6, 2)), (10, 4, 3, (8, 2)),
    (8, 4, 3, (6, 2)), (3, 5, 2, (2, 1)), (3, 5, 3, (6, 0)), (4, 4, 3, (3, 1)),
])
def test_averaging_range_matches_rocketmq_arithmetic(queue_count, consumer_count, index,
                                                     expected):
    assert averaging_range(queue_count, consumer_count, index) == expected


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_unknown_consumer_and_empty_inputs_get_nothing(strategy):
    queues, ids = queues_of(4), consumer_ids(2)
    assert strategy.allocate(GROUP, "stranger", queues, ids) == []
    assert strategy.allocate(GROUP, ids[0], queues, []) == []
    assert strategy.allocate(GROUP, ids[0], [], ids) == []


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_single_consumer_gets_every_queue_in_order(strategy):
    queues = queues_of(6)
    shuffled = random.Random(7).sample(queues, len(queues))
    assert strategy.allocate(GROUP, "only", shuffled, ["only"]) == queues


# ---- properties of every strategy ---------------------------------------------------------

queue_sets = st.sets(
    st.builds(MessageQueue, st.sampled_from(["orders", "payments", "%RETRY%g"]),
              st.integers(0, 31), st.sampled_from(["broker-a", "broker-b", "postbox"])),
    max_size=64,
)
id_sets = st.sets(st.text(min_size=1, max_size=12), min_size=1, max_size=16)


@settings(deadline=None, max_examples=150)
@given(strategy=st.sampled_from(STRATEGIES), queues=queue_sets, ids=id_sets,
       seed=st.randoms(use_true_random=False))
def test_every_queue_goes_to_exactly_one_consumer_whatever_the_input_order(
        strategy, queues, ids, seed):
    queue_list, id_list = sorted(queues), sorted(ids)
    shares = allocation_by_id(strategy, queue_list, id_list)

    owned = [queue for share in shares.values() for queue in share]
    assert len(owned) == len(set(owned)), "a queue was given to two consumers"
    assert set(owned) == queues
    for share in shares.values():
        assert share == sorted(share)

    shuffled_queues = seed.sample(queue_list, len(queue_list))
    shuffled_ids = seed.sample(id_list, len(id_list))
    assert allocation_by_id(strategy, shuffled_queues, shuffled_ids) == shares


@settings(deadline=None, max_examples=100)
@given(queues=queue_sets, ids=id_sets, newcomer=st.text(min_size=1, max_size=12))
def test_consistent_hash_moves_queues_only_to_a_new_consumer(queues, ids, newcomer):
    strategy = ConsistentHash()
    ids.discard(newcomer)
    if not ids:
        return
    before = allocation_by_id(strategy, list(queues), list(ids))
    after = allocation_by_id(strategy, list(queues), [*ids, newcomer])
    for consumer in ids:
        assert set(after[consumer]) <= set(before[consumer])


def test_consistent_hash_adding_a_consumer_moves_a_minority():
    queues, ids = queues_of(64), consumer_ids(8)
    strategy = ConsistentHash()
    before = allocation_by_id(strategy, queues, ids)
    after = allocation_by_id(strategy, queues, [*ids, "10.0.0.99@4242"])
    moved = [queue for consumer in ids for queue in before[consumer]
             if queue not in after[consumer]]
    assert 0 < len(moved) < len(queues) // 2
    assert set(moved) == set(after["10.0.0.99@4242"])


def test_md5_hash_is_the_first_four_digest_bytes_big_endian():
    assert md5_hash("") == 0xD41D8CD9  # MD5("") = d41d8cd98f00b204e9800998ecf8427e
    digest = hashlib.md5(b"client-1-0").digest()
    assert md5_hash("client-1-0") == (digest[0] << 24) | (digest[1] << 16) | (
        digest[2] << 8) | digest[3]


def test_consistent_hash_routes_to_the_first_node_at_or_after_the_queue_hash():
    queues, ids = queues_of(20), ["alpha", "beta", "gamma"]
    strategy = ConsistentHash(virtual_node_count=3)
    ring = sorted((md5_hash(f"{consumer}-{k}"), consumer) for consumer in ids for k in range(3))
    for queue in queues:
        key_hash = md5_hash(queue.java_string())
        expected = next((owner for node, owner in ring if node >= key_hash), ring[0][1])
        assert queue in strategy.allocate(GROUP, expected, queues, ids)


def test_consistent_hash_rejects_zero_virtual_nodes():
    with pytest.raises(ValueError, match="virtual_node_count"):
        ConsistentHash(virtual_node_count=0)


# ---- lookup by name ----------------------------------------------------------------------

@pytest.mark.parametrize(("name", "kind"), [
    ("averaging", Averaging), ("circle", ByCircle), ("consistent_hash", ConsistentHash)])
def test_strategy_by_name(name, kind):
    strategy = strategy_by_name(name)
    assert isinstance(strategy, kind)
    assert strategy.name == name


def test_strategy_by_name_lists_the_choices_for_an_unknown_name():
    with pytest.raises(ValueError, match="'averaging', 'circle', 'consistent_hash'"):
        strategy_by_name("by_machine_room")
