"""Broker limits and what disk pressure may delete (issue 19, items 3 and 4).

* Topics, subscription groups and queues per topic are bounded by ``BrokerConfig`` settings
  (broker.conf ``topicCountMax``, ``subscriptionGroupCountMax``, ``topicQueueCountMax``); the
  error names the setting and nothing is created.
* Creating a topic encodes that topic only (each bean once until it changes), and a table
  nobody changed is not written again — the cost of the n-th creation no longer grows with n.
  (Timing is measured in ``bench/topic_creation_bench.py``, not asserted here.)
* The broker's consumption floor: the lowest position some group still needs (slowest commit,
  a live member that never committed, a queue nobody consumes such as a dead-letter queue).
"""

from __future__ import annotations

import pytest

from postbox.storage_engine import (
    Broker,
    BrokerConfig,
    ConfigError,
    Message,
    RetentionConfig,
    StoreConfig,
)
from postbox.storage_engine.errors import LimitExceededError, TableFullError
from tests.storage_engine.conftest import DiskProbe, small_config


def test_topic_count_is_bounded_and_the_error_names_the_setting(brokers):
    broker = brokers.open(topic_count_max=5)
    for number in range(5):
        broker.create_topic(f"t{number}", 1)
    with pytest.raises(TableFullError, match=r"broker\.topic_count_max") as refused:
        broker.create_topic("one-too-many", 1)
    assert refused.value.setting == "broker.topic_count_max"
    with pytest.raises(TableFullError, match="topicCountMax"):  # auto-creation by a send
        broker.send(Message("auto-created", b"x"))
    assert broker.create_topic("t0", 2).write_queue_nums == 2  # updating is not creating
    assert broker.topic_config("one-too-many") is None
    assert broker.store.max_offset("auto-created", 0) == 0  # nothing was stored


def test_subscription_group_count_is_bounded(brokers):
    broker = brokers.open(subscription_group_count_max=3)
    for number in range(3):
        broker.subscription_group(f"g{number}")
    with pytest.raises(TableFullError, match="subscriptionGroupCountMax") as refused:
        broker.subscription_group("g3")
    assert refused.value.setting == "broker.subscription_group_count_max"
    with pytest.raises(TableFullError):
        broker.register_consumer("g4", "client-1", ["orders"])
    assert broker.subscription_group("g1").group_name == "g1"


def test_queues_per_topic_are_bounded(brokers):
    broker = brokers.open(topic_queue_count_max=16)
    assert broker.create_topic("wide", 16).read_queue_nums == 16
    with pytest.raises(LimitExceededError, match=r"broker\.topic_queue_count_max") as refused:
        broker.create_topic("wider", 17)
    assert refused.value.setting == "broker.topic_queue_count_max"
    with pytest.raises(ConfigError):
        BrokerConfig(topic_count_max=0)


def test_broker_conf_keys_set_the_limits_and_forced_cleaning(tmp_path):
    config = StoreConfig.from_broker_conf({
        "storePathRootDir": str(tmp_path), "topicCountMax": "7",
        "subscriptionGroupCountMax": "8", "topicQueueCountMax": "9",
        "cleanFileForciblyEnable": "true"}, strict=True)
    assert (config.broker.topic_count_max, config.broker.subscription_group_count_max,
            config.broker.topic_queue_count_max) == (7, 8, 9)
    assert config.retention.clean_file_forcibly_enable
    assert not RetentionConfig().clean_file_forcibly_enable  # never the default


def test_creation_encodes_each_topic_once_and_unchanged_tables_are_not_rewritten(brokers):
    """Before: every creation re-encoded every topic (n² beans for n creations) and every
    close rewrote every table, even on a disk with no room left."""
    broker = brokers.open()
    topics = broker.tables.topics
    for number in range(300):
        broker.create_topic(f"topic-{number}", 1)
    assert topics.persist_count == 300  # still durable when create_topic returns
    assert topics.encoded_bean_count == 300
    broker.create_topic("topic-7", 2)  # a change re-encodes that topic only
    assert topics.encoded_bean_count == 301
    written = topics.path.stat().st_mtime_ns
    assert topics.persist() is False  # unchanged: nothing written
    assert topics.path.stat().st_mtime_ns == written and topics.persist_count == 301


def test_consumption_floor_is_what_the_slowest_group_still_needs(open_store, tmp_path, clock):
    probe = DiskProbe()
    store = open_store(small_config(tmp_path / "store", tiny=False), clock=clock,
                       disk_usage=probe, hour_of_day=lambda _now_ms: 12)
    broker = Broker(store, clock=clock)
    try:
        broker.create_topic("orders", 1)
        sent = [broker.send(Message("orders", bytes(300)), queue_id=0) for _ in range(600)]
        assert store.wait_dispatched()
        floor = store.retention.consumption_floor
        assert floor() == sent[0].log_position  # nobody committed: everything is needed
        broker.commit_offset("fast", "orders", 0, 400)
        broker.commit_offset("slow", "orders", 0, 100)
        assert floor() == sent[100].log_position
        broker.register_consumer("new", "client-1", ["orders"])  # live, never committed
        assert floor() == sent[0].log_position
        broker.unregister_consumer("new", "client-1")
        broker.commit_offset("slow", "orders", 0, 600)
        assert floor() == sent[400].log_position
        store.log_flusher.flush(0)
        probe.ratio = 0.86  # above diskSpaceCleanForciblyRatio: clean what was consumed
        while store.retention.run_once(clock.now_ms()):
            pass
        assert sent[400].log_position - 65536 < store.commit_log.min_position
        assert store.commit_log.min_position <= sent[400].log_position
        assert store.retention.kept_unconsumed
        broker.commit_offset("fast", "orders", 0, 600)
        dead = broker.send_back("fast", store.read_message(sent[599].log_position),
                                delay_level=-1)
        assert store.wait_dispatched()
        assert floor() == dead.receipt.log_position  # a dead letter nobody read stays
    finally:
        broker.close()
