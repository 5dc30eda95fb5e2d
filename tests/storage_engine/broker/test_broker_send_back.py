"""``Broker.send_back`` (reference §10.2), dead letters and operator re-sends, on real stores.

A failed message goes to ``%RETRY%group`` through the delay level ``3 + reconsume count`` (or the
caller's level), with ``RETRY_TOPIC``, ``ORIGIN_MESSAGE_ID``, ``WAIT=false`` and reconsume count
+ 1; at the group's max (16) or with ``delay_level < 0`` it goes to ``%DLQ%group`` queue 0,
undelayed. ``resend_dead_letter`` sends a dead letter back to its original topic as a fresh
message. Every broker is verified with ``verify_store`` after the test.
"""

from __future__ import annotations

import pytest

from postbox.storage_engine import (
    Broker,
    FakeClock,
    GetStatus,
    Message,
    MessageNotFoundError,
    MessageView,
    SendBackOutcome,
    SubscriptionGroupConfig,
)
from postbox.storage_engine.broker.dlq_resends import DlqResends
from postbox.storage_engine.contract.send_back import (
    DLQ_REASON_LENGTH_MAX,
    PROPERTY_DLQ_ORIGIN_MESSAGE_ID,
    PROPERTY_DLQ_REASON,
)
from postbox.storage_engine.errors import GroupNotFoundError, NoPermissionError
from postbox.storage_engine.formats import (
    PROPERTY_DELAY,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_WAIT,
)
from postbox.storage_engine.formats.topic_names import DELAY_TOPIC

TOPIC = "orders"
GROUP = "billing"
RETRY = f"%RETRY%{GROUP}"
DLQ = f"%DLQ%{GROUP}"


@pytest.fixture
def broker_topics() -> dict[str, int]:
    """``broker`` (tests/support/brokers.py) with the test topic on one queue."""
    return {TOPIC: 1}


def _consume(broker: Broker, *, reconsume_count: int = 0, topic: str = TOPIC,
             **fields) -> MessageView:
    """Send one message and pull it back as a consumer would see it."""
    message = Message(topic, b"payload", tags="paid", keys=["o-1", "c-9"],
                      properties={"trace": "t-1"}, unique_key="UNIQ-1", flag=7,
                      born_timestamp_ms=1_600_000_000_000, born_host="10.1.2.3:4567",
                      reconsume_count=reconsume_count, **fields)
    receipt = broker.send(message)
    assert broker.store.wait_dispatched()
    result = broker.pull(GROUP, topic, receipt.queue_id, receipt.queue_offset, 1)
    return result.messages[0]


def _stored(broker: Broker, receipt) -> MessageView:
    return broker.store.read_message(receipt.log_position)


def _assert_same_content(copy: MessageView, original: MessageView) -> None:
    assert copy.body == original.body
    assert (copy.tags, copy.keys, copy.unique_key) == (original.tags, original.keys,
                                                       original.unique_key)
    assert copy.flag == original.flag and copy.sys_flag == original.sys_flag
    assert copy.born_timestamp_ms == original.born_timestamp_ms
    assert copy.born_host == original.born_host
    assert copy.properties["trace"] == "t-1"


# ---- retry ---------------------------------------------------------------------------------

def test_first_send_back_goes_to_the_retry_topic_through_delay_level_three(broker: Broker):
    original = _consume(broker)
    properties_before = dict(original.properties)
    result = broker.send_back(GROUP, original)
    assert result.outcome is SendBackOutcome.RETRY and result.reconsume_count == 1
    retry_config = broker.topic_config(RETRY)
    assert (retry_config.read_queue_nums, retry_config.write_queue_nums) == (1, 1)
    assert retry_config.perm == 6
    receipt = result.receipt
    assert (receipt.topic, receipt.queue_id) == (RETRY, 0)
    assert (receipt.stored_topic, receipt.stored_queue_id, receipt.delay_level) == (
        DELAY_TOPIC, 2, 3)
    assert receipt.unique_key == "UNIQ-1"

    copy = _stored(broker, receipt)
    _assert_same_content(copy, original)
    assert copy.reconsume_count == 1
    assert copy.properties[PROPERTY_RETRY_TOPIC] == TOPIC
    assert copy.properties[PROPERTY_ORIGIN_MESSAGE_ID] == original.msg_id
    assert copy.properties[PROPERTY_DELAY] == "3"
    assert copy.properties[PROPERTY_WAIT] == "false"
    assert copy.properties[PROPERTY_REAL_TOPIC] == RETRY
    assert copy.properties[PROPERTY_REAL_QID] == "0"
    assert original.properties == properties_before  # the caller's view is untouched


