"""A heavy or hostile peer of ``postbox broker start`` cannot starve a well-behaved producer:
a heartbeat naming thousands of groups is refused whole (naming the option that raises the
limit) and creates nothing; a flood of pipelined queries on a SYNC_FLUSH broker fills the query
lane (queries are refused ``[OVERLOAD]``), while a producer's sends keep completing on their own
lane. Real process, real sockets."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.remoting_raw import RawRemotingClient, send_fields
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.network.protocol.wire import RemotingCommand, encode
from tests.support.broker_process import TEST_BROKER_CONF, BrokerProcess
from tests.support.polling import wait_until

SENDS = 20


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator:
    """Factory of ``postbox broker start`` processes (SYNC_FLUSH), stopped (exit 0) at
    teardown."""
    started: list[BrokerProcess] = []

    def start(*extra: str) -> BrokerProcess:
        conf = tmp_path / f"broker-{len(started)}.conf"
        conf.write_text(TEST_BROKER_CONF + "flushDiskType=SYNC_FLUSH\n")
        process = BrokerProcess(tmp_path / f"store-{len(started)}", broker_conf=conf,
                                extra=extra).start()
        started.append(process)
        return process

    yield start
    for process in started:
        assert process.stop() == 0, process.stderr_text()


def heartbeat_body(groups: int, subscriptions: int = 1, prefix: str = "G") -> bytes:
    consumers = [{"groupName": f"{prefix}{number}", "consumeType": "CONSUME_PASSIVELY",
                  "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                  "subscriptionDataSet": [{"topic": f"T{topic}", "subString": "*"}
                                          for topic in range(subscriptions)]}
                 for number in range(groups)]
    return json.dumps({"clientID": "hostile@1", "consumerDataSet": consumers,
                       "producerDataSet": []}).encode()


def routed(process: BrokerProcess, topic: str) -> int:
    with RawRemotingClient(process.namesrv_address) as namesrv:
        return namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}).code


def test_a_heartbeat_over_the_group_limit_is_refused_whole_and_creates_nothing(start_broker):
    broker = start_broker()
    with RawRemotingClient(broker.remoting_address) as client:
        answer = client.call(RequestCode.HEART_BEAT, body=heartbeat_body(1000), timeout_s=30)
        assert answer.code == ResponseCode.INVALID_PARAMETER, answer.remark
        assert "1000 consumer groups" in answer.remark
        assert "--heartbeat-max-groups" in answer.remark
        wide = client.call(RequestCode.HEART_BEAT, body=heartbeat_body(2, 5000), timeout_s=30)
        assert wide.code == ResponseCode.INVALID_PARAMETER, wide.remark
        assert "--heartbeat-max-subscriptions" in wide.remark
        sent = client.call(RequestCode.SEND_MESSAGE_V2, send_fields("TP", 0), b"still served")
        assert sent.code == ResponseCode.SUCCESS, sent.remark
    for group in ("G0", "G999"):
        assert routed(broker, f"%RETRY%{group}") == ResponseCode.TOPIC_NOT_EXIST


def test_the_heartbeat_limits_are_set_on_the_command_line(start_broker):
    broker = start_broker("--heartbeat-max-groups", "3", "--heartbeat-max-subscriptions", "4")
    with RawRemotingClient(broker.remoting_address) as client:
        refused = client.call(RequestCode.HEART_BEAT, body=heartbeat_body(4))
        assert refused.code == ResponseCode.INVALID_PARAMETER, refused.remark
        assert "over the limit of 3" in refused.remark
        too_wide = client.call(RequestCode.HEART_BEAT, body=heartbeat_body(2, 3))
        assert "over the limit of 4" in too_wide.remark
        accepted = client.call(RequestCode.HEART_BEAT, body=heartbeat_body(3, 1, "OK"))
        assert accepted.code == ResponseCode.SUCCESS, accepted.remark
    assert routed(broker, "%RETRY%OK2") == ResponseCode.SUCCESS


class Flood:
    """Connections that write pipelined QUERY_MESSAGE frames as fast as the broker reads them
    and throw the answers away."""

    def __init__(self, address: str, connections: int = 8, frames: int = 2000) -> None:
        host, port = address.rsplit(":", 1)
        query = RemotingCommand.request(RequestCode.QUERY_MESSAGE, {
            "topic": "TP", "key": "k", "maxNum": 32, "beginTimestamp": 0,
            "endTimestamp": 2**62})
        self._blob = encode(query) * frames
        self._stop = threading.Event()
        self._sockets = [socket.create_connection((host, int(port))) for _ in range(connections)]
        self.answered_bytes = 0
        self.overloaded = 0  # answers refusing a query: the query lane's queue is full
        self._threads = [threading.Thread(target=target, args=(sock,), daemon=True)
                         for sock in self._sockets for target in (self._write, self._drain)]
        for thread in self._threads:
            thread.start()

    def _write(self, sock: socket.socket) -> None:
        try:
            while not self._stop.is_set():
                sock.sendall(self._blob)
        except OSError:
            pass

    def _drain(self, sock: socket.socket) -> None:
        try:
            while data := sock.recv(1 << 16):
                self.answered_bytes += len(data)
                self.overloaded += data.count(b"[OVERLOAD]")
        except OSError:
            pass

    def stop(self) -> None:
        self._stop.set()
        for sock in self._sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        for thread in self._threads:
            thread.join(10)


def test_sends_keep_completing_under_a_flood_of_queries(start_broker):
    broker = start_broker()
    with RawRemotingClient(broker.remoting_address) as producer:
        keyed = send_fields("TP", 0, properties={"KEYS": "k"})
        assert producer.call(RequestCode.SEND_MESSAGE_V2, keyed, b"indexed").code == 0
        flood = Flood(broker.remoting_address)
        try:
            wait_until(lambda: flood.overloaded, timeout_s=60, what="a query refused [OVERLOAD]")
            # asynchronous sends: all in one write, so they meet the flood's full queue at once
            answers = producer.pipeline([
                producer.request(RequestCode.SEND_MESSAGE_V2, send_fields("TP", 1),
                                 f"sent under a flood {number}".encode())
                for number in range(SENDS)])
            codes = [answer.get(timeout=60).code for answer in answers]
        finally:
            flood.stop()
    assert codes == [ResponseCode.SUCCESS] * SENDS
