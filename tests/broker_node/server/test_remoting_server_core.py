"""The remoting server core over real sockets: handlers, oneway, unknown codes, access control,
header errors, malformed frames (one connection closed, the others served), the connection
cap, broker → client calls, and stop ending every thread."""

from __future__ import annotations

import errno
import queue
import socket
import struct
import threading

import pytest

from bench.remoting_raw import RawRemotingClient
from postbox.broker_node.server import (
    AccessDeniedError,
    CallTimeoutError,
    RemotingServer,
    ServerLimits,
    Session,
)
from postbox.network.protocol.codes import SERVER_VERSION, ResponseCode
from postbox.network.protocol.wire import RemotingCommand
from tests.support.polling import wait_until

ECHO, SLOW, ONEWAY_SINK, FIELDS = 9001, 9002, 9003, 9004


@pytest.fixture
def server():
    sink: queue.Queue[str] = queue.Queue()
    remoting = RemotingServer()

    def echo(request: RemotingCommand, session: Session) -> RemotingCommand:
        return request.response(0, {"peer": session.peer_address,
                                    "lang": session.language}, request.body)

    def slow(request: RemotingCommand, session: Session) -> RemotingCommand:
        return request.response(0, {"thread": threading.current_thread().name})

    def oneway_sink(request: RemotingCommand, session: Session) -> RemotingCommand:
        sink.put(request.ext_fields.get("v", ""))
        return request.response(0)

    def fields(request: RemotingCommand, session: Session) -> RemotingCommand:
        return request.response(0, {"n": request.fields.get_int("n", low=0, high=10)})

    remoting.handlers.register(ECHO, echo, inline=True)
    remoting.handlers.register(SLOW, slow)
    remoting.handlers.register(ONEWAY_SINK, oneway_sink, inline=True)
    remoting.handlers.register(FIELDS, fields, inline=True)
    remoting.sink = sink  # type: ignore[attr-defined]
    remoting.start()
    yield remoting
    remoting.stop()


def test_inline_and_worker_handlers_answer_with_the_requests_opaque(server):
    with RawRemotingClient(server.address) as client:
        request = client.request(ECHO, {"a": "1"}, b"body")
        answer = client.call_command(request)
        assert answer.is_response and answer.opaque == request.opaque
        assert answer.body == b"body" and answer.ext_fields["lang"] == "JAVA"
        assert answer.version == SERVER_VERSION
        assert answer.ext_fields["peer"].startswith("127.0.0.1:")
        worker = client.call(SLOW)
        assert worker.code == 0 and worker.ext_fields["thread"].startswith("remoting-worker")


def test_pipelined_requests_all_answered(server):
    with RawRemotingClient(server.address) as client:
        requests = [client.request(ECHO if n % 2 else SLOW, {"n": n}) for n in range(200)]
        answers = [answer.get(timeout=10) for answer in client.pipeline(requests)]
        assert [a.opaque for a in answers] == [r.opaque for r in requests]
        assert all(a.code == 0 for a in answers)


def test_unknown_code_answers_request_code_not_supported(server):
    with RawRemotingClient(server.address) as client:
        answer = client.call(4242)
        assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert answer.remark == " request type 4242 not supported"


def test_oneway_gets_no_answer_even_for_errors(server):
    with RawRemotingClient(server.address) as client:
        client.oneway(4242)  # unknown code: no answer
        client.oneway(FIELDS, {"n": "x"})  # bad field: no answer
        client.oneway(ONEWAY_SINK, {"v": "seen"})
        assert server.sink.get(timeout=5) == "seen"
        # the next call's answer is the first frame the client gets back
        answer = client.call(ECHO)
        assert answer.code == 0
        with client._lock:
            assert not client._waiting


def test_header_field_errors_name_the_field(server):
    with RawRemotingClient(server.address) as client:
        missing = client.call(FIELDS)
        assert missing.code == ResponseCode.SYSTEM_ERROR
        assert missing.remark == "the custom field <n> is null"
        bad = client.call(FIELDS, {"n": "eleven"})
        assert bad.code == ResponseCode.INVALID_PARAMETER and "'n'" in bad.remark
        over = client.call(FIELDS, {"n": 11})
        assert over.code == ResponseCode.INVALID_PARAMETER and "outside" in over.remark


