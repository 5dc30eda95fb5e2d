"""``postbox transactions list|discarded|resend`` over a store directory and over ``--broker``
(the store served over remoting in this process): pending halves with their age and check
count, halves discarded after ``transactionCheckMax`` checks, and committing discarded ones
by hand to their real topic and queue (refused twice unless ``--force``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from postbox.storage_engine import (
    Broker,
    BrokerConfig,
    CommitLogConfig,
    FakeClock,
    Message,
    StoreConfig,
)
from postbox.storage_engine.contract import HalfReceipt, TransactionState
from tests.cli.cli_support import SEGMENT_SIZE_BYTES, assert_one_error_line, run, run_json
from tests.support.postbox_remoting import serve_remoting

TOPIC = "payments"
TIMES = {"transaction_timeout_ms": 6_000, "transaction_check_interval_ms": 30_000,
         "transaction_check_max": 1}


def config(root: Path) -> StoreConfig:
    return StoreConfig(root_dir=root,
                       commit_log=CommitLogConfig(segment_size_bytes=SEGMENT_SIZE_BYTES),
                       broker=BrokerConfig(**TIMES))


def open_broker(root: Path, clock: FakeClock) -> Broker:
    broker = Broker.open(config(root), clock=clock)
    broker.transactions.check_service.stop()  # the test drives the checks
    return broker


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, FakeClock]:
    """Discarded: C, D (checked once, then given up on); pending: B (checked once), A (not
    yet); E committed."""
    root = tmp_path / "store"
    clock = FakeClock(int(time.time() * 1000) - 60_000)
    with open_broker(root, clock) as broker:
        broker.create_topic(TOPIC, 2)
        service = broker.transactions.check_service
        broker.register_transaction_checker("PG", lambda check: None)  # never answers
        for body in ("C", "D"):
            broker.send_half(Message(TOPIC, body.encode(), unique_key=f"U{body}"), "PG",
                             queue_id=1)
        clock.advance(6_000)
        service.run_once(clock.now_ms())
        clock.advance(30_000)
        service.run_once(clock.now_ms())  # past the limit: discarded
        broker.send_half(Message(TOPIC, b"B", unique_key="UB"), "PG", queue_id=0)
        clock.advance(6_000)
        service.run_once(clock.now_ms())
        broker.send_half(Message(TOPIC, b"A", unique_key="UA", keys=["order-1"]), "PG",
                         queue_id=0)
        half = broker.send_half(Message(TOPIC, b"E", unique_key="UE"), "PG", queue_id=0)
        broker.end_transaction(HalfReceipt.of("PG", half), TransactionState.COMMIT)
        assert broker.store.wait_dispatched()
    return root, clock


def store_args(root: Path) -> list[str]:
    return ["--store", str(root), "--segment-size", str(SEGMENT_SIZE_BYTES)]


def check_pending(documents: list[dict], *, next_check_known: bool) -> None:
    assert [(d["body"], d["unique_key"], d["check_times"], d["producer_group"], d["real_topic"],
             d["real_queue_id"]) for d in documents] == [
        ("B", "UB", 1, "PG", TOPIC, "0"), ("A", "UA", 0, "PG", TOPIC, "0")]
    assert all(d["age_ms"] > 0 for d in documents)
    assert documents[0]["age_ms"] > documents[1]["age_ms"]
    assert all((d["next_check_ms"] is not None) is next_check_known for d in documents)


def check_discarded(documents: list[dict], in_topic: list[bool]) -> None:
    assert [(d["body"], d["unique_key"], d["check_times"], d["real_topic"], d["real_queue_id"],
             d["topic"]) for d in documents] == [
        ("C", "UC", 1, TOPIC, "1", "TRANS_CHECK_MAX_TIME_TOPIC"),
        ("D", "UD", 1, TOPIC, "1", "TRANS_CHECK_MAX_TIME_TOPIC")]
    assert [d["in_topic"] for d in documents] == in_topic


def test_over_a_store_directory(store) -> None:
    root, _ = store
    args = store_args(root)
    check_pending(run_json("transactions", "list", *args), next_check_known=True)
    check_discarded(run_json("transactions", "discarded", *args), [False, False])
    table = run("transactions", "list", *args)
    assert table.exit_code == 0 and "pending half messages: 2" in table.stdout
    assert "UB" in table.stdout and "PG" in table.stdout

    [resent] = run_json("transactions", "resend", "--offset", "0", *args)
    assert (resent["topic"], resent["queue_id"], resent["unique_key"]) == (TOPIC, 1, "UC")
    check_discarded(run_json("transactions", "discarded", *args), [True, False])
    assert_one_error_line(run("transactions", "resend", "--offset", "0", *args),
                          "already in their real topic", "--force")
    missing = run("transactions", "resend", "--offset", "7", *args)
    assert missing.exit_code == 1 and "no discarded half at offset(s) 7" in missing.stderr
    [again] = run_json("transactions", "resend", "--offset", "0", "--force", *args)
    assert again["queue_offset"] == resent["queue_offset"] + 1
    with Broker.open(config(root)) as broker:
        assert broker.store.wait_dispatched()
        bodies = [view.body for view in broker.pull("G", TOPIC, 1, 0).messages]
        assert bodies == [b"C", b"C"]
        assert broker.find_by_unique_key(TOPIC, "UC")[0].properties["PGROUP"] == "PG"


def test_through_a_broker(store) -> None:
    root, clock = store
    with open_broker(root, clock) as broker, serve_remoting(broker) as served:
        url = ["--broker", served.store_url]
        check_pending(run_json("transactions", "list", *url), next_check_known=False)
        check_discarded(run_json("transactions", "discarded", *url), [False, False])
        [resent] = run_json("transactions", "resend", "--all", "--offset", "1", *url)
        assert (resent["topic"], resent["queue_id"], resent["unique_key"]) == (TOPIC, 1, "UD")
        check_discarded(run_json("transactions", "discarded", *url), [False, True])
        assert broker.store.wait_dispatched()
        [view] = broker.find_by_unique_key(TOPIC, "UD")
        assert view.body == b"D" and "REAL_TOPIC" not in view.properties


def test_nothing_found_and_bad_arguments(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    with Broker.open(config(root)):
        pass
    args = store_args(root)
    for command in ("list", "discarded"):
        result = run("transactions", command, *args)
        assert result.exit_code == 1, result.stderr
    assert_one_error_line(run("transactions", "resend", *args), "--offset N")
    assert_one_error_line(run("transactions", "list", "--limit", "-1", *args), "--limit")
    assert_one_error_line(run("transactions", "list", "--broker", "rocketmq://127.0.0.1:1"),
                          "127.0.0.1:1")
