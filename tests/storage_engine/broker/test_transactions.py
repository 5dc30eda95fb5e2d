"""Half messages in the embedded broker, driven by a ``FakeClock``: commits' op records gathered
(and found again when a crash lost them), the check schedule
(``transactionTimeOut`` after birth, ``CHECK_IMMUNITY_TIME_IN_SECONDS``, then every
``transactionCheckInterval``), the discard after ``transactionCheckMax`` checks, a late end of a
superseded copy, recovery of pending halves after a close without any persist of the progress
offsets, a gathered op record refused for a full disk, and the broker.conf keys."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from postbox.storage_engine import (
    Broker,
    DiskFullError,
    FakeClock,
    Message,
    MessageStore,
    StoreConfig,
)
from postbox.storage_engine.contract import HalfReceipt, TransactionState
from postbox.storage_engine.formats.topic_names import (
    TRANSACTION_CHECK_MAX_TIME_TOPIC,
    TRANSACTION_GROUP,
    TRANSACTION_HALF_TOPIC,
    TRANSACTION_OP_TOPIC,
)
from tests.storage_engine.conftest import DiskProbe
from tests.support.brokers import broker_config

START_MS = 1_700_000_000_000
TIMES = {"transaction_timeout_ms": 6_000, "transaction_check_interval_ms": 30_000,
         "transaction_check_max": 2}


def open_broker(root: Path, clock: FakeClock) -> Broker:
    """A broker whose check service the test drives (its thread stopped)."""
    broker = Broker.open(broker_config(root, **TIMES), clock=clock)
    broker.transactions.check_service.stop()
    return broker


def test_checks_follow_the_schedule_and_the_limit_discards(tmp_path: Path) -> None:
    clock = FakeClock(START_MS)
    with open_broker(tmp_path / "store", clock) as broker:
        service = broker.transactions.check_service
        checks = []
        broker.register_transaction_checker("PG", checks.append)
        broker.send_half(Message("T", b"plain", unique_key="U1"), "PG")
        broker.send_half(Message("T", b"immune", unique_key="U2",
                                 properties={"CHECK_IMMUNITY_TIME_IN_SECONDS": "20"}), "PG")
        clock.advance(5_999)
        assert service.run_once(clock.now_ms()) == 0 and checks == []
        clock.advance(1)
        assert service.run_once(clock.now_ms()) == 1
        assert [c.message.body for c in checks] == [b"plain"]
        clock.advance(14_000)  # 20 s after birth: the immune one
        service.run_once(clock.now_ms())
        assert [c.message.body for c in checks] == [b"plain", b"immune"]
        clock.advance(16_000)  # 30 s after the first check
        service.run_once(clock.now_ms())
        assert [c.message.body for c in checks][2:] == [b"plain"]
        assert checks[2].message.properties["TRANSACTION_CHECK_TIMES"] == "2"
        clock.advance(30_000)  # both checked twice: discarded at their next due time
        service.run_once(clock.now_ms())
        clock.advance(30_000)
        service.run_once(clock.now_ms())
        assert len(checks) == 4 and service.discard_count == 2
        assert broker.transactions.halves.pending() == []
        assert broker.store.wait_dispatched()
        kept = broker.transactions.discarded()
        assert sorted(view.body for view in kept) == [b"immune", b"plain"]
        assert {view.topic for view in kept} == {TRANSACTION_CHECK_MAX_TIME_TOPIC}


def test_an_end_of_a_superseded_copy_ends_the_transaction_once(tmp_path: Path) -> None:
    clock = FakeClock(START_MS)
    with open_broker(tmp_path / "store", clock) as broker:
        half = broker.send_half(Message("T", b"late", unique_key="U3"), "PG", queue_id=0)
        clock.advance(6_000)
        broker.transactions.check_service.run_once(clock.now_ms())  # stores a copy
        committed = broker.end_transaction(HalfReceipt.of("PG", half), TransactionState.COMMIT)
        assert committed is not None and committed.topic == "T"
        assert broker.transactions.halves.pending() == []
        assert broker.store.wait_dispatched()
        assert [v.body for v in broker.pull("G", "T", 0, 0).messages] == [b"late"]


def test_pending_halves_are_recovered_from_the_topics(tmp_path: Path) -> None:
    clock = FakeClock(START_MS)
    root = tmp_path / "store"
    with open_broker(root, clock) as broker:
        ended = broker.send_half(Message("T", b"ended", unique_key="A"), "PG")
        broker.send_half(Message("T", b"open", unique_key="B"), "PG")
        broker.end_transaction(HalfReceipt.of("PG", ended), TransactionState.ROLLBACK)
        offsets = broker.tables.consumer_offsets
        assert offsets.query(TRANSACTION_HALF_TOPIC, TRANSACTION_GROUP, 0) is None
    with open_broker(root, clock) as broker:
        [pending] = broker.transactions.halves.pending()
        assert pending.key == "B" and pending.producer_group == "PG"
        broker.transactions.check_service.run_once(clock.now_ms())
        assert broker.tables.consumer_offsets.query(
            TRANSACTION_HALF_TOPIC, TRANSACTION_GROUP, 0) == pending.queue_offset


def op_bodies(broker: Broker) -> list[bytes]:
    assert broker.store.wait_dispatched()
    return [view.body for view in broker.store.get_message(
        TRANSACTION_GROUP, TRANSACTION_OP_TOPIC, 0, 0, 32).messages]


def test_commits_share_one_op_record_and_a_crash_losing_it_loses_no_end(tmp_path: Path) -> None:
    clock = FakeClock(START_MS)
    with open_broker(tmp_path / "store", clock) as broker:
        sent = [broker.send_half(Message("T", f"m{n}".encode(), unique_key=f"K{n}",
                                         properties={"DELAY": "1"} if n == 1 else None),
                                 "PG", queue_id=0) for n in range(4)]
        for n, state in ((0, TransactionState.COMMIT), (1, TransactionState.COMMIT),
                         (2, TransactionState.ROLLBACK)):
            broker.end_transaction(HalfReceipt.of("PG", sent[n]), state)
        assert op_bodies(broker) == [b"2,"]  # a rollback's at once; the commits' gathered
        shutil.copytree(tmp_path / "store", tmp_path / "crashed")  # what a kill -9 leaves
        service = broker.transactions.check_service
        clock.advance(99)
        service.run_once(clock.now_ms())
        assert op_bodies(broker) == [b"2,"]
        clock.advance(1)  # transaction_op_batch_interval_ms
        service.run_once(clock.now_ms())
        assert op_bodies(broker) == [b"2,", b"0,1,"]
    with open_broker(tmp_path / "crashed", clock) as broker:
        assert [half.key for half in broker.transactions.halves.pending()] == ["K3"]
        assert op_bodies(broker) == [b"2,", b"0,1,"]  # written by the recovery
        clock.advance(6_000)
        checks: list = []
        broker.register_transaction_checker("PG", checks.append)
        broker.transactions.check_service.run_once(clock.now_ms())
        assert [check.message.body for check in checks] == [b"m3"]  # the commits: not checked
        assert [view.body for view in broker.pull("G", "T", 0, 0).messages] == [b"m0"]


def test_broker_conf_keys_set_the_times() -> None:
    config = StoreConfig.from_broker_conf({"storePathRootDir": "/tmp/x",
                                           "transactionTimeOut": "1000",
                                           "transactionCheckMax": "3",
                                           "transactionCheckInterval": "2000",
                                           "transactionOpBatchInterval": "3000"})
    assert (config.broker.transaction_timeout_ms, config.broker.transaction_check_max,
            config.broker.transaction_check_interval_ms,
            config.broker.transaction_op_batch_interval_ms) == (1000, 3, 2000, 3000)
    assert StoreConfig(root_dir="/tmp/x").broker.transaction_check_interval_ms == 30_000


def test_a_gathered_op_record_refused_for_a_full_disk_is_written_once_space_is_back(
        tmp_path: Path) -> None:
    """The fault is the store's real disk-full refusal, driven by its disk-usage probe."""
    clock, probe = FakeClock(START_MS), DiskProbe()
    store = MessageStore.open(broker_config(tmp_path / "store", **TIMES), clock=clock,
                              disk_usage=probe)
    with Broker(store, clock=clock, owns_store=True) as broker:
        service = broker.transactions.check_service
        service.stop()
        sent = [broker.send_half(Message("T", f"m{n}".encode(), unique_key=f"K{n}"), "PG",
                                 queue_id=0) for n in range(3)]
        for half in sent[:2]:
            broker.end_transaction(HalfReceipt.of("PG", half), TransactionState.COMMIT)
        probe.ratio = 0.95
        store.retention.run_once(clock.now_ms())
        with pytest.raises(DiskFullError):  # nothing ends: the half stays pending
            broker.end_transaction(HalfReceipt.of("PG", sent[2]), TransactionState.COMMIT)
        clock.advance(100)
        assert service.run_once(clock.now_ms()) == 0  # refused: kept gathered, not lost
        assert op_bodies(broker) == []
        assert broker.transactions.halves.gathered_due_ms() is not None
        probe.ratio = 0.2
        store.retention.run_once(clock.now_ms())
        service.run_once(clock.now_ms())
        assert op_bodies(broker) == [b"0,1,"]
        broker.end_transaction(HalfReceipt.of("PG", sent[2]), TransactionState.COMMIT)
        assert broker.store.wait_dispatched()
        assert [view.body for view in broker.pull("G", "T", 0, 0).messages] == [
            b"m0", b"m1", b"m2"]
        clock.advance(6_000)  # past the first check: the commits are not asked about
        checks: list = []
        broker.register_transaction_checker("PG", checks.append)
        service.run_once(clock.now_ms())
        assert checks == []
