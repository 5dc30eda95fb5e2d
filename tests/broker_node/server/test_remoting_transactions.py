"""Transactional messages over remoting on a real store and socket: a half send (invisible),
END_TRANSACTION commit and rollback with their op records, refusals of an unknown or mismatched
half, an already-ended half answered SUCCESS without a write (nothing lost or doubled),
check-back to a heartbeat-registered producer answered by commit, rollback or unknown, the
discard after ``transactionCheckMax`` checks, and pending halves found again after a ``postbox
broker`` process is killed with SIGKILL (a commit whose gathered op record the kill lost is
found committed, not checked)."""

from __future__ import annotations

import json
import queue
import time

import pytest

from bench.remoting_raw import RawRemotingClient, pull_fields, send_fields
from postbox.broker_node.server.broker import BrokerRemotingServer
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.storage_engine.formats import decode_offset_msg_id
from postbox.storage_engine.formats.topic_names import (
    TRANSACTION_CHECK_MAX_TIME_TOPIC,
    TRANSACTION_HALF_TOPIC,
    TRANSACTION_OP_TOPIC,
)
from tests.support.broker_process import BrokerProcess, write_broker_conf
from tests.support.brokers import BrokerFactory
from tests.support.polling import wait_until
from tests.support.stored_records import decode_records

SEND_V2, END = RequestCode.SEND_MESSAGE_V2, RequestCode.END_TRANSACTION
UNIQ = "7F0000010F3A1B2C3D4E00A1B2C3{:04X}"


def send_half(client, number: int, topic: str = "TX", queue_id: int = 1, group: str = "PG"):
    properties = {"UNIQ_KEY": UNIQ.format(number), "TRAN_MSG": "true", "PGROUP": group,
                  "TAGS": "t", "WAIT": "true"}
    answer = client.call(SEND_V2, send_fields(topic, queue_id, properties=properties,
                                              group=group, sysFlag=0x4,
                                              bornTimestamp=int(time.time() * 1000)),
                         f"body-{number}".encode())
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return answer.ext_fields


def end_fields(sent: dict[str, str], state: int, *, group: str = "PG", check: bool = False):
    return {"producerGroup": group, "tranStateTableOffset": sent["queueOffset"],
            "commitLogOffset": decode_offset_msg_id(sent["msgId"])[1],
            "commitOrRollback": state, "fromTransactionCheck": str(check).lower(),
            "msgId": sent["transactionId"], "transactionId": sent["transactionId"]}


def visible(broker, topic: str = "TX", queue_id: int = 1):
    assert broker.store.wait_dispatched()
    return broker.store.get_message("G", topic, queue_id, 0, 32).messages


@pytest.fixture
def served(tmp_path):
    """A broker with quick checks (300 ms, at most 2), served over remoting."""
    with BrokerFactory(tmp_path) as brokers:
        broker = brokers.open(transaction_timeout_ms=300, transaction_check_interval_ms=300,
                              transaction_check_max=2)
        with BrokerRemotingServer(broker) as server:
            yield broker, server


def test_commit_and_rollback_over_remoting(served):
    broker, server = served
    with RawRemotingClient(server.address) as client:
        sent = send_half(client, 1)
        assert sent["queueId"] == "1" and sent["transactionId"] == UNIQ.format(1)
        assert visible(broker) == []
        half = broker.store.read_message(decode_offset_msg_id(sent["msgId"])[1])
        assert half.topic == TRANSACTION_HALF_TOPIC and half.queue_id == 0
        assert half.sys_flag & 0xC == 0
        assert {k: half.properties[k] for k in ("REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP",
                                                "__transactionId__")} == {
            "REAL_TOPIC": "TX", "REAL_QID": "1", "TRAN_MSG": "true", "PGROUP": "PG",
            "__transactionId__": UNIQ.format(1)}
        client.oneway(END, end_fields(sent, 8))
        rolled = send_half(client, 2)
        assert client.call(END, end_fields(rolled, 12)).code == ResponseCode.SUCCESS
        [committed] = visible(broker)
        assert committed.body == b"body-1" and committed.tags == "t"
        assert committed.sys_flag & 0xC == 0x8
        assert committed.prepared_transaction_position == half.log_position
        assert not {"REAL_TOPIC", "REAL_QID", "TRAN_MSG"} & set(committed.properties)
        assert committed.properties["PGROUP"] == "PG"
        assert committed.unique_key == UNIQ.format(1)
        # the rollback's op record at once; the commit's gathered, written within 100 ms
        ops = wait_until(lambda: (found := visible(broker, TRANSACTION_OP_TOPIC, 0))
                         and len(found) >= 2 and found, timeout_s=10)
        assert sorted((op.tags, op.body) for op in ops) == [
            ("d", f"{sent['queueOffset']},".encode()), ("d", f"{rolled['queueOffset']},".encode())]
        assert decode_records(client.call(RequestCode.VIEW_MESSAGE_BY_ID, {
            "offset": committed.log_position}).body)[0].body == b"body-1"


