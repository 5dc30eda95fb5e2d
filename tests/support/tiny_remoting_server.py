"""A tiny real TCP peer speaking remoting frames, for the client's connection and route tests.

It listens on a free loopback port; each accepted socket gets a reader thread that decodes frames
with the project's ``FrameDecoder`` and hands each command to ``handler(command, peer_socket)``,
which returns a list of frames (bytes) to write back, in order, or writes them itself later
(``PeerSocket.send``). The test decides what an answer looks like: out of order, late, never,
malformed, or a request of its own to the client.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

from postbox.network.protocol.wire import FrameDecoder, RemotingCommand, encode


class PeerSocket:
    """One accepted connection (writes are serialized)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._lock = threading.Lock()

    def send(self, data: bytes | RemotingCommand) -> None:
        frame = encode(data) if isinstance(data, RemotingCommand) else data
        with self._lock:
            self.sock.sendall(frame)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


Handler = Callable[[RemotingCommand, PeerSocket], list[bytes | RemotingCommand] | None]


class TinyRemotingServer:
    """Serves ``handler`` on 127.0.0.1:<free port> until ``close()``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self.peers: list[PeerSocket] = []
        self.received: list[RemotingCommand] = []
        self.accepted = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._start(self._accept_loop)

    def _start(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            peer = PeerSocket(sock)
            self.peers.append(peer)
            self.accepted.release()
            self._start(self._read_loop, peer)

    def _read_loop(self, peer: PeerSocket) -> None:
        decoder = FrameDecoder()
        try:
            while True:
                data = peer.sock.recv(65536)
                if not data:
                    return
                for command in decoder.feed(data):
                    self.received.append(command)
                    for frame in self.handler(command, peer) or []:
                        peer.send(frame)
        except OSError:
            return

    def drop_connections(self) -> None:
        """Close every accepted socket (the client sees the peer go away)."""
        for peer in list(self.peers):
            peer.close()

    def close(self) -> None:
        self._closed = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass
        self._listener.close()
        self.drop_connections()
        for thread in self._threads:
            thread.join(timeout=5)


def free_port_address() -> str:
    """A loopback address nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"