@pytest.mark.parametrize(("reconsume_count", "delay_level", "expected_level"),
                         [(5, 0, 8), (15, 0, 18), (0, 2, 2), (0, 40, 18)])
def test_retry_delay_level(broker: Broker, reconsume_count: int, delay_level: int,
                           expected_level: int):
    original = _consume(broker, reconsume_count=reconsume_count)
    result = broker.send_back(GROUP, original, delay_level=delay_level)
    assert result.outcome is SendBackOutcome.RETRY
    assert result.receipt.delay_level == expected_level
    assert _stored(broker, result.receipt).reconsume_count == reconsume_count + 1


def test_second_send_back_keeps_the_origin_and_the_first_topic(broker: Broker,
                                                               clock: FakeClock):
    original = _consume(broker)
    broker.send_back(GROUP, original)
    clock.advance(10_000)  # delay level 3
    delivered = broker.pull(GROUP, RETRY, 0, 0, suspend_timeout_ms=5_000)
    assert delivered.status is GetStatus.FOUND
    retried = delivered.messages[0]
    assert retried.topic == RETRY and retried.reconsume_count == 1

    again = broker.send_back(GROUP, retried)
    assert again.outcome is SendBackOutcome.RETRY and again.receipt.delay_level == 4
    copy = _stored(broker, again.receipt)
    assert copy.properties[PROPERTY_ORIGIN_MESSAGE_ID] == original.msg_id
    assert copy.properties[PROPERTY_RETRY_TOPIC] == TOPIC
    assert copy.reconsume_count == 2
    _assert_same_content(copy, original)


# ---- dead letters --------------------------------------------------------------------------

def test_send_back_at_the_max_dead_letters_undelayed(broker: Broker):
    original = _consume(broker, reconsume_count=16)
    result = broker.send_back(GROUP, original)
    assert result.outcome is SendBackOutcome.DEAD_LETTER and result.reconsume_count == 17
    dlq_config = broker.topic_config(DLQ)
    assert (dlq_config.read_queue_nums, dlq_config.perm) == (1, 6)
    receipt = result.receipt
    assert (receipt.topic, receipt.queue_id, receipt.stored_topic) == (DLQ, 0, DLQ)
    assert not receipt.delayed
    copy = _stored(broker, receipt)
    assert PROPERTY_DELAY not in copy.properties
    assert copy.properties[PROPERTY_RETRY_TOPIC] == TOPIC
    assert copy.properties[PROPERTY_ORIGIN_MESSAGE_ID] == original.msg_id
    assert copy.reconsume_count == 17
    assert PROPERTY_DLQ_REASON not in copy.properties
    _assert_same_content(copy, original)
    assert broker.topic_config(RETRY) is not None  # created first, as in RocketMQ


def test_max_reconsume_times_argument_overrides_the_group(broker: Broker):
    assert broker.send_back(GROUP, _consume(broker, reconsume_count=2),
                            max_reconsume_times=3).outcome is SendBackOutcome.RETRY
    assert broker.send_back(GROUP, _consume(broker, reconsume_count=3),
                            max_reconsume_times=3).outcome is SendBackOutcome.DEAD_LETTER


def test_negative_delay_level_dead_letters_at_once_with_a_reason(broker: Broker):
    original = _consume(broker)
    result = broker.send_back(GROUP, original, delay_level=-1,
                              reason="bad\x01input " + "x" * 2000)
    assert result.outcome is SendBackOutcome.DEAD_LETTER
    reason = _stored(broker, result.receipt).properties[PROPERTY_DLQ_REASON]
    assert reason.startswith("bad input x") and len(reason) == DLQ_REASON_LENGTH_MAX


