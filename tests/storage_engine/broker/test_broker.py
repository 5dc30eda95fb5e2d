"""``Broker`` (DESIGN §3.4) on real stores: topics, queue selection, sends (also delayed), pulls,
offsets and their persistence, consume-from rules, progress, groups and the lifecycle.

Send-back and dead letters are in ``test_broker_send_back.py``, long polling in
``test_long_polling.py``, the consumer registry and queue locks in ``test_broker_consumers.py``.
Every broker is opened by ``BrokerFactory``, which closes it and runs ``verify_store`` after the
test.
"""

from __future__ import annotations

import ast
import json
import threading

import pytest

from postbox.storage_engine import (
    Broker,
    ConfigError,
    ConsumeFrom,
    FakeClock,
    GetStatus,
    InvalidMessageError,
    Message,
    MessageStore,
    QueueProgress,
    StorageError,
    StoreClosedError,
    SubscriptionGroupConfig,
    verify_store,
)
from postbox.storage_engine.broker.config_file import ConfigFileError
from postbox.storage_engine.broker.config_stores import (
    ConfigStores,
    ConsumerOffsetTable,
    DelayOffsetTable,
)
from postbox.storage_engine.contract import PERM_READ, PERM_WRITE
from postbox.storage_engine.contract.rules import sharding_queue
from postbox.storage_engine.errors import (
    GroupNotFoundError,
    InvalidQueueError,
    InvalidTopicError,
    NoPermissionError,
    TopicNotFoundError,
)
from postbox.storage_engine.formats import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    java_string_hashcode,
    topic_names,
)
from postbox.storage_engine.formats.topic_names import DELAY_TOPIC
from tests.storage_engine.conftest import START_MS
from tests.support.brokers import BrokerFactory, broker_config
from tests.support.paths import REPO_ROOT
from tests.support.polling import wait_until

TOPIC = "orders"
GROUP = "billing"


def _send_all(broker: Broker, count: int, topic: str = TOPIC, **send_kwargs) -> list:
    receipts = [broker.send(Message(topic, f"m{i}".encode()), **send_kwargs)
                for i in range(count)]
    assert broker.store.wait_dispatched()
    return receipts


# ---- topics --------------------------------------------------------------------------------

_TOPIC_LITERALS = {"%RETRY%", "%DLQ%", "SCHEDULE_TOPIC_XXXX", "TBW102", "RMQ_SYS_",
                   "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_", "%SYS%", "%LMQ%"}
_PACKAGES = ("storage_engine", "network", "broker_node", "framework", "outbox", "idempotency",
             "spark_reconcile", "postbox", "bench")


def test_internal_topic_names_are_declared_in_formats_topic_names_only():
    """Every room takes the broker's internal names from ``formats.topic_names``: a string
    constant equal to one of them anywhere else is a second declaration that may drift."""
    declared_at = REPO_ROOT / "storage_engine" / "formats" / "topic_names.py"
    found = [f"{path.relative_to(REPO_ROOT)}:{node.lineno}: {node.value!r}"
             for package in _PACKAGES for path in sorted((REPO_ROOT / package).rglob("*.py"))
             if path != declared_at
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Constant) and node.value in _TOPIC_LITERALS]
    assert found == []


def test_internal_topic_rules_broker_refusal_is_narrower_than_namespace_exemption():
    assert topic_names.retry_topic("g") == "%RETRY%g" and topic_names.is_retry_topic("%RETRY%g")
    assert topic_names.dead_letter_topic("g") == "%DLQ%g"
    assert topic_names.is_dead_letter_topic("%DLQ%g") and not topic_names.is_retry_topic("%DLQ%g")
    assert topic_names.TRANSACTION_HALF_TOPIC == "RMQ_SYS_TRANS_HALF_TOPIC"
    # the broker refuses sends to its own topics (case-sensitive RMQ_SYS_, as RocketMQ) ...
    for topic in (DELAY_TOPIC, topic_names.TRANSACTION_HALF_TOPIC):
        assert topic_names.is_internal_topic(topic) and topic_names.is_system_resource(topic)
    # ... while a client keeps every broker-owned name out of its namespace
    for name in ("rmq_sys_x", "%SYS%x", topic_names.AUTO_CREATE_TOPIC, "OFFSET_MOVED_EVENT"):
        assert topic_names.is_system_resource(name) and not topic_names.is_internal_topic(name)
    assert topic_names.is_system_group("CID_RMQ_SYS_TRANS") and not topic_names.is_system_group("g")


