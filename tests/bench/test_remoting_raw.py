"""The raw remoting client the broker's tests lean on: a quiet peer is not a closed one."""

from __future__ import annotations

import socket
import threading

from bench.remoting_raw import RawRemotingClient
from postbox.network.protocol.codes import FLAG_RESPONSE, RequestCode
from postbox.network.protocol.wire import FrameDecoder, RemotingCommand, encode


def test_an_answer_after_the_socket_timeout_still_arrives_and_the_peer_is_not_closed():
    """The socket's timeout bounds connecting and writing; a reader that gave up after it
    (as it once did) lost every later answer and claimed the peer had closed."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        request_read, answer_now = threading.Event(), threading.Event()

        def serve() -> None:
            peer, _ = listener.accept()
            with peer:
                decoder = FrameDecoder()
                request = None
                while request is None:
                    request = next(iter(decoder.feed(peer.recv(4096))), None)
                request_read.set()
                answer_now.wait(10)
                peer.sendall(encode(RemotingCommand(code=0, opaque=request.opaque,
                                                    flag=FLAG_RESPONSE, remark="late")))
                peer.recv(1)  # until the client closes

        server = threading.Thread(target=serve, daemon=True)
        server.start()
        with RawRemotingClient(listener.getsockname(), timeout_s=0.2) as client:
            answers = client.start_call(client.request(RequestCode.HEART_BEAT))
            assert request_read.wait(10)
            assert not client.closed_by_peer.wait(1.0)  # five timeouts of quiet
            answer_now.set()
            assert answers.get(timeout=10).remark == "late"
        server.join(10)
        assert client.closed_by_peer.is_set()  # ``close`` ends the reader