def test_unknown_mismatched_or_ended_halves_are_refused_and_nothing_is_lost(served):
    broker, server = served
    with RawRemotingClient(server.address) as client:
        sent = send_half(client, 3)
        nowhere = client.call(END, {**end_fields(sent, 8), "commitLogOffset": 10**9})
        assert nowhere.code == ResponseCode.SYSTEM_ERROR
        assert "Find prepared transaction message failed" in nowhere.remark
        other = client.call(END, end_fields(sent, 8, group="OTHER"))
        assert other.code == ResponseCode.SYSTEM_ERROR and "producer group" in other.remark
        offset = client.call(END, {**end_fields(sent, 8), "tranStateTableOffset": 77})
        assert offset.code == ResponseCode.SYSTEM_ERROR and "state table offset" in offset.remark
        unknown = client.call(END, end_fields(sent, 0))
        assert unknown.code == ResponseCode.SUCCESS and visible(broker) == []
        wrong = client.call(END, end_fields(sent, 4))  # PREPARED: not an end
        assert wrong.code == ResponseCode.SYSTEM_ERROR
        assert wrong.remark == "commitOrRollback field wrong"
        assert client.call(END, end_fields(sent, 8)).code == ResponseCode.SUCCESS
        ops = len(visible(broker, TRANSACTION_OP_TOPIC, 0))
        for state in (12, 8):  # already ended: SUCCESS as RocketMQ, and nothing written
            assert client.call(END, end_fields(sent, state)).code == ResponseCode.SUCCESS
        assert [view.body for view in visible(broker)] == [b"body-3"]
        assert len(visible(broker, TRANSACTION_OP_TOPIC, 0)) == ops


def producer(server, group: str = "PG") -> RawRemotingClient:
    return producer_at(server.address, group)


def producer_at(address, group: str = "PG") -> RawRemotingClient:
    client = RawRemotingClient(address)
    body = json.dumps({"clientID": f"client-{group}", "consumerDataSet": [],
                       "producerDataSet": [{"groupName": group}]}).encode()
    assert client.call(RequestCode.HEART_BEAT, {}, body).code == ResponseCode.SUCCESS
    return client


def next_check(client: RawRemotingClient, timeout_s: float = 10.0):
    while True:
        request = client.server_requests.get(timeout=timeout_s)
        if request.code == RequestCode.CHECK_TRANSACTION_STATE:
            return request


@pytest.mark.parametrize("answer", [8, 12])
def test_check_back_reaches_the_producer_and_its_answer_ends_the_half(served, answer):
    broker, server = served
    with producer(server) as client:
        sent = send_half(client, 4)
        client.oneway(END, end_fields(sent, 0))  # the local transaction does not know yet
        check = next_check(client)
        assert check.is_oneway
        fields = check.ext_fields
        assert fields["msgId"] == fields["transactionId"] == UNIQ.format(4)
        assert fields["topic"] == "TX" and int(fields["tranStateTableOffset"]) > int(
            sent["queueOffset"])  # the check names the half's new copy
        [record] = decode_records(check.body)
        assert (record.topic, record.queue_id, record.body) == ("TX", 1, b"body-4")
        assert record.properties["TRANSACTION_CHECK_TIMES"] == "1"
        client.oneway(END, {"producerGroup": "PG", "commitOrRollback": answer,
                            "tranStateTableOffset": fields["tranStateTableOffset"],
                            "commitLogOffset": fields["commitLogOffset"],
                            "fromTransactionCheck": "true", "msgId": fields["msgId"],
                            "transactionId": fields["transactionId"]})
        assert client.call(RequestCode.GET_MAX_OFFSET, {"topic": "TX", "queueId": 1}).code == 0
        expected = [b"body-4"] if answer == 8 else []
        assert [view.body for view in visible(broker)] == expected
        assert broker.transactions.halves.pending() == []
        late = client.call(END, end_fields(sent, 8))  # the first copy, answered late
        assert late.code == ResponseCode.SUCCESS  # as RocketMQ; nothing is written again
        assert [view.body for view in visible(broker)] == expected