def test_send_auto_creates_topic_with_default_queues_and_persists_it(brokers: BrokerFactory):
    broker = brokers.open("a")
    receipt = broker.send(Message(TOPIC, b"x"))
    config = broker.topic_config(TOPIC)
    assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (8, 8, 6)
    assert broker.queue_ids(TOPIC) == list(range(8))
    assert receipt.topic == receipt.stored_topic == TOPIC and not receipt.delayed
    topics_file = broker.store.root_dir / "config" / "topics.json"
    assert TOPIC in json.loads(topics_file.read_text())["topicConfigTable"]  # on disk at once
    root_config = broker.store.config
    broker.close()

    reopened = brokers.open(config=root_config)
    assert reopened.topic_config(TOPIC) == config
    assert reopened.queue_ids("unknown") == []


def test_create_topic_validates_updates_and_refuses_the_delay_topic(broker: Broker):
    created = broker.create_topic("payments", 4, order=True)
    assert (created.read_queue_nums, created.write_queue_nums, created.order) == (4, 4, True)
    updated = broker.create_topic("payments", 2, perm=PERM_READ)
    assert (updated.write_queue_nums, updated.perm) == (2, PERM_READ)
    assert broker.topic_config("payments") == updated
    with pytest.raises(InvalidTopicError, match="a/b"):
        broker.create_topic("a/b")
    with pytest.raises(InvalidTopicError, match=DELAY_TOPIC):
        broker.create_topic(DELAY_TOPIC)
    with pytest.raises(ConfigError, match="queue_count"):
        broker.create_topic("zero", 0)
    with pytest.raises(ConfigError, match="perm"):
        broker.create_topic("bad-perm", 1, perm=99)


def test_unknown_topic_is_refused_when_auto_create_is_off(brokers: BrokerFactory):
    broker = brokers.open(auto_create_topic=False)
    with pytest.raises(TopicNotFoundError, match="auto_create_topic") as error:
        broker.send(Message(TOPIC, b"x"))
    assert isinstance(error.value, StorageError)
    broker.create_topic(TOPIC, 2)
    assert broker.send(Message(TOPIC, b"x")).queue_id == 0


def test_sending_to_the_delay_topic_directly_is_refused(broker: Broker):
    with pytest.raises(InvalidTopicError, match="DELAY property"):
        broker.send(Message(DELAY_TOPIC, b"x"))


