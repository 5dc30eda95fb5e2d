"""``DelayService`` and ``schedule_delayed`` (reference §11.1) on a real store.

Levels are in milliseconds ("100ms 200ms 300ms") and every test but the last drives
``run_once`` with the store's ``FakeClock``; the last one starts the real thread on the system
clock. Diverted messages are put with ``store.put_message`` exactly as the broker's send path
will, so the deliver time in the consume queue comes from the real dispatch.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path

import pytest

from postbox.storage_engine import (
    DelayConfig,
    DiskFullError,
    Message,
    MessageStore,
)
from postbox.storage_engine.broker.config_stores import CONFIG_DIR_NAME, DelayOffsetTable
from postbox.storage_engine.broker.delay_service import (
    DELIVER_BATCH_MAX,
    WAIT_MAX_MS,
    DelayService,
    schedule_delayed,
)
from postbox.storage_engine.config import parse_delay_levels
from postbox.storage_engine.formats import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_WAIT,
)
from postbox.storage_engine.formats.topic_names import DELAY_TOPIC
from tests.storage_engine.conftest import DiskProbe, put_all, read_queue, small_config
from tests.support.polling import wait_until

LEVELS_MS = parse_delay_levels("100ms 200ms 300ms")
TOPIC = "orders"


def delay_config(root: Path, **fields):
    return small_config(root, delay=DelayConfig(levels_ms=LEVELS_MS), **fields)


@pytest.fixture
def dstore(open_store, tmp_path, clock) -> MessageStore:
    """A tiny store with the millisecond levels, on the fake clock."""
    return open_store(delay_config(tmp_path / "store"), clock=clock)


_DELAY_TABLES: weakref.WeakKeyDictionary[MessageStore, DelayOffsetTable] = (
    weakref.WeakKeyDictionary())


def delay_offsets(store: MessageStore) -> DelayOffsetTable:
    """The store's ``delayOffset.json`` table, loaded once per open store (the broker's job)."""
    table = _DELAY_TABLES.get(store)
    if table is None:
        table = _DELAY_TABLES[store] = DelayOffsetTable(store.root_dir / CONFIG_DIR_NAME,
                                                        clock=store.clock)
        table.load()
    return table


def service_for(store: MessageStore, clock) -> DelayService:
    return DelayService(store, delay_offsets(store), LEVELS_MS, clock)


def delayed(body: bytes, level: int | str, *, topic: str = TOPIC, **fields) -> Message:
    properties = {PROPERTY_DELAY: str(level), **fields.pop("properties", {})}
    return Message(topic, body, properties=properties, **fields)


def divert(store: MessageStore, message: Message, queue_id: int = 0) -> int:
    """Put ``message`` the way the send path does; return its clamped level."""
    diverted = schedule_delayed(message, queue_id, LEVELS_MS)
    assert diverted is not None
    schedule_message, schedule_queue_id, level = diverted
    put_all(store, [schedule_message], schedule_queue_id)
    return level


def run(service: DelayService, store: MessageStore, now_ms: int) -> int:
    """One run, then wait until what it delivered is dispatched."""
    delivered = service.run_once(now_ms)
    assert store.wait_dispatched()
    return delivered


# ---- schedule_delayed ------------------------------------------------------------------------

def test_schedule_delayed_copies_everything_and_adds_the_real_destination():
    original = Message(TOPIC, b"body", tags="TagA", keys=["k1", "k2"], unique_key="U1",
                       properties={PROPERTY_DELAY: "2", "custom": "v"}, flag=7,
                       born_timestamp_ms=123, born_host="10.0.0.1:5000", reconsume_count=2,
                       sys_flag=0x8)
    diverted, queue_id, level = schedule_delayed(original, 5, LEVELS_MS)
    assert (queue_id, level) == (1, 2)
    assert diverted.topic == DELAY_TOPIC
    assert diverted.properties == {PROPERTY_DELAY: "2", "custom": "v", PROPERTY_REAL_TOPIC: TOPIC,
                                   PROPERTY_REAL_QID: "5"}
    assert (diverted.body, diverted.tags, diverted.keys_list(), diverted.unique_key) == (
        b"body", "TagA", ["k1", "k2"], "U1")
    assert (diverted.flag, diverted.born_timestamp_ms, diverted.born_host,
            diverted.reconsume_count, diverted.sys_flag) == (7, 123, "10.0.0.1:5000", 2, 0x8)
    assert original.topic == TOPIC and original.properties == {PROPERTY_DELAY: "2",
                                                               "custom": "v"}


def test_schedule_delayed_clamps_the_level_to_the_last_one():
    diverted, queue_id, level = schedule_delayed(delayed(b"x", 7), 0, LEVELS_MS)
    assert (queue_id, level, diverted.properties[PROPERTY_DELAY]) == (2, 3, "3")


@pytest.mark.parametrize(("properties", "sys_flag"), [
    (None, 0), ({}, 0), ({PROPERTY_DELAY: "0"}, 0), ({PROPERTY_DELAY: "-1"}, 0),
    ({PROPERTY_DELAY: "soon"}, 0), ({PROPERTY_DELAY: ""}, 0),
    ({PROPERTY_DELAY: "1"}, 0x4),  # prepared transaction
    ({PROPERTY_DELAY: "1"}, 0xC),  # rolled back
])
def test_schedule_delayed_leaves_undelayed_messages_alone(properties, sys_flag):
    message = Message(TOPIC, b"x", properties=properties, sys_flag=sys_flag)
    assert schedule_delayed(message, 0, LEVELS_MS) is None
    assert message.properties == properties


# ---- delivery --------------------------------------------------------------------------------

def test_nothing_is_delivered_before_the_deliver_time(dstore, clock):
    service = service_for(dstore, clock)
    divert(dstore, delayed(b"hello", 1, tags="TagA", keys="k1 k2", unique_key="UNIQ-1",
                           properties={"custom": "v", "TIMER_DELAY_SEC": "9"}, flag=3,
                           born_host="10.1.2.3:4567", reconsume_count=1), queue_id=2)
    start = clock.now_ms()
    assert run(service, dstore, start) == 0
    assert run(service, dstore, start + 99) == 0
    assert dstore.max_offset(TOPIC, 2) == 0
    assert service.pending_count() == 1

    assert run(service, dstore, start + 100) == 1
    (view,) = read_queue(dstore, TOPIC, 2)
    assert (view.body, view.tags, view.keys, view.unique_key, view.flag) == (
        b"hello", "TagA", ["k1", "k2"], "UNIQ-1", 3)
    assert (str(view.born_host), view.reconsume_count) == ("10.1.2.3:4567", 1)
    properties = view.properties
    assert properties[PROPERTY_REAL_TOPIC] == TOPIC and properties[PROPERTY_REAL_QID] == "2"
    assert properties["custom"] == "v" and properties[PROPERTY_WAIT] == "false"
    assert PROPERTY_DELAY not in properties and "TIMER_DELAY_SEC" not in properties
    assert service.pending_count() == 0
    assert service.cursor(1) == 1 and delay_offsets(dstore).get(1) == 1
    assert service.lateness_ms_samples() == [0]
    assert run(service, dstore, start + 1000) == 0  # delivered once
    assert dstore.max_offset(TOPIC, 2) == 1


def test_a_late_run_delivers_and_records_the_lateness(dstore, clock):
    service = service_for(dstore, clock)
    divert(dstore, delayed(b"a", 2))
    assert run(service, dstore, clock.now_ms() + 250) == 1
    assert service.lateness_ms_samples() == [50]


def test_the_level_is_clamped_on_the_way_in(dstore, clock):
    service = service_for(dstore, clock)
    assert divert(dstore, delayed(b"seven", 7)) == 3
    assert dstore.max_offset(DELAY_TOPIC, 2) == 1
    start = clock.now_ms()
    assert run(service, dstore, start + 299) == 0
    assert run(service, dstore, start + 300) == 1
    assert [v.body for v in read_queue(dstore, TOPIC)] == [b"seven"]
    assert service.cursors() == {1: 0, 2: 0, 3: 1}


def test_order_within_a_level_is_kept_and_each_waits_for_its_own_time(dstore, clock):
    service = service_for(dstore, clock)
    start = clock.now_ms()
    for index in range(5):
        divert(dstore, delayed(b"m%d" % index, 1))
        clock.advance(10)
    assert run(service, dstore, start + 120) == 3  # stored at +0, +10, +20
    assert run(service, dstore, start + 139) == 1
    assert run(service, dstore, start + 140) == 1
    assert [v.body for v in read_queue(dstore, TOPIC)] == [b"m0", b"m1", b"m2", b"m3", b"m4"]


def test_levels_are_independent(dstore, clock):
    service = service_for(dstore, clock)
    start = clock.now_ms()
    divert(dstore, delayed(b"slow", 3))
    divert(dstore, delayed(b"fast", 1))
    assert run(service, dstore, start + 100) == 1
    assert run(service, dstore, start + 300) == 1
    assert [v.body for v in read_queue(dstore, TOPIC)] == [b"fast", b"slow"]


def test_a_deliver_time_beyond_now_plus_the_delay_is_clock_skew_and_delivered_now(dstore,
                                                                                   clock):
    service = service_for(dstore, clock)
    divert(dstore, delayed(b"skewed", 1))
    # The service's clock is 10 s behind the store's: the deliver time (store time + 100 ms)
    # lies beyond its now + 100 ms, so it is corrected to now.
    assert run(service, dstore, clock.now_ms() - 10_000) == 1
    assert [v.body for v in read_queue(dstore, TOPIC)] == [b"skewed"]
    assert service.lateness_ms_samples() == [0]


def test_a_run_handles_at_most_the_batch_limit_per_level(open_store, tmp_path, clock):
    store = open_store(delay_config(tmp_path / "store", tiny=False), clock=clock)
    service = service_for(store, clock)
    count = DELIVER_BATCH_MAX + 10
    put_all(store, [schedule_delayed(delayed(b"%d" % i, 1), 0, LEVELS_MS)[0]
                    for i in range(count)])
    now = clock.now_ms() + 100
    assert run(service, store, now) == DELIVER_BATCH_MAX
    assert service.interval_ms == 1  # more is due: the thread comes back at once
    assert run(service, store, now) == 10
    assert store.max_offset(TOPIC, 0) == count


def test_the_wait_runs_to_the_next_deliver_time(dstore, clock):
    service = service_for(dstore, clock)
    start = clock.now_ms()
    service.run_once(start)
    assert service.interval_ms == WAIT_MAX_MS  # nothing pending: the shortest level bounds it
    divert(dstore, delayed(b"x", 1))
    service.run_once(start + 40)
    assert service.interval_ms == 60
    service.run_once(start + 99)
    assert service.interval_ms == 1


def test_next_deliver_ms_names_the_earliest_pending_unit(dstore, clock):
    service = service_for(dstore, clock)
    start = clock.now_ms()
    assert service.next_deliver_ms() is None
    divert(dstore, delayed(b"slow", 3))
    clock.advance(10)
    divert(dstore, delayed(b"fast", 1))
    assert service.next_deliver_ms() == start + 110
    clock.advance(100)
    assert run(service, dstore, clock.now_ms()) == 1
    assert service.next_deliver_ms() == start + 300
    clock.advance(190)
    assert run(service, dstore, clock.now_ms()) == 1
    assert service.next_deliver_ms() is None


def test_concurrent_runs_never_deliver_a_unit_twice(dstore, clock):
    """An inline runner may call ``run_once`` while the service thread runs too."""
    service = service_for(dstore, clock)
    put_all(dstore, [schedule_delayed(delayed(b"%d" % i, 1), 0, LEVELS_MS)[0]
                     for i in range(200)])
    clock.advance(100)
    service.start()
    try:
        for _ in range(50):
            service.run_once(clock.now_ms())
        wait_until(lambda: not service.pending_count(), 5, interval_s=0.005, fail=False)
    finally:
        service.stop()
    assert dstore.wait_dispatched()
    assert [v.body for v in read_queue(dstore, TOPIC)] == [b"%d" % i for i in range(200)]


# ---- what is skipped, and what is retried ----------------------------------------------------

def test_records_that_are_not_deliverable_are_skipped(dstore, clock):
    service = service_for(dstore, clock)
    broken = [
        Message(DELAY_TOPIC, b"no real topic", properties={PROPERTY_DELAY: "1"}),
        Message(DELAY_TOPIC, b"bad qid", properties={
            PROPERTY_DELAY: "1", PROPERTY_REAL_TOPIC: TOPIC, PROPERTY_REAL_QID: "x"}),
        Message(DELAY_TOPIC, b"qid out of range", properties={
            PROPERTY_DELAY: "1", PROPERTY_REAL_TOPIC: TOPIC, PROPERTY_REAL_QID: "999999"}),
        Message(DELAY_TOPIC, b"half", properties={
            PROPERTY_DELAY: "1", PROPERTY_REAL_TOPIC: "RMQ_SYS_TRANS_HALF_TOPIC",
            PROPERTY_REAL_QID: "0"}),
    ]
    put_all(dstore, broken, 0)
    divert(dstore, delayed(b"good", 1))
    assert run(service, dstore, clock.now_ms() + 100) == 1
    assert [v.body for v in read_queue(dstore, TOPIC)] == [b"good"]
    assert service.skipped_count == 4 and service.cursor(1) == 5
    assert dstore.max_offset("RMQ_SYS_TRANS_HALF_TOPIC", 0) == 0


@pytest.fixture
def probed(open_store, tmp_path, clock):
    """Factory for a store opened with an injected disk probe and hour of day; closed and
    verified after the test."""

    def factory(probe: DiskProbe, *, hour: int = 12, **config_fields) -> MessageStore:
        return open_store(delay_config(tmp_path / "store", **config_fields), clock=clock,
                          disk_usage=probe, hour_of_day=lambda _now_ms: hour)

    return factory


def test_a_failed_put_keeps_the_cursor_and_the_message_is_delivered_when_it_clears(probed,
                                                                                    clock):
    """The fault is the store's real disk-full refusal, driven by its disk-usage probe."""
    probe = DiskProbe()
    store = probed(probe)
    service = service_for(store, clock)
    divert(store, delayed(b"first", 1))
    divert(store, delayed(b"second", 1))
    probe.ratio = 0.95
    store.retention.run_once(clock.now_ms())
    with pytest.raises(DiskFullError):
        store.put_message(Message(TOPIC, b"refused"))
    now = clock.now_ms() + 100
    for _ in range(3):
        assert run(service, store, now) == 0
        assert service.interval_ms == 100
        now += 100
    assert service.cursor(1) == 0 and delay_offsets(store).get(1) is None
    assert store.max_offset(TOPIC, 0) == 0 and service.pending_count() == 2

    probe.ratio = 0.5
    store.retention.run_once(clock.now_ms())
    assert run(service, store, now) == 2
    assert [v.body for v in read_queue(store, TOPIC)] == [b"first", b"second"]
    assert delay_offsets(store).get(1) == 2