def test_access_control_refusal_answers_no_permission(server):
    class DenyEcho:
        def check(self, request, session):
            if request.code == ECHO:
                raise AccessDeniedError(f"no right for {request.code}")

    server.access = DenyEcho()
    with RawRemotingClient(server.address) as client:
        answer = client.call(ECHO)
        assert answer.code == ResponseCode.NO_PERMISSION and answer.remark == "no right for 9001"
        assert client.call(SLOW).code == 0


def test_malformed_frame_closes_that_connection_only(server):
    with RawRemotingClient(server.address) as good, RawRemotingClient(server.address) as bad:
        assert good.call(ECHO).code == 0
        bad.send_bytes(struct.pack(">ii", 8, 0x05000004) + b"\0\0\0\0")  # serialize type 5
        assert bad.closed_by_peer.wait(5)
        with RawRemotingClient(server.address) as huge:
            huge.send_bytes(struct.pack(">i", 64 * 1024 * 1024))  # over the frame limit
            assert huge.closed_by_peer.wait(5)
        assert good.call(ECHO, body=b"still here").body == b"still here"


def test_connection_cap_closes_the_extra_connection():
    with RemotingServer(limits=ServerLimits(max_connections=2, reserved_connections=0)) as server:
        server.handlers.register(ECHO, lambda r, s: r.response(0), inline=True)
        with RawRemotingClient(server.address) as one, RawRemotingClient(server.address) as two:
            assert one.call(ECHO).code == 0 and two.call(ECHO).code == 0
            with RawRemotingClient(server.address) as three:
                assert three.closed_by_peer.wait(5)
            assert one.call(ECHO).code == 0


def test_broker_to_client_call_and_oneway(server):
    with RawRemotingClient(server.address) as client:
        client.answer_calls = lambda request: request.response(0, {"got": request.code})
        assert client.call(ECHO).code == 0
        (session,) = server.sessions()
        answer = session.call(RemotingCommand(code=307), timeout_ms=5000)
        assert answer.code == 0 and answer.ext_fields["got"] == "307"
        session.send_oneway(RemotingCommand(code=40, ext_fields={"consumerGroup": "g"}))
        first = client.server_requests.get(timeout=5)
        assert first.code == 307
        second = client.server_requests.get(timeout=5)
        assert second.code == 40 and second.is_oneway
        client.answer_calls = lambda request: None
        with pytest.raises(CallTimeoutError):
            session.call(RemotingCommand(code=307), timeout_ms=200)


def test_close_listeners_hear_closed_connections(server):
    closed: queue.Queue[Session] = queue.Queue()
    server.add_close_listener(closed.put)
    client = RawRemotingClient(server.address)
    assert client.call(ECHO).code == 0
    client.close()
    session = closed.get(timeout=5)
    assert session.closed and session.peer_address.startswith("127.0.0.1:")


def test_stop_closes_connections_and_ends_its_threads():
    server = RemotingServer()
    server.handlers.register(ECHO, lambda r, s: r.response(0), inline=True)
    server.start()
    before = {t.name for t in threading.enumerate()}
    assert any(name.startswith("remoting-io") for name in before)
    client = RawRemotingClient(server.address)
    assert client.call(ECHO).code == 0
    server.stop()
    assert client.closed_by_peer.wait(5)
    client.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("remoting-")]
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(server.address, timeout=1).close()


def test_full_worker_queue_answers_system_busy():
    release = threading.Event()
    limits = ServerLimits(workers=1, queue_max=1)
    with RemotingServer(limits=limits) as server, RawRemotingClient(server.address) as client:
        server.handlers.register(SLOW, lambda r, s: (release.wait(10), r.response(0))[1])
        # one request runs, at most one waits in the queue: the second or the third is
        # refused at once (after a refusal that connection's next frame waits a while)
        answers = client.pipeline([client.request(SLOW) for _ in range(3)])
        refused = wait_until(lambda: next((answer.get_nowait() for answer in answers[1:]
                                           if not answer.empty()), None), 5, "a refusal")
        assert refused.code == ResponseCode.SYSTEM_BUSY
        assert refused.remark.startswith("[OVERLOAD]")
        release.set()
        assert answers[0].get(timeout=5).code == 0


