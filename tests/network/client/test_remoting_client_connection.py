"""The remoting client's ``Connection`` against a tiny real TCP peer (no mocks)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from postbox.network.client.connection import Connection, Connections
from postbox.network.client.errors import (
    ConnectionClosedError,
    RemotingClientError,
    RemotingTimeoutError,
)
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.network.protocol.wire import RemotingCommand
from postbox.storage_engine.errors import BrokerUnavailableError
from tests.support.tiny_remoting_server import PeerSocket, TinyRemotingServer, free_port_address


def echo(command: RemotingCommand, peer: PeerSocket) -> list[bytes | RemotingCommand]:
    """Answer with the request's ``n`` field in the remark."""
    return [command.response(0, remark=command.ext_fields.get("n"))]


@pytest.fixture
def servers() -> Iterator[list[TinyRemotingServer]]:
    started: list[TinyRemotingServer] = []
    yield started
    for server in started:
        server.close()


def start(servers: list[TinyRemotingServer], handler) -> TinyRemotingServer:  # type: ignore[no-untyped-def]
    server = TinyRemotingServer(handler)
    servers.append(server)
    return server


def test_concurrent_calls_get_their_own_answers_even_out_of_order(servers) -> None:
    held: list[RemotingCommand] = []
    lock = threading.Lock()

    def reverse(command: RemotingCommand, peer: PeerSocket) -> list[bytes | RemotingCommand]:
        with lock:  # hold 8 requests, then answer them last-first
            held.append(command)
            if len(held) < 8:
                return []
            batch = list(reversed(held))
            held.clear()
        return [item.response(0, remark=item.ext_fields["n"]) for item in batch]

    server = start(servers, reverse)
    connection = Connection(server.address)
    try:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(
                lambda n: connection.call(RemotingCommand.request(99, {"n": n}), 5000).remark,
                [str(n) for n in range(64)]))
        assert answers == [str(n) for n in range(64)]
        assert connection._pending == {}
    finally:
        connection.close()


def test_timeout_removes_the_call_and_a_late_answer_goes_nowhere(servers) -> None:
    late: list[RemotingCommand] = []

    def slow_then_fast(command: RemotingCommand, peer: PeerSocket) -> list[bytes | RemotingCommand]:
        if command.ext_fields["n"] == "slow":
            late.append(command)
            return []
        if late:  # answer the timed-out call first, then this one
            return [late.pop().response(0, remark="slow"), command.response(0, remark="fast")]
        return [command.response(0, remark="fast")]

    server = start(servers, slow_then_fast)
    connection = Connection(server.address)
    try:
        with pytest.raises(RemotingTimeoutError) as raised:
            connection.call(RemotingCommand.request(99, {"n": "slow"}), 50)
        assert isinstance(raised.value, BrokerUnavailableError)
        assert raised.value.address == server.address and "50 ms" in str(raised.value)
        assert connection._pending == {}
        assert connection.call(RemotingCommand.request(99, {"n": "fast"}), 5000).remark == "fast"
        assert connection._pending == {}
    finally:
        connection.close()


def test_peer_going_away_fails_pending_calls_and_the_next_call_reconnects(servers) -> None:
    arrived = threading.Event()

    def swallow_first(command: RemotingCommand, peer: PeerSocket) -> list[bytes | RemotingCommand]:
        if command.ext_fields["n"] == "first":
            arrived.set()
            return []
        return [command.response(0, remark="again")]

    server = start(servers, swallow_first)
    connection = Connection(server.address)
    try:
        pending = connection.call_async(RemotingCommand.request(99, {"n": "first"}))
        assert arrived.wait(5)
        server.drop_connections()
        with pytest.raises(ConnectionClosedError, match=r"closed by the peer|read failed"):
            pending.result(timeout=5)
        answer = connection.call(RemotingCommand.request(99, {"n": "second"}), 5000)
        assert answer.remark == "again"
        assert len(server.peers) == 2
    finally:
        connection.close()