def test_units_whose_records_retention_deleted_are_skipped(probed, clock):
    store = probed(DiskProbe(), hour=4)  # 04:00 is a deletion hour
    service = service_for(store, clock)
    for index in range(3):
        divert(store, delayed(b"old%d" % index, 3))
    put_all(store, [Message(TOPIC, b"f%04d-" % i + bytes(150), tags="fill")
                    for i in range(300)], 1)
    store.log_flusher.flush(0)
    when = clock.now_ms() / 1000 - 73 * 3600
    for segment in store.commit_log.segments.segments:
        os.utime(segment.path, (when, when))
    while store.retention.run_once(clock.now_ms()):
        pass
    assert store.min_offset(DELAY_TOPIC, 2) == 3  # the records are gone
    divert(store, delayed(b"new", 3))
    assert run(service, store, clock.now_ms() + 300) == 1
    assert [v.body for v in read_queue(store, TOPIC)] == [b"new"]
    assert service.cursor(3) == 4


# ---- cursors across restarts -----------------------------------------------------------------

def test_the_cursor_survives_close_and_reopen(open_store, tmp_path, clock):
    config = delay_config(tmp_path / "store")
    store = open_store(config, clock=clock)
    service = service_for(store, clock)
    divert(store, delayed(b"a", 1))
    divert(store, delayed(b"b", 1))
    clock.advance(500)
    divert(store, delayed(b"c", 1))  # due 100 ms from now
    assert run(service, store, clock.now_ms()) == 2
    delay_offsets(store).persist()  # as the broker's close does
    store.close()

    store = open_store(config, clock=clock)
    assert delay_offsets(store).levels() == {1: 2}
    service = service_for(store, clock)
    assert service.cursors() == {1: 2, 2: 0, 3: 0}
    assert run(service, store, clock.now_ms() + 100) == 1
    assert [v.body for v in read_queue(store, TOPIC)] == [b"a", b"b", b"c"]


