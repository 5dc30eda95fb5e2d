"""``postbox broker start --role …``: replication between two broker processes on loopback,
driven the way an operator runs it, and the documented manual promotion (docs/replication.md).

The store-level replication tests (frames, catch-up, SYNC_MASTER statuses) are in
``tests/storage_engine/ha/test_replication*.py``; this one proves the flags and the network path:
every send the official RocketMQ 5 client saw acknowledged by a SYNC_MASTER broker process is in
the slave broker's store after the master is killed with SIGKILL, at the queue offset and with
the message id of its receipt; the slave refuses sends; the slave's directory restarted as a
master takes sends after what it copied.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from postbox.storage_engine import Broker, StoreConfig
from tests.broker_node.grpc_v2.rocketmq_clients import configuration, message, start_producer
from tests.support.broker_process import BrokerProcess, write_broker_conf
from tests.support.polling import wait_until

TOPIC = "orders"
MESSAGE_COUNT = 300


def _start(tmp_path: Path, name: str, *flags: str) -> BrokerProcess:
    return BrokerProcess(tmp_path / name, broker_conf=write_broker_conf(tmp_path),
                         extra=flags).start()


def _acknowledged(producer, topic: str, body: bytes) -> bool:
    """One send; False while a SYNC_MASTER answers that its slave is not there yet."""
    try:
        producer.send(message(topic, body))
    except Exception:  # the client raises its own exception type for a refused send
        return False
    return True


def _stored(tmp_path: Path, name: str) -> dict[bytes, tuple[int, int, str | None]]:
    """body → (queue id, queue offset, unique key) of every message of TOPIC in a stopped
    broker's store."""
    config = StoreConfig.from_broker_conf(write_broker_conf(tmp_path), root_dir=tmp_path / name)
    with Broker.open(config) as broker:  # the consume queues the copy built (topic configs are
        assert broker.store.wait_dispatched()  # not replicated)
        return {view.body: (view.queue_id, view.queue_offset, view.unique_key)
                for queue_id in broker.store.topics().get(TOPIC, [])
                for view in broker.pull("replica-check", TOPIC, queue_id, 0, 1000).messages}


@pytest.fixture
def processes() -> list[BrokerProcess]:
    started: list[BrokerProcess] = []
    yield started
    for process in started:
        process.kill()


def test_sync_master_acknowledged_sends_survive_kill_9_and_the_promoted_slave_takes_over(
        tmp_path, processes, clients):
    master = _start(tmp_path, "master", "--role", "SYNC_MASTER", "--ha-listen", "127.0.0.1:0",
                    "--slave-timeout-ms", "2000")
    processes.append(master)
    slave = _start(tmp_path, "slave", "--role", "SLAVE", "--master-ha", master.ha_address)
    processes.append(slave)

    producer = start_producer(clients, configuration(master.address), TOPIC, "probe")
    wait_until(lambda: _acknowledged(producer, "probe", b"probe"), what="the slave connected")
    bodies = [f"order-{index}".encode() for index in range(MESSAGE_COUNT)]
    receipts = {body: producer.send(message(TOPIC, body)) for body in bodies}
    master.kill()  # SIGKILL: no clean close, no last frames

    refused = start_producer(clients, configuration(slave.address), TOPIC)
    assert not _acknowledged(refused, TOPIC, b"refused: slaves only copy")
    assert slave.stop() == 0
    copied = _stored(tmp_path, "slave")
    for body, receipt in receipts.items():
        assert body in copied, body  # (the broker picks the queue: the receipt does not say it)
        assert copied[body][1:] == (receipt.offset, receipt.message_id), body

    # manual promotion: the slave's directory restarted as a master
    promoted = _start(tmp_path, "slave", "--role", "ASYNC_MASTER")
    processes.append(promoted)
    after = start_producer(clients, configuration(promoted.address), TOPIC)
    assert _acknowledged(after, TOPIC, b"after promotion")
    assert promoted.stop() == 0
    stored = _stored(tmp_path, "slave")
    assert b"after promotion" in stored
    assert all(stored[body] == copied[body] for body in receipts)