def test_binary_header_requests_are_served(server):
    from postbox.network.protocol.wire import SerializeType

    with RawRemotingClient(server.address) as client:
        request = client.request(ECHO, {"k": "v"}, b"bin")
        request.language = "GO"
        answer = client.start_call(request, SerializeType.ROCKETMQ).get(timeout=5)
        assert answer.code == 0 and answer.body == b"bin" and answer.ext_fields["lang"] == "GO"


def test_garbage_on_many_connections_leaves_the_server_serving(server):
    import random

    rng = random.Random(21)
    with RawRemotingClient(server.address) as good:
        for round_number in range(30):
            with RawRemotingClient(server.address) as noisy:
                size = rng.randrange(1, 64)
                payload = bytes(rng.randrange(256) for _ in range(rng.randrange(8, 200)))
                if round_number % 3 == 0:  # a plausible length word, then junk
                    payload = struct.pack(">i", size + 4) + payload[:size + 4]
                noisy.send_bytes(payload)
            assert good.call(ECHO, body=b"%d" % round_number).body == b"%d" % round_number
        assert len(server.sessions()) <= 2


def test_a_peer_that_never_reads_does_not_stall_the_others():
    limits = ServerLimits(max_output_bytes=256 * 1024)
    with RemotingServer(limits=limits) as server:
        server.handlers.register(ECHO, lambda r, s: r.response(0, body=bytes(64 * 1024)),
                                 inline=True)
        stalled = socket.create_connection(server.address)
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        from postbox.network.protocol.wire import encode
        burst = b"".join(encode(RemotingCommand.request(ECHO)) for _ in range(200))
        stalled.sendall(burst)  # 200 answers of 64 KiB it will never read
        with RawRemotingClient(server.address) as other:
            for _ in range(20):
                assert other.call(ECHO, timeout_s=5).code == 0
        stalled.close()


def test_idle_connections_are_closed():
    closed: queue.Queue[Session] = queue.Queue()
    with RemotingServer(limits=ServerLimits(idle_timeout_ms=300)) as server:
        server.handlers.register(ECHO, lambda r, s: r.response(0), inline=True)
        server.add_close_listener(closed.put)
        with RawRemotingClient(server.address) as idle, \
                RawRemotingClient(server.address) as busy:
            assert idle.call(ECHO).code == 0
            for _ in range(15):  # keeps talking for longer than the idle timeout
                assert busy.call(ECHO).code == 0
                threading.Event().wait(0.1)
            assert idle.closed_by_peer.wait(5)
            assert not busy.closed_by_peer.is_set() and busy.call(ECHO).code == 0
        assert closed.get(timeout=5).closed


def test_a_peer_that_takes_none_of_its_answers_is_closed_after_the_idle_timeout():
    limits = ServerLimits(max_output_bytes=256 * 1024, idle_timeout_ms=1000)
    with RemotingServer(limits=limits) as server:
        server.handlers.register(ECHO, lambda r, s: r.response(0, body=bytes(64 * 1024)),
                                 inline=True)
        stalled = socket.create_connection(server.address)
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        from postbox.network.protocol.wire import encode
        stalled.sendall(b"".join(encode(RemotingCommand.request(ECHO)) for _ in range(200)))
        with RawRemotingClient(server.address) as other:
            wait_until(lambda: other.call(ECHO, timeout_s=5).code == 0  # served meanwhile
                       and len(server.sessions()) == 1, 10, "the stalled peer closed")
        stalled.close()


def test_out_of_descriptors_at_accept_pauses_logs_once_and_accepts_again(server, monkeypatch,
                                                                         caplog):
    """``accept`` failing with EMFILE (the process out of descriptors): the listener pauses,
    logs one line for the whole run of failures, and accepts the connection once it can."""
    real_accept, failures = socket.socket.accept, []

    def accept(sock: socket.socket):
        if len(failures) < 5:
            failures.append(1)
            raise OSError(errno.EMFILE, "Too many open files")
        return real_accept(sock)

    monkeypatch.setattr(socket.socket, "accept", accept)
    with caplog.at_level("WARNING"), RawRemotingClient(server.address) as client:
        assert client.call(ECHO, body=b"x", timeout_s=10).body == b"x"
    assert len(failures) == 5
    assert sum("accept failed" in record.getMessage() for record in caplog.records) == 1