def test_a_half_nobody_answers_is_discarded_after_the_check_limit(served):
    broker, server = served
    with producer(server) as client:
        sent = send_half(client, 5)
        checks = [next_check(client), next_check(client)]
        assert [c.ext_fields["msgId"] for c in checks] == [UNIQ.format(5)] * 2
        with pytest.raises(queue.Empty):
            next_check(client, timeout_s=1.5)
    assert broker.transactions.halves.pending() == []
    [kept] = visible(broker, TRANSACTION_CHECK_MAX_TIME_TOPIC, 0)
    assert kept.body == b"body-5" and kept.properties["REAL_TOPIC"] == "TX"
    assert kept.properties["TRANSACTION_CHECK_TIMES"] == "2"
    assert broker.topic_config(TRANSACTION_CHECK_MAX_TIME_TOPIC).read_queue_nums == 1
    resent = broker.transactions.resend_discarded(kept.queue_offset)
    assert (resent.topic, resent.queue_id) == ("TX", 1)
    assert [view.body for view in visible(broker)] == [b"body-5"]
    assert sent["queueOffset"] == "0"


def test_pending_halves_survive_kill_9_of_the_broker_process(tmp_path):
    conf = write_broker_conf(tmp_path)
    conf.write_text(conf.read_text() + "transactionTimeOut=2000\ntransactionCheckInterval=2000\n"
                    "transactionOpBatchInterval=60000\n")  # the commit's op: gathered at the kill
    server = BrokerProcess(tmp_path / "store", broker_conf=conf).start()
    try:
        with RawRemotingClient(server.remoting_address) as client:
            committed, rolled, pending = (send_half(client, n) for n in (6, 7, 8))
            client.oneway(END, end_fields(committed, 8))
            client.oneway(END, end_fields(rolled, 12))
            assert client.call(END, end_fields(pending, 0)).code == ResponseCode.SUCCESS
        server.kill()
        server = BrokerProcess(tmp_path / "store", broker_conf=conf).start()
        with producer_at(server.remoting_address) as client:
            check = next_check(client, timeout_s=30)
            assert check.ext_fields["msgId"] == UNIQ.format(8)
            client.oneway(END, {"producerGroup": "PG", "commitOrRollback": 8,
                                "tranStateTableOffset": check.ext_fields["tranStateTableOffset"],
                                "commitLogOffset": check.ext_fields["commitLogOffset"],
                                "fromTransactionCheck": "true"})
            with pytest.raises(queue.Empty):
                next_check(client, timeout_s=3)
            pulled = client.call(RequestCode.PULL_MESSAGE,
                                 pull_fields("G", "TX", 1, 0, sys_flag=0x6, suspend_ms=3000))
            assert pulled.code == ResponseCode.SUCCESS, pulled.remark
            assert [r.body for r in decode_records(pulled.body)] == [b"body-6", b"body-8"]
            ops = client.call(RequestCode.PULL_MESSAGE, pull_fields(
                "G", TRANSACTION_OP_TOPIC, 0, 0, sys_flag=0x4, suspend_ms=0))
            # the rollback's op (at once), then the commit's, written by the recovery (the
            # check's commit is gathered still)
            assert ops.code == ResponseCode.SUCCESS, (ops.code, ops.remark)
            assert [r.body for r in decode_records(ops.body)] == [b"1,", b"0,"]
    finally:
        server.kill()
