"""What one connection may hold of the broker, over real sockets to the in-process remoting
broker: its parked long polls are released when it closes (not kept until their suspend time),
and past ``ServerLimits.max_owed_answers`` requests waiting for their answers the server stops
reading from it — reading again once answers go out — while other clients are served."""

from __future__ import annotations

from pathlib import Path

from bench.remoting_raw import RawRemotingClient, pull_fields, send_fields
from postbox.broker_node.server import ServerLimits
from postbox.broker_node.server.broker import BrokerRemotingServer
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.storage_engine import Broker
from tests.support.polling import wait_until
from tests.support.small_store import small_store_config

PULL, SEND_V2 = RequestCode.PULL_MESSAGE, RequestCode.SEND_MESSAGE_V2


def _long_polls(client: RawRemotingClient, topic: str, count: int) -> list:
    return client.pipeline([client.request(PULL, pull_fields(
        "G", topic, 0, 0, sys_flag=0x6, suspend_ms=15_000)) for _ in range(count)])


def test_a_closed_connections_parked_long_polls_are_released(connect, broker, remoting):
    broker.create_topic("TP", 1)
    hold = remoting.pulls.hold
    hostile, good = connect(), connect()
    _long_polls(hostile, "TP", 500)
    wait_until(lambda: hold.parked_count == 500, what="500 long polls parked")
    hostile.close()
    wait_until(lambda: hold.parked_count == 0, 5, "the closed connection's polls released",
               detail=lambda: hold.parked_count)
    waiting = _long_polls(good, "TP", 1)[0]  # a well-behaved consumer still parks and gets
    wait_until(lambda: hold.parked_count == 1, what="the good poll parked")
    assert good.call(SEND_V2, send_fields("TP", 0), b"arrived").code == ResponseCode.SUCCESS
    assert waiting.get(timeout=10).code == ResponseCode.SUCCESS


def test_reading_stops_past_the_owed_answers_bound_and_resumes(tmp_path: Path):
    limits = ServerLimits(max_owed_answers=100)
    with Broker.open(small_store_config(tmp_path / "store")) as broker, \
            BrokerRemotingServer(broker, limits=limits) as server:
        broker.create_topic("TO", 1)
        hold = server.pulls.hold
        with RawRemotingClient(server.address) as hostile, \
                RawRemotingClient(server.address) as good:
            answers = _long_polls(hostile, "TO", 300)
            wait_until(lambda: hold.parked_count == 100, what="100 long polls parked")
            other = good.call(SEND_V2, send_fields("Other", 0), b"x")  # served meanwhile
            assert other.code == ResponseCode.SUCCESS
            assert hold.parked_count == 100  # the other 200 not read yet
            sent = good.call(SEND_V2, send_fields("TO", 0), b"wakes them")
            assert sent.code == ResponseCode.SUCCESS
            # the arrival answers the parked polls; the server reads the next ones, which find
            # the message at once: every poll is answered
            assert all(answer.get(timeout=10).code == ResponseCode.SUCCESS
                       for answer in answers)
            assert hold.parked_count == 0