def test_topic_without_write_perm_refuses_sends_and_without_read_perm_refuses_pulls(
        broker: Broker):
    broker.create_topic("read-only", 2, perm=PERM_READ)
    with pytest.raises(NoPermissionError, match="read-only"):
        broker.send(Message("read-only", b"x"))
    assert broker.pull(GROUP, "read-only", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE

    broker.create_topic("write-only", 2, perm=PERM_WRITE)
    broker.send(Message("write-only", b"x"))
    with pytest.raises(NoPermissionError, match="write-only"):
        broker.pull(GROUP, "write-only", 0, 0)


def test_group_with_consume_disabled_may_not_pull(broker: Broker):
    broker.tables.subscription_groups.put(
        SubscriptionGroupConfig("paused", consume_enable=False))
    with pytest.raises(NoPermissionError, match="consume_enable"):
        broker.pull("paused", TOPIC, 0, 0)


# ---- queue selection -----------------------------------------------------------------------

def test_round_robin_spreads_sends_evenly_across_threads(broker: Broker):
    broker.create_topic(TOPIC, 4)

    def send_many():
        for _ in range(25):
            broker.send(Message(TOPIC, b"x"))

    threads = [threading.Thread(target=send_many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert broker.store.wait_dispatched()
    assert [broker.store.max_offset(TOPIC, q) for q in range(4)] == [25, 25, 25, 25]


def test_sharding_key_picks_a_stable_queue_from_the_java_hash(broker: Broker):
    broker.create_topic(TOPIC, 5)
    for key in ("order-1", "order-2", "客户-7", ""):
        expected = abs(java_string_hashcode(key)) % 5
        queues = {broker.send(Message(TOPIC, b"x"), sharding_key=key).queue_id
                  for _ in range(3)}
        assert queues == {expected}
    # Java's Math.abs(Integer.MIN_VALUE) stays negative; Postbox maps that hash to queue 0
    assert java_string_hashcode("polygenelubricants") == -(1 << 31)
    assert sharding_queue("polygenelubricants", 5) == 0
    assert broker.send(Message(TOPIC, b"x"), sharding_key="polygenelubricants").queue_id == 0


def test_explicit_queue_id_must_be_below_write_queue_nums(broker: Broker):
    broker.create_topic(TOPIC, 4)
    assert broker.send(Message(TOPIC, b"x"), queue_id=3).queue_id == 3
    for bad in (4, -1, "1"):
        with pytest.raises(InvalidQueueError, match="queue id"):
            broker.send(Message(TOPIC, b"x"), queue_id=bad)


def test_a_batch_lands_whole_in_one_queue_at_consecutive_offsets(broker: Broker):
    broker.create_topic(TOPIC, 4)
    broker.send(Message(TOPIC, b"before"), queue_id=2)
    batch = [Message(TOPIC, f"b{i}".encode(), keys=[f"k{i}"], unique_key=f"U{i}")
             for i in range(5)]
    results = broker.send_batch(batch, queue_id=2)
    assert [(r.queue_id, r.queue_offset) for r in results] == [(2, n) for n in range(1, 6)]
    assert [r.unique_key for r in results] == [f"U{i}" for i in range(5)]
    assert broker.store.wait_dispatched()
    pulled = broker.pull(GROUP, TOPIC, 2, 1, 32)
    assert [view.body for view in pulled.messages] == [f"b{i}".encode() for i in range(5)]
    assert [view.msg_id for view in pulled.messages] == [r.offset_msg_id for r in results]
    keyed = broker.send_batch([Message(TOPIC, b"s")] * 2, sharding_key="order-9")
    assert {r.queue_id for r in keyed} == {sharding_queue("order-9", 4)}
    picked = broker.send_batch([Message(TOPIC, b"r")] * 3)  # round-robin picks once
    assert len({r.queue_id for r in picked}) == 1
    assert [r.queue_offset for r in picked] == list(range(picked[0].queue_offset,
                                                          picked[0].queue_offset + 3))


@pytest.mark.parametrize(("batch", "problem"), [
    ([], "at least one message"),
    ([Message(TOPIC, b"a"), Message("other", b"b")], "one topic"),
    ([Message(TOPIC, b"a"), Message(TOPIC, b"b", properties={PROPERTY_DELAY: "2"})],
     "delayed"),
    ([Message(TOPIC, b"a"), Message(TOPIC, b"")], "empty"),
])
def test_a_refused_batch_stores_nothing(broker: Broker, batch, problem):
    broker.create_topic(TOPIC, 1)
    with pytest.raises(InvalidMessageError, match=problem):
        broker.send_batch(batch)
    assert broker.store.wait_dispatched()
    assert broker.store.max_offset(TOPIC, 0) == 0
    assert broker.topic_config("other") is None


# ---- delayed sends -------------------------------------------------------------------------

def test_delayed_send_is_diverted_without_touching_the_callers_message(broker: Broker):
    broker.create_topic(TOPIC, 2)
    properties = {PROPERTY_DELAY: "3", "trace": "t-1"}
    message = Message(TOPIC, b"later", tags="a", properties=properties)
    receipt = broker.send(message, queue_id=1)
    assert (receipt.topic, receipt.queue_id) == (TOPIC, 1)
    assert (receipt.stored_topic, receipt.stored_queue_id, receipt.delay_level) == (
        DELAY_TOPIC, 2, 3)
    assert receipt.delayed
    assert message.topic == TOPIC and message.properties is properties
    assert properties == {PROPERTY_DELAY: "3", "trace": "t-1"}
    stored = broker.store.read_message(receipt.log_position)
    assert stored.properties[PROPERTY_REAL_TOPIC] == TOPIC
    assert stored.properties[PROPERTY_REAL_QID] == "1"


@pytest.mark.parametrize(("delay", "level"), [("99", 18), ("0", 0), ("-2", 0), ("soon", 0)])
def test_delay_level_is_clamped_and_non_positive_means_not_delayed(broker: Broker, delay: str,
                                                                   level: int):
    receipt = broker.send(Message(TOPIC, b"x", properties={PROPERTY_DELAY: delay}))
    assert receipt.delay_level == level
    assert receipt.stored_topic == (DELAY_TOPIC if level else TOPIC)
    if level:
        assert receipt.stored_queue_id == level - 1


def test_delayed_message_reaches_its_queue_once_due(broker: Broker, clock: FakeClock):
    broker.create_topic(TOPIC, 1)
    broker.send(Message(TOPIC, b"later", properties={PROPERTY_DELAY: "1"}))  # level 1 = 1 s
    assert broker.store.wait_dispatched()
    assert broker.pull(GROUP, TOPIC, 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    clock.advance(1_000)
    result = broker.pull(GROUP, TOPIC, 0, 0, suspend_timeout_ms=5_000)
    assert result.status is GetStatus.FOUND
    assert [m.body for m in result.messages] == [b"later"]


# ---- pull ----------------------------------------------------------------------------------

def test_pull_statuses(broker: Broker):
    broker.create_topic(TOPIC, 1)
    _send_all(broker, 3)
    found = broker.pull(GROUP, TOPIC, 0, 0, 2)
    assert (found.status, len(found.messages), found.next_offset) == (GetStatus.FOUND, 2, 2)
    assert broker.pull(GROUP, TOPIC, 0, 3).status is GetStatus.OFFSET_OVERFLOW_ONE
    badly = broker.pull(GROUP, TOPIC, 0, 7)
    assert badly.status is GetStatus.OFFSET_OVERFLOW_BADLY
    assert broker.pull(GROUP, "never-sent", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE


def test_pull_filters_tags_with_or_expressions(broker: Broker):
    broker.create_topic(TOPIC, 1)
    for tag in ("a", "b", "c", "a"):
        broker.send(Message(TOPIC, tag.encode(), tags=tag))
    assert broker.store.wait_dispatched()
    result = broker.pull(GROUP, TOPIC, 0, 0, tags="a || b")
    assert [m.tags for m in result.messages] == ["a", "b", "a"]
    none = broker.pull(GROUP, TOPIC, 0, 0, tags="z")
    assert (none.status, none.next_offset) == (GetStatus.NO_MATCHED_MESSAGE, 4)


def test_pull_rejects_invalid_arguments_naming_the_value(broker: Broker):
    broker.create_topic(TOPIC, 2)
    with pytest.raises(InvalidMessageError, match="-1"):
        broker.pull(GROUP, TOPIC, 0, -1)
    with pytest.raises(InvalidQueueError, match="queue id 2"):
        broker.pull(GROUP, TOPIC, 2, 0)
    with pytest.raises(InvalidMessageError, match="'bad group'"):
        broker.pull("bad group", TOPIC, 0, 0)
    with pytest.raises(InvalidTopicError):
        broker.pull(GROUP, "a.b", 0, 0)
    with pytest.raises(InvalidMessageError, match="max_count"):
        broker.pull(GROUP, TOPIC, 0, 0, 0)


# ---- offsets -------------------------------------------------------------------------------

def test_commit_and_query_offsets_overwrite_without_a_monotonic_check(broker: Broker):
    broker.create_topic(TOPIC, 2)
    assert broker.query_offset(GROUP, TOPIC, 1) is None
    broker.commit_offset(GROUP, TOPIC, 1, 10)
    broker.commit_offset(GROUP, TOPIC, 1, 4)  # a reset backwards is accepted (RocketMQ)
    assert broker.query_offset(GROUP, TOPIC, 1) == 4
    with pytest.raises(InvalidMessageError, match="-5"):
        broker.commit_offset(GROUP, TOPIC, 1, -5)
    with pytest.raises(InvalidQueueError, match="queue id 2"):
        broker.commit_offset(GROUP, TOPIC, 2, 0)


def _persisted_offset(broker: Broker, topic: str, group: str, queue_id: int) -> int | None:
    table = ConsumerOffsetTable(broker.store.root_dir / "config")
    table.load()
    return table.query(topic, group, queue_id)


def test_offsets_are_persisted_by_the_service_schedule_and_at_close(brokers: BrokerFactory,
                                                                      clock: FakeClock):
    broker = brokers.open()
    broker.persist_service.stop()  # the test drives run_once
    broker.commit_offset(GROUP, TOPIC, 0, 7)
    interval_ms = broker.store.config.broker.consumer_offset_persist_interval_ms
    assert broker.persist_service.run_once(clock.now_ms() + interval_ms - 1) == 0
    assert _persisted_offset(broker, TOPIC, GROUP, 0) is None
    assert broker.persist_service.run_once(clock.now_ms() + interval_ms) >= 1
    assert _persisted_offset(broker, TOPIC, GROUP, 0) == 7

    broker.commit_offset(GROUP, TOPIC, 0, 9)  # only in memory until close
    config = broker.store.config
    broker.close()
    broker.close()  # idempotent
    assert brokers.open(config=config).query_offset(GROUP, TOPIC, 0) == 9


def test_delay_progress_is_persisted_on_its_own_schedule(broker: Broker, clock: FakeClock):
    broker.persist_service.stop()  # the test drives run_once
    opened_ms = clock.now_ms()
    broker.create_topic(TOPIC, 1)
    broker.send(Message(TOPIC, b"later", properties={PROPERTY_DELAY: "1"}))
    clock.advance(1_000)
    assert broker.pull(GROUP, TOPIC, 0, 0, suspend_timeout_ms=5_000).status is GetStatus.FOUND
    delay_offsets = broker.tables.delay_offsets
    assert wait_until(lambda: delay_offsets.get(1) == 1)  # the cursor moves after the put
    path = broker.store.root_dir / "config" / "delayOffset.json"
    interval_ms = broker.store.config.broker.delay_offset_persist_interval_ms
    broker.persist_service.run_once(opened_ms + interval_ms - 1)
    assert not path.exists()
    broker.persist_service.run_once(opened_ms + interval_ms)
    on_disk = DelayOffsetTable(path.parent)
    on_disk.load()
    assert on_disk.levels() == {1: 1}


def test_start_offset_prefers_the_committed_offset(broker: Broker):
    broker.create_topic(TOPIC, 1)
    _send_all(broker, 3)
    broker.commit_offset(GROUP, TOPIC, 0, 1)
    for mode in ConsumeFrom:
        assert broker.start_offset(GROUP, TOPIC, 0, mode) == 1


def test_start_offset_on_retry_topics(broker: Broker):
    retry = f"%RETRY%{GROUP}"
    _send_all(broker, 3, topic=retry)
    assert broker.topic_config(retry).read_queue_nums == 1
    assert broker.start_offset(GROUP, retry, 0, ConsumeFrom.LAST) == 0
    assert broker.start_offset(GROUP, retry, 0, ConsumeFrom.FIRST) == 0
    assert broker.start_offset(GROUP, retry, 0, ConsumeFrom.TIMESTAMP, START_MS) == 3


def test_start_offset_last_starts_a_young_queue_at_zero(broker: Broker):
    broker.create_topic(TOPIC, 2)
    _send_all(broker, 4, queue_id=0)
    assert broker.start_offset(GROUP, TOPIC, 0, ConsumeFrom.LAST) == 0  # still "in memory"
    assert broker.start_offset(GROUP, TOPIC, 1, ConsumeFrom.LAST) == 0  # no message yet
    assert broker.start_offset(GROUP, "unknown", 0, ConsumeFrom.LAST) == 0
    assert broker.start_offset(GROUP, TOPIC, 0, ConsumeFrom.FIRST) == 0


def test_start_offset_last_skips_to_the_end_when_the_queue_is_not_in_memory(
        brokers: BrokerFactory):
    broker = brokers.open(memory_bytes=1)  # 40 % of one byte: nothing is "in memory"
    broker.create_topic(TOPIC, 1)
    _send_all(broker, 4)
    assert broker.start_offset(GROUP, TOPIC, 0, ConsumeFrom.LAST) == 4
    assert broker.start_offset(GROUP, TOPIC, 0, ConsumeFrom.FIRST) == 0


def test_start_offset_by_timestamp(broker: Broker, clock: FakeClock):
    broker.create_topic(TOPIC, 1)
    _send_all(broker, 3)
    clock.advance(40 * 60 * 1000)
    later_ms = clock.now_ms()
    _send_all(broker, 2)
    clock.advance(1_000)
    assert broker.start_offset(GROUP, TOPIC, 0, ConsumeFrom.TIMESTAMP, START_MS) == 0
    assert broker.start_offset(GROUP, TOPIC, 0, ConsumeFrom.TIMESTAMP, later_ms) == 3
    # no timestamp: now - 30 min, which lies between the two batches
    assert broker.start_offset(GROUP, TOPIC, 0, ConsumeFrom.TIMESTAMP) == 3


def test_start_offset_rejects_a_bad_mode(broker: Broker):
    with pytest.raises(InvalidMessageError, match="ConsumeFrom"):
        broker.start_offset(GROUP, TOPIC, 0, "last")


# ---- groups and progress -------------------------------------------------------------------

def test_subscription_group_is_created_with_defaults_and_persisted(broker: Broker):
    config = broker.subscription_group(GROUP)
    assert (config.retry_max_times, config.retry_queue_nums) == (16, 1)
    path = broker.store.root_dir / "config" / "subscriptionGroup.json"
    assert GROUP in json.loads(path.read_text())["subscriptionGroupTable"]
    assert broker.subscription_group(GROUP) is config
    with pytest.raises(InvalidMessageError, match="'a@b'"):
        broker.subscription_group("a@b")


def test_subscription_group_is_not_created_when_auto_creation_is_off(brokers: BrokerFactory):
    broker = brokers.open(auto_create_subscription_group=False)
    with pytest.raises(GroupNotFoundError, match="auto_create_subscription_group"):
        broker.subscription_group(GROUP)


def test_consumer_progress_covers_committed_and_subscribed_topics(broker: Broker):
    broker.create_topic(TOPIC, 2)
    broker.create_topic("audit", 1)
    _send_all(broker, 3, queue_id=0)
    _send_all(broker, 2, topic="audit")
    broker.commit_offset(GROUP, TOPIC, 0, 1)
    broker.register_consumer(GROUP, "client-1", ["audit"])
    progress = broker.consumer_progress(GROUP)
    assert progress == [
        QueueProgress(f"%RETRY%{GROUP}", 0, None, 0, 0),  # created by the heartbeat
        QueueProgress("audit", 0, None, 0, 2),
        QueueProgress(TOPIC, 0, 1, 0, 3),
        QueueProgress(TOPIC, 1, None, 0, 0),
    ]
    assert [row.lag for row in progress] == [0, 2, 2, 0]


def test_consumer_groups_come_from_offsets_groups_and_members(broker: Broker):
    broker.commit_offset("from-offsets", TOPIC, 0, 1)
    broker.subscription_group("from-table")
    broker.register_consumer("from-registry", "c1", [TOPIC])
    broker.commit_offset("from-table", TOPIC, 0, 1)
    assert broker.consumer_groups() == ["from-offsets", "from-registry", "from-table"]


# ---- lifecycle -----------------------------------------------------------------------------

def test_broker_over_a_callers_store_leaves_it_open(open_store, config, clock: FakeClock):
    store: MessageStore = open_store(broker_config(config.root_dir), clock=clock)
    with Broker(store) as broker:
        broker.create_topic(TOPIC, 1)
        broker.send(Message(TOPIC, b"x"))
        assert broker.store is store
    with pytest.raises(StoreClosedError, match="closed"):
        broker.send(Message(TOPIC, b"y"))
    assert store.wait_dispatched()
    assert [m.body for m in store.get_message(GROUP, TOPIC, 0, 0).messages] == [b"x"]


def _file_digests(root) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file() and path.name != "lock"}


def test_a_garbled_config_table_refuses_the_broker_open_and_nothing_changes(
        brokers: BrokerFactory, clock: FakeClock):
    broker = brokers.open("held")
    broker.send(Message(TOPIC, b"kept"))
    broker.commit_offset(GROUP, TOPIC, 0, 1)
    root, config = broker.store.root_dir, broker.store.config
    broker.close()
    assert verify_store(root, config) == []
    for name in ("topics.json", "topics.json.bak"):
        (root / "config" / name).write_bytes(b'{"topicConfigTable":{')
    before = _file_digests(root)

    with pytest.raises(ConfigFileError, match=r"topics\.json"):
        Broker.open(config, clock=clock)
    assert _file_digests(root) == before  # no recovery, no abort marker, no table rewritten
    with MessageStore.open(config, clock=clock) as store:  # the store alone needs no table
        assert store.max_offset(TOPIC, 0) == 1
    assert (root / "config" / "topics.json").read_bytes() == b'{"topicConfigTable":{'


def test_a_store_alone_neither_reads_nor_writes_the_broker_tables(open_store, tmp_path,
                                                                   clock: FakeClock):
    root = tmp_path / "alone"
    store = open_store(broker_config(root), clock=clock)
    store.put_message(Message(TOPIC, b"x"))
    store.close()
    assert not (root / "config").exists()
    with Broker.open(broker_config(root), clock=clock) as broker:
        assert broker.tables.topics.get(TOPIC) is None  # the store alone created no topic
        broker.commit_offset(GROUP, TOPIC, 0, 1)
    assert ConfigStores.open(root).consumer_offsets.query(TOPIC, GROUP, 0) == 1


def test_services_run_while_open_and_stop_at_close(brokers: BrokerFactory):
    broker = brokers.open()
    assert broker.persist_service.is_running and broker.delay_service.is_running
    broker.close()
    assert not broker.persist_service.is_running and not broker.delay_service.is_running
