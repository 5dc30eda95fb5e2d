"""One frame never stops a listener of a ``postbox broker`` process: a JSON header nested 1 000
deep closes that one connection, and requests holding a lone surrogate (``\\ud800``, which
every refusal naming the value echoes back) are answered; a well-behaved client of the same
listener is served before, between and after every one of them. A registration carrying one is
answered, and the name server's cluster info still answers afterwards."""

from __future__ import annotations

import itertools
import zlib

from bench.remoting_raw import (
    RawRemotingClient,
    ascii_frame,
    nested_frame,
    pull_fields,
    send_fields,
)
from postbox.broker_node.namesrv.processor import GET_KV_CONFIG
from postbox.broker_node.namesrv.route_bodies import register_body
from postbox.broker_node.namesrv.route_table import QueueData
from postbox.network.protocol.codes import RequestCode, ResponseCode

LONE = "\ud800"
_opaques = itertools.count(1000)


def _served(client: RawRemotingClient, namesrv: bool) -> None:
    """The well-behaved client's call on that listener succeeds."""
    if namesrv:
        answer = client.call(RequestCode.GET_BROKER_CLUSTER_INFO)
    else:
        answer = client.call(RequestCode.SEND_MESSAGE_V2, send_fields("GoodTopic", 0), b"ok")
    assert answer.code == ResponseCode.SUCCESS, answer.remark


def test_a_deeply_nested_header_closes_its_connection_only(broker_server):
    server = broker_server()
    for address, namesrv in ((server.remoting_address, False), (server.namesrv_address, True)):
        with RawRemotingClient(address) as good:
            _served(good, namesrv)
            for depth in (1000, 50_000):
                with RawRemotingClient(address) as hostile:
                    hostile.send_bytes(nested_frame(depth))
                    assert hostile.closed_by_peer.wait(10), f"depth {depth} left open"
                _served(good, namesrv)
        with RawRemotingClient(address) as newcomer:
            _served(newcomer, namesrv)


def _registration(name: str) -> tuple[dict[str, object], bytes]:
    body = register_body({"t@LONE@": QueueData(name.replace(LONE, "@LONE@"), 2, 2, 6)},
                         {"counter": 1, "timestamp": 1}).replace(b"@LONE@", b"\\ud800")
    fields = {"brokerName": name, "brokerAddr": "127.0.0.1:1", "clusterName": "C" + LONE,
              "haServerAddr": "", "brokerId": 0, "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}
    return fields, body


def _hostile_requests() -> list[tuple[bool, int, dict[str, object], bytes]]:
    """(to the name server?, code, fields, body): values the answers echo back."""
    registration, body = _registration("b" + LONE)
    return [
        (True, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": LONE}, b""),
        (True, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders" + LONE}, b""),
        (True, RequestCode.REGISTER_BROKER, registration, body),
        (True, RequestCode.GET_BROKER_CLUSTER_INFO, {}, b""),
        (True, GET_KV_CONFIG, {"namespace": LONE, "key": LONE}, b""),
        (False, RequestCode.PULL_MESSAGE, pull_fields("G" + LONE, "T" + LONE, 0, 0), b""),
        (False, RequestCode.PULL_MESSAGE, pull_fields("G", "T", 0, 0, subscription=LONE), b""),
        (False, RequestCode.SEND_MESSAGE_V2, send_fields("T" + LONE, 0), b"x"),
        (False, RequestCode.SEND_MESSAGE_V2, send_fields("SCHEDULE_TOPIC_XXXX" + LONE, 0),
         b"x"),
        (False, RequestCode.SEND_MESSAGE_V2, send_fields("RMQ_SYS_TRACE_TOPIC", 0,
                                                         group=LONE), b"x"),
        (False, RequestCode.SEND_MESSAGE_V2,
         send_fields("GoodTopic", 0, properties={"KEYS": LONE, LONE: "v"}), b"x"),
        (False, RequestCode.HEART_BEAT, {}, b'{"clientID":"' + b"\\ud800" + b'"}'),
    ]


def test_lone_surrogates_echoed_in_answers_never_stop_a_listener(broker_server):
    server = broker_server()
    with RawRemotingClient(server.remoting_address) as good_broker, \
            RawRemotingClient(server.namesrv_address) as good_namesrv:
        for namesrv, code, fields, body in _hostile_requests():
            address = server.namesrv_address if namesrv else server.remoting_address
            with RawRemotingClient(address) as hostile:
                opaque = next(_opaques)
                answer = hostile.call_frame(ascii_frame(code, fields, opaque, body), opaque)
                assert answer.opaque == opaque
                if code == RequestCode.GET_BROKER_CLUSTER_INFO:
                    assert answer.code == ResponseCode.SUCCESS, answer.remark
            _served(good_broker, False)
            _served(good_namesrv, True)
        refused = good_namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "x" + LONE})
        assert refused.code == ResponseCode.TOPIC_NOT_EXIST
        assert refused.remark.endswith("x" + LONE)  # echoed as sent, as its JSON escape
