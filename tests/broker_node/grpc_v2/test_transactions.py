"""Transactional messages with the official rocketmq-python-client against ``postbox broker``
in its own process: a half committed or rolled back by the client, and a half the client leaves
open, settled by its ``TransactionChecker`` through RecoverOrphanedTransactionCommand on the
Telemetry stream; a second EndTransaction of an ended half is refused."""

from __future__ import annotations

import threading

from rocketmq import TransactionChecker, TransactionResolution

from postbox.broker_node.grpc_v2.protocol import Code, definition, service
from tests.broker_node.grpc_v2.raw_calls import TIMEOUT_S, pull_all, resource, stub
from tests.broker_node.grpc_v2.rocketmq_clients import configuration, message
from tests.support.broker_process import BrokerProcess, write_broker_conf
from tests.support.polling import wait_until


class Checker(TransactionChecker):
    def __init__(self) -> None:
        self.checked: list[bytes] = []
        self.called = threading.Event()

    def check(self, message) -> TransactionResolution:
        self.checked.append(message.body)
        self.called.set()
        return (TransactionResolution.COMMIT if message.body == b"orphan-commit"
                else TransactionResolution.ROLLBACK)


def bodies(address: str, topic: str) -> list[bytes]:
    return sorted(item.body for queue_id in range(8)
                  for item in pull_all(address, "reader", topic, queue_id))


def test_official_transaction_producer_commits_rolls_back_and_answers_checks(tmp_path, clients):
    from rocketmq import Producer

    conf = write_broker_conf(tmp_path)
    conf.write_text(conf.read_text() + "transactionTimeOut=1000\ntransactionCheckInterval=1000\n")
    server = BrokerProcess(tmp_path / "store", broker_conf=conf).start()
    try:
        checker = Checker()
        producer = Producer(configuration(server.address), ("payments",), checker)
        producer.startup()
        clients.append(producer)
        receipts = []
        for body, end in ((b"committed", "commit"), (b"rolled-back", "rollback"),
                          (b"orphan-commit", None), (b"orphan-rollback", None)):
            transaction = producer.begin_transaction()
            receipt = producer.send(message("payments", body), transaction)
            assert receipt.transaction_id.startswith("T")
            receipts.append(receipt)
            if end is not None:
                getattr(transaction, end)()
        assert bodies(server.address, "payments") == [b"committed"]
        again = stub(server.address).EndTransaction(service.EndTransactionRequest(
            topic=resource("payments"), message_id=receipts[0].message_id,
            transaction_id=receipts[0].transaction_id, resolution=definition.COMMIT,
            source=definition.SOURCE_CLIENT), timeout=TIMEOUT_S)
        assert again.status.code == Code.INVALID_TRANSACTION_ID  # already ended: not twice
        wait_until(lambda: len(set(checker.checked)) == 2, timeout_s=30)
        wait_until(lambda: bodies(server.address, "payments") == [b"committed",
                                                                  b"orphan-commit"])
    finally:
        for client in clients:
            client.shutdown()
        clients.clear()
        server.stop()