def test_dead_letters_are_readable_and_listed(broker: Broker):
    assert broker.dead_letters(GROUP) == []
    for _ in range(3):
        broker.send_back(GROUP, _consume(broker), delay_level=-1)
    assert broker.store.wait_dispatched()
    pulled = broker.pull(GROUP, DLQ, 0, 0)  # perm 6: consumable like any topic
    assert len(pulled.messages) == 3
    listed = broker.dead_letters(GROUP, 1, 5)
    assert [m.queue_offset for m in listed] == [1, 2]


def test_resend_dead_letter_sends_a_fresh_copy_to_the_group_only(broker: Broker):
    original = _consume(broker, reconsume_count=16)
    broker.send_back(GROUP, original, reason="poison")
    assert broker.store.wait_dispatched()
    dead = broker.dead_letters(GROUP)[0]

    receipt = broker.resend_dead_letter(GROUP, dead.queue_offset)
    retry = f"%RETRY%{GROUP}"
    assert (receipt.topic, receipt.stored_topic) == (retry, retry) and not receipt.delayed
    fresh = _stored(broker, receipt)
    assert fresh.reconsume_count == 0
    assert fresh.properties[PROPERTY_DLQ_ORIGIN_MESSAGE_ID] == dead.msg_id
    assert fresh.properties[PROPERTY_RETRY_TOPIC] == TOPIC  # consumers see the original topic
    [mark] = broker.dlq_resends.marks(GROUP).items()
    assert mark[0] == dead.queue_offset and mark[1].count == 1
    assert mark[1].last_msg_id == receipt.offset_msg_id
    reloaded = DlqResends(broker.store.root_dir / "config", broker.store.clock)
    reloaded.load()  # kept in the store's config: survives a restart
    assert reloaded.marks(GROUP) == broker.dlq_resends.marks(GROUP)
    for name in (PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_DELAY,
                 PROPERTY_REAL_TOPIC, PROPERTY_REAL_QID, PROPERTY_DLQ_REASON, PROPERTY_WAIT):
        assert name not in fresh.properties, name
    assert (fresh.body, fresh.tags, fresh.keys, fresh.unique_key) == (
        original.body, original.tags, original.keys, original.unique_key)
    assert fresh.properties["trace"] == "t-1"
    assert len(broker.dead_letters(GROUP)) == 1  # the DLQ keeps its copy

    with pytest.raises(MessageNotFoundError, match="offset 5"):
        broker.resend_dead_letter(GROUP, 5)


def test_a_dead_letter_is_never_delayed_even_if_the_original_carried_delay(broker: Broker):
    delayed = Message(TOPIC, b"x", properties={PROPERTY_DELAY: "2"})
    view = broker.store.read_message(broker.send(delayed).log_position)  # the delay-topic copy
    assert view.properties[PROPERTY_DELAY] == "2"
    result = broker.send_back(GROUP, view, delay_level=-1)
    assert result.receipt.stored_topic == DLQ and not result.receipt.delayed
    assert PROPERTY_DELAY not in _stored(broker, result.receipt).properties


# ---- groups that cannot retry --------------------------------------------------------------

def test_group_without_retry_queues_discards(broker: Broker):
    broker.tables.subscription_groups.put(
        SubscriptionGroupConfig("no-retry", retry_queue_nums=0))
    result = broker.send_back("no-retry", _consume(broker))
    assert result.outcome is SendBackOutcome.DISCARDED and result.receipt is None
    assert broker.topic_config("%RETRY%no-retry") is None


def test_unknown_group_is_an_error_when_it_cannot_be_created(brokers):
    broker = brokers.open(auto_create_subscription_group=False)
    original = _consume(broker)
    with pytest.raises(GroupNotFoundError, match=GROUP):
        broker.send_back(GROUP, original)


def test_unwritable_retry_topic_refuses_send_back(broker: Broker):
    broker.create_topic(RETRY, 1, perm=4)
    with pytest.raises(NoPermissionError, match="RETRY"):
        broker.send_back(GROUP, _consume(broker))
