"""``Producer.send_in_transaction`` over the embedded store and over ``rocketmq://`` (a Postbox
broker served over remoting in this process, the remote client answering the broker's
CHECK_TRANSACTION_STATE with the check function): commit, rollback, unknown then check-back,
an ``execute`` that raises, a check registered ahead by a restarted producer, and outcome
normalisation."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from postbox.framework import App, TransactionState
from postbox.framework.transactions import outcome_state
from postbox.storage_engine import Broker
from tests.support.brokers import broker_config
from tests.support.postbox_remoting import serve_remoting

QUICK_CHECKS = {"transaction_timeout_ms": 300, "transaction_check_interval_ms": 300}


@pytest.fixture(params=["embedded", "remote"])
def setup(request, tmp_path: Path) -> Iterator[tuple[App, Broker]]:
    """An app and the broker underneath it (the app's own, or one served over remoting)."""
    broker = Broker.open(broker_config(tmp_path / "store", **QUICK_CHECKS))
    try:
        if request.param == "embedded":
            with App(broker=broker) as app:
                yield app, broker
            return
        with serve_remoting(broker) as served, App(store_url=served.store_url) as app:
            yield app, broker
    finally:
        broker.close()


def bodies(broker: Broker, topic: str) -> list[bytes]:
    assert broker.store.wait_dispatched()
    return sorted(view.body for queue_id in broker.queue_ids(topic)
                  for view in broker.store.get_message("G", topic, queue_id, 0, 32).messages)


def wait_until(condition, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_commit_and_rollback(setup) -> None:
    app, broker = setup
    seen = []
    committed = app.producer.send_in_transaction(
        "orders", b"paid", execute=lambda half: seen.append(half.unique_key) or True,
        check=lambda message: TransactionState.ROLLBACK, tags="t", keys=["o-1"])
    assert committed.state is TransactionState.COMMIT and committed.ended
    assert seen == [committed.send_result.unique_key]
    rolled = app.producer.send_in_transaction("orders", "cancelled", execute=lambda half: False,
                                              check=lambda message: None)
    assert rolled.state is TransactionState.ROLLBACK and rolled.ended
    assert bodies(broker, "orders") == [b"paid"]
    [view] = broker.find_by_unique_key("orders", committed.send_result.unique_key)
    assert view.tags == "t" and view.keys == ["o-1"]
    assert broker.transactions.halves.pending() == []


def test_unknown_outcome_is_settled_by_the_check(setup) -> None:
    app, broker = setup
    checked = threading.Event()
    ids = []

    def check(message):
        ids.append(message.unique_key)
        checked.set()
        return message.body == b"settle-commit"

    for body in (b"settle-commit", b"settle-rollback"):
        result = app.producer.send_in_transaction(
            "payments", body, execute=lambda half: TransactionState.UNKNOWN, check=check)
        assert result.state is TransactionState.UNKNOWN
    assert bodies(broker, "payments") == []
    wait_until(lambda: not broker.transactions.halves.pending())
    assert checked.is_set() and len(set(ids)) == 2
    assert bodies(broker, "payments") == [b"settle-commit"]


def test_execute_that_raises_leaves_the_half_to_the_check(setup) -> None:
    app, broker = setup

    def execute(half):
        raise RuntimeError("database down")

    with pytest.raises(RuntimeError, match="database down"):
        app.producer.send_in_transaction("audit", b"row", execute=execute,
                                         check=lambda message: TransactionState.COMMIT)
    wait_until(lambda: not broker.transactions.halves.pending())
    assert bodies(broker, "audit") == [b"row"]


def test_a_restarted_producer_answers_for_halves_it_did_not_send(tmp_path: Path) -> None:
    broker = Broker.open(broker_config(tmp_path / "store", **QUICK_CHECKS))
    try:
        with App(broker=broker) as first:
            first.producer.send_in_transaction(
                "ledger", b"left", group="LEDGER", execute=lambda half: TransactionState.UNKNOWN,
                check=lambda message: TransactionState.UNKNOWN)
        with serve_remoting(broker) as served, App(store_url=served.store_url) as second:
            second.producer.register_transaction_check(lambda message: True, group="LEDGER")
            wait_until(lambda: not broker.transactions.halves.pending())
            assert bodies(broker, "ledger") == [b"left"]
    finally:
        broker.close()


def test_outcomes_are_normalised_and_typos_refused() -> None:
    assert outcome_state(None) is outcome_state(True) is TransactionState.COMMIT
    assert outcome_state(False) is TransactionState.ROLLBACK
    assert outcome_state(TransactionState.UNKNOWN) is TransactionState.UNKNOWN
    with pytest.raises(TypeError, match="TransactionState"):
        outcome_state("commit")
