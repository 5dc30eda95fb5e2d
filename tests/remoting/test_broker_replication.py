"""``postbox broker start --role …``: replication between two broker processes on loopback,
driven the way an operator runs it, and the documented manual promotion (docs/replication.md).

The store-level replication tests (frames, catch-up, SYNC_MASTER statuses) are in
``tests/storage_engine/test_replication*.py``; this one proves the flags and the network path:
every send a SYNC_MASTER broker answered ``PUT_OK`` is readable on the slave broker, at the same
commit-log position, after the master is killed with SIGKILL.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from network.grpc_v2 import RemoteBroker
from storage_engine import Message, NotMasterError, PutStatus
from tests.support.broker_process import BrokerProcess, write_broker_conf
from tests.support.polling import wait_until

TOPIC = "orders"
MESSAGE_COUNT = 300


def _start(tmp_path: Path, name: str, *flags: str) -> BrokerProcess:
    return BrokerProcess(tmp_path / name, broker_conf=write_broker_conf(tmp_path),
                         extra=flags).start()


def _first_acknowledged_send(client: RemoteBroker) -> None:
    """Sends probes until the slave has connected (a SYNC_MASTER answers SLAVE_NOT_AVAILABLE
    until then)."""
    wait_until(lambda: client.send(Message("probe", b"probe")).status is PutStatus.PUT_OK)


def _readable_at(client: RemoteBroker, receipt) -> bool:
    result = client.pull("replica-check", receipt.stored_topic, receipt.stored_queue_id,
                         receipt.queue_offset, 1)
    return bool(result.messages) and result.messages[0].log_position == receipt.log_position


@pytest.fixture
def processes() -> list[BrokerProcess]:
    started: list[BrokerProcess] = []
    yield started
    for process in started:
        process.kill()


def test_sync_master_acknowledged_sends_survive_kill_9_and_the_promoted_slave_takes_over(
        tmp_path, processes):
    master = _start(tmp_path, "master", "--role", "SYNC_MASTER", "--ha-listen", "127.0.0.1:0",
                    "--slave-timeout-ms", "2000")
    processes.append(master)
    slave = _start(tmp_path, "slave", "--role", "SLAVE", "--master-ha", master.ha_address)
    processes.append(slave)

    with RemoteBroker(master.address) as producer:
        _first_acknowledged_send(producer)
        receipts = [producer.send(Message(TOPIC, f"order-{index}".encode(),
                                             unique_key=f"u{index:04d}"))
                    for index in range(MESSAGE_COUNT)]
    assert {receipt.status for receipt in receipts} == {PutStatus.PUT_OK}
    master.kill()  # SIGKILL: no clean close, no last frames

    with RemoteBroker(slave.address) as reader:
        for receipt in receipts:  # the slave's dispatch may still be building its queues
            wait_until(lambda receipt=receipt: _readable_at(reader, receipt), timeout_s=10)
        last = receipts[-1]
        (view,) = reader.pull("replica-check", TOPIC, last.queue_id, last.queue_offset, 1).messages
        assert view.body == f"order-{MESSAGE_COUNT - 1}".encode()
        assert [found.log_position for found in reader.find_by_unique_key(  # key index built
            TOPIC, f"u{MESSAGE_COUNT - 1:04d}")] == [last.log_position]
        with pytest.raises(NotMasterError):
            reader.send(Message(TOPIC, b"refused: slaves only copy"))
    assert slave.stop() == 0

    # manual promotion: the slave's directory restarted as a master
    promoted = _start(tmp_path, "slave", "--role", "ASYNC_MASTER")
    processes.append(promoted)
    with RemoteBroker(promoted.address) as client:
        after = client.send(Message(TOPIC, b"after promotion", keys="after"))
        assert after.status is PutStatus.PUT_OK
        assert after.log_position > last.log_position
        assert all(_readable_at(client, receipt) for receipt in receipts)
    assert promoted.stop() == 0
