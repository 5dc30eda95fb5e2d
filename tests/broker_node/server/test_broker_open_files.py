"""A ``postbox broker`` process under a low open-file limit (``RLIMIT_NOFILE`` 256) takes writes
to more consume queues than that limit could hold open, serves every message back, survives
``kill -9`` and restarts with every message readable: the store opens queue files on demand
(``consume_queue.open_files_max``, fitted to the limit at open), so neither writing nor
restarting depends on how many queue files exist. At start it says what limit to raise: for its
queue files, and for the connections its listeners accept.

Before, every written queue file kept two descriptors and a mapping for good: writes stopped
after about a hundred queues at this limit and the store could not be opened again.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from bench.remoting_raw import RawRemotingClient, pull_fields, send_fields
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.storage_engine import StoreConfig, verify_store
from tests.support.broker_process import BrokerProcess, write_broker_conf
from tests.support.stored_records import decode_records

OPEN_FILES_LIMIT = 256
TOPIC_COUNT = 80
QUEUES_PER_TOPIC = 4  # 320 queues, one file each: 640 descriptors the old store kept open
LIMIT_WRAPPER = ("import os, resource, sys; "
                 "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]),) * 2); "
                 "os.execv(sys.argv[2], sys.argv[2:])")


def limited_broker(store: Path, conf: Path) -> BrokerProcess:
    """A broker whose process runs with ``RLIMIT_NOFILE`` soft and hard at the test's limit."""
    broker = BrokerProcess(store, broker_conf=conf)
    broker.args = [sys.executable, "-c", LIMIT_WRAPPER, str(OPEN_FILES_LIMIT), *broker.args]
    return broker


def all_queues() -> list[tuple[str, int]]:
    return [(f"FD{topic:03d}", queue_id) for topic in range(TOPIC_COUNT)
            for queue_id in range(QUEUES_PER_TOPIC)]


def body(topic: str, queue_id: int, round_number: int) -> bytes:
    return f"{topic}/{queue_id}/{round_number}".encode()


def send_round(client: RawRemotingClient, round_number: int) -> None:
    for topic, queue_id in all_queues():
        sent = client.call(RequestCode.SEND_MESSAGE_V2,
                           send_fields(topic, queue_id, defaultTopicQueueNums=QUEUES_PER_TOPIC),
                           body(topic, queue_id, round_number))
        assert sent.code == ResponseCode.SUCCESS, (
            f"send {round_number} to {topic}/{queue_id} refused: {sent.code} {sent.remark}")


def read_all(client: RawRemotingClient, rounds: int) -> None:
    for topic, queue_id in all_queues():
        pulled = client.call(RequestCode.PULL_MESSAGE,
                             pull_fields("G", topic, queue_id, 0, sys_flag=0x6,
                                         suspend_ms=5000))
        assert pulled.code == ResponseCode.SUCCESS, (
            f"pull {topic}/{queue_id}: {pulled.code} {pulled.remark}")
        assert [r.body for r in decode_records(pulled.body)] == [
            body(topic, queue_id, number) for number in range(rounds)], f"{topic}/{queue_id}"


def open_descriptors(broker: BrokerProcess) -> int:
    assert broker.process is not None
    return len(os.listdir(f"/proc/{broker.process.pid}/fd"))


def test_broker_writes_to_more_queues_than_the_open_file_limit_and_restarts(tmp_path):
    conf = write_broker_conf(tmp_path)
    store = tmp_path / "store"
    broker = limited_broker(store, conf).start()
    try:
        with RawRemotingClient(broker.remoting_address) as client:
            send_round(client, 0)
            read_all(client, 1)
            assert open_descriptors(broker) < OPEN_FILES_LIMIT
    finally:
        broker.kill()  # kill -9: no close, the abort marker stays
    log_text = broker.stderr_text()
    # the store fitted its open queue files to the limit and the broker its listeners'
    # connection caps to the rest: both say what to raise
    assert "consume queues may keep" in log_text and "raise the limit to at least" in log_text
    assert "remoting listeners accepts at most" in log_text

    broker = limited_broker(store, conf).start()
    try:
        with RawRemotingClient(broker.remoting_address) as client:
            read_all(client, 1)
            send_round(client, 1)
            read_all(client, 2)
    finally:
        code = broker.stop()
    assert code == 0, broker.stderr_text()
    assert verify_store(store, StoreConfig.from_broker_conf(conf, root_dir=store)) == []