def test_saved_offsets_are_clamped_into_their_queues_on_load(dstore, clock):
    divert(dstore, delayed(b"a", 1))
    divert(dstore, delayed(b"b", 1))
    table = delay_offsets(dstore)
    table.set(1, 50)
    table.set(2, 5)
    table.set(3, 3)
    service = service_for(dstore, clock)
    assert service.cursors() == {1: 2, 2: 0, 3: 0}
    assert table.levels() == {1: 2, 2: 0, 3: 0}
    assert run(service, dstore, clock.now_ms() + 1000) == 0  # both count as delivered


def test_an_unsaved_level_starts_at_its_queue_minimum(dstore, clock):
    divert(dstore, delayed(b"a", 1))
    service = service_for(dstore, clock)
    assert service.cursors() == {1: 0, 2: 0, 3: 0}
    assert delay_offsets(dstore).levels() == {}


# ---- the real thread -------------------------------------------------------------------------

def test_the_thread_delivers_on_the_system_clock(open_store, tmp_path):
    levels = parse_delay_levels("50ms 1s")
    store = open_store(small_config(tmp_path / "store",
                                    delay=DelayConfig(levels_ms=levels)))
    service = DelayService(store, delay_offsets(store), levels, store.clock)
    service.start()
    try:
        diverted, queue_id, _level = schedule_delayed(delayed(b"live", 1), 0, levels)
        stored_ms = store.put_message(diverted, queue_id).store_timestamp_ms
        # a liveness wait, not a latency bound (benchmarks measure delay accuracy): a loaded
        # CI machine once took more than a second for this 50 ms level
        wait_until(lambda: store.max_offset(TOPIC, 0) != 0, 10.0, interval_s=0.005, fail=False)
    finally:
        service.stop()
    assert service.failure is None
    assert store.max_offset(TOPIC, 0) == 1, "not delivered within 10 s"
    (view,) = read_queue(store, TOPIC)
    assert view.body == b"live" and view.store_timestamp_ms - stored_ms >= 50