def test_malformed_frame_closes_the_socket_only(servers) -> None:
    def garbage_first(command: RemotingCommand, peer: PeerSocket) -> list[bytes | RemotingCommand]:
        if command.ext_fields["n"] == "first":
            return [b"\x00\x00\x00\x08\x07\x00\x00\x00\x00\x00\x00\x00"]  # serialize type 7
        return [command.response(0, remark="ok")]

    server = start(servers, garbage_first)
    connection = Connection(server.address)
    try:
        with pytest.raises(ConnectionClosedError, match="malformed frame"):
            connection.call(RemotingCommand.request(99, {"n": "first"}), 5000)
        assert connection.call(RemotingCommand.request(99, {"n": "x"}), 5000).remark == "ok"
    finally:
        connection.close()


def test_unreachable_peer_is_a_clear_broker_unavailable_error() -> None:
    address = free_port_address()
    connection = Connection(address, connect_timeout_ms=1000)
    with pytest.raises(ConnectionClosedError, match=f"cannot connect to {address}") as raised:
        connection.call(RemotingCommand.request(99), 1000)
    assert isinstance(raised.value, BrokerUnavailableError)
    assert isinstance(raised.value, RemotingClientError)
    connection.close()
    with pytest.raises(ConnectionClosedError, match="closed"):
        connection.call(RemotingCommand.request(99), 1000)


def test_peer_requests_are_served_off_the_reader_and_oneway_ones_unanswered(servers) -> None:
    answers: list[RemotingCommand] = []
    got_answers = threading.Semaphore(0)
    notified = threading.Event()

    def collect(command: RemotingCommand, peer: PeerSocket) -> list[bytes | RemotingCommand]:
        if command.is_response:
            answers.append(command)
            got_answers.release()
            return []
        return [command.response(0, remark="pong")]

    server = start(servers, collect)
    connections = Connections()
    in_handler: list[str] = []

    def on_notify(command: RemotingCommand, connection: Connection) -> RemotingCommand | None:
        in_handler.append(threading.current_thread().name)
        # a call from inside the handler must not deadlock the reader
        assert connection.call(RemotingCommand.request(99), 5000).remark == "pong"
        notified.set()
        return None

    def on_running_info(command: RemotingCommand, connection: Connection
                        ) -> RemotingCommand | None:
        return command.response(0, body=b'{"ok":true}')

    connections.add_handler(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, on_notify)
    connections.add_handler(RequestCode.GET_CONSUMER_RUNNING_INFO, on_running_info)
    try:
        connections.call(server.address, RemotingCommand.request(99), 5000)
        peer = server.peers[0]
        peer.send(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                          {"consumerGroup": "g"}, oneway=True))
        assert notified.wait(5)
        assert in_handler and not in_handler[0].startswith("remoting-reader")
        info = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO)
        peer.send(info)
        unknown = RemotingCommand.request(4242)
        peer.send(unknown)
        assert got_answers.acquire(timeout=5) and got_answers.acquire(timeout=5)
        by_opaque = {answer.opaque: answer for answer in answers}
        assert by_opaque[info.opaque].code == 0 and by_opaque[info.opaque].body == b'{"ok":true}'
        assert by_opaque[unknown.opaque].code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert len(answers) == 2  # the oneway notification got none
    finally:
        connections.close()


def test_oneway_sends_the_oneway_flag_and_waits_for_nothing(servers) -> None:
    seen = threading.Event()

    def record(command: RemotingCommand, peer: PeerSocket) -> list[bytes | RemotingCommand]:
        seen.set()
        return []

    server = start(servers, record)
    connection = Connection(server.address)
    try:
        connection.oneway(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET))
        assert seen.wait(5)
        assert server.received[0].is_oneway and connection._pending == {}
    finally:
        connection.close()


def test_before_send_sees_every_request(servers) -> None:
    server = start(servers, echo)

    def stamp(command: RemotingCommand) -> RemotingCommand:
        command.ext_fields["AccessKey"] = "ak"
        return command

    connections = Connections(before_send=stamp)
    try:
        connections.call(server.address, RemotingCommand.request(99, {"n": "1"}), 5000)
        assert server.received[0].ext_fields == {"n": "1", "AccessKey": "ak"}
    finally:
        connections.close()
