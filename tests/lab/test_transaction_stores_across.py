"""Pending transaction halves move with the store: the official Java ``TransactionMQProducer``
sends half messages whose local transaction does not know yet ("unknown") to Apache RocketMQ
5.3.3 and leaves; the broker stops with them pending (``RMQ_SYS_TRANS_HALF_TOPIC``, no op in
``RMQ_SYS_TRANS_OP_HALF_TOPIC``). Postbox opens a copy of the store, finds each one pending
with its producer group, and ends them: the committed one reaches its topic once, the rolled
back one never. And the reverse: Postbox leaves halves pending, Apache checks them back."""

from __future__ import annotations

import base64
import time

import pytest

from postbox.storage_engine import Broker, HAConfig, Message, StoreConfig
from postbox.storage_engine.contract import HalfReceipt, TransactionState
from tests.support.polling import wait_until
from tests.support.rocketmq_lab import copy_store
from tests.support.rocketmq_processes import LAB_BROKER_SETTINGS, free_broker_ports

pytestmark = pytest.mark.peers

TOPIC = "LabTxAcross"
GROUP = "lab-tx-across"
LINGER_MS = 75_000
"""Apache checks every ``transactionCheckInterval`` (30 s) halves older than 6 s."""


def test_apache_leaves_pending_halves_and_postbox_ends_them(live_rocketmq, tmp_path):
    lab = live_rocketmq
    broker = lab.start_broker(tmp_path / "apache", name="lab-tx-aw")
    try:
        lab.driver.run("create-topic", broker_addr=broker.address,
                       topics=[{"topic": TOPIC, "queues": 1, "message_type": "TRANSACTION"}])
        lab.driver.run("await-route", topics=[TOPIC], timeout_ms=60_000)
        sent = lab.driver.run("transaction", group=GROUP, linger_ms=0, messages=[
            {"topic": TOPIC, "tags": "tx", "keys": [f"tx-{name}"], "body": f"tx {name}",
             "outcome": "unknown"} for name in ("commit", "rollback")])
    finally:
        exit_code = broker.stop()
    assert exit_code in (0, 143)
    assert [result["local_state"] for result in sent] == ["UNKNOW", "UNKNOW"]
    root = copy_store(broker.store_dir, tmp_path / "postbox")
    config = StoreConfig.from_broker_conf(broker.conf_path, root_dir=root,
                                          store_host=broker.address, ha=HAConfig())
    with Broker.open(config) as postbox:
        halves = postbox.transactions.halves
        pending = {half.key: half for half in halves.pending()}
        assert sorted(pending) == sorted(result["msg_id"] for result in sent)
        assert {half.producer_group for half in pending.values()} == {GROUP}
        assert postbox.store.max_offset(TOPIC, 0) == 0
        for result, state in zip(sent, (TransactionState.COMMIT, TransactionState.ROLLBACK),
                                 strict=True):
            half = pending[result["msg_id"]]
            record = postbox.store.read_message(half.log_position)
            postbox.end_transaction(HalfReceipt(GROUP, half.queue_offset, half.log_position,
                                                record.msg_id, result["msg_id"]), state)
        views = wait_until(lambda: postbox.pull("inspector", TOPIC, 0, 0, 8).messages,
                           what="the committed message")
        time.sleep(0.5)
        views = postbox.pull("inspector", TOPIC, 0, 0, 8).messages
        assert [view.body for view in views] == [b"tx commit"]
        assert halves.pending() == []


def test_postbox_leaves_pending_halves_and_apache_checks_them(live_rocketmq, tmp_path):
    """The reverse: Postbox stores two halves of group ``GROUP`` and closes with them pending;
    Apache starts on a copy and checks them back with a live Java producer of that group,
    which answers commit for one and rollback for the other (their ``lab_check``)."""
    lab = live_rocketmq
    ports = free_broker_ports()
    root = tmp_path / "postbox"
    config = StoreConfig.from_broker_conf({**LAB_BROKER_SETTINGS, "storePathRootDir": str(root)},
                                          store_host=f"127.0.0.1:{ports[0]}", ha=HAConfig())
    with Broker.open(config) as postbox:
        postbox.create_topic(TOPIC, 1)
        for name in ("commit", "rollback"):
            postbox.send_half(Message(TOPIC, f"postbox tx {name}".encode(), tags="tx",
                                      properties={"lab_outcome": "unknown", "lab_check": name}),
                              GROUP, queue_id=0)
        assert len(postbox.transactions.halves.pending()) == 2
    broker = lab.start_broker(copy_store(root, tmp_path / "apache"), name="lab-tx-pw",
                              ports=ports)
    try:
        lab.driver.run("await-route", topics=[TOPIC], timeout_ms=60_000)
        lab.driver.run("transaction", group=GROUP, linger_ms=LINGER_MS, messages=[
            {"topic": TOPIC, "tags": "tx", "body": "java tx commit", "outcome": "commit"}])
        pulled = lab.driver.run("pull", topics=[TOPIC])["messages"]
    finally:
        exit_code = broker.stop()
    assert exit_code in (0, 143)
    bodies = sorted(base64.b64decode(m["body_b64"]) for m in pulled)
    assert bodies == [b"java tx commit", b"postbox tx commit"]
