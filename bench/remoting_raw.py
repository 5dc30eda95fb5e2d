"""A raw remoting client for benchmarks and tests: frames over a real socket, nothing hidden.

``RawRemotingClient(address)`` connects; ``call(code, fields, body)`` sends one request and
returns its response; ``oneway`` sends with flag bit 1; ``send_bytes`` writes anything (a
malformed frame); ``server_requests`` collects the broker → client requests (e.g. 40
NOTIFY_CONSUMER_IDS_CHANGED) that arrive, and ``answer_calls`` makes it reply to them. A reader
thread matches responses by opaque; ``close`` ends it. ``closed_by_peer`` is set when the
peer closes the connection (or it breaks), never because the peer was quiet for a while.
"""

from __future__ import annotations

import json
import queue
import socket
import struct
import threading
from typing import Any

from postbox.network.protocol.wire import (
    FrameDecoder,
    RemotingCommand,
    SerializeType,
    WireError,
    encode,
)
from postbox.storage_engine.formats.topic_names import AUTO_CREATE_TOPIC


class RawRemotingClient:
    """One connection to a remoting server."""

    def __init__(self, address: tuple[str, int] | str | None, *, language: str = "JAVA",
                 version: int = 479, sock: socket.socket | None = None,
                 timeout_s: float = 10.0) -> None:
        if isinstance(address, str):
            host, port = address.rsplit(":", 1)
            address = (host, int(port))
        if sock is None:
            assert address is not None
            sock = socket.create_connection(address, timeout=timeout_s)
        self.sock = sock
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.language, self.version = language, version
        self._lock = threading.Lock()
        self._waiting: dict[int, queue.Queue[RemotingCommand]] = {}
        self.server_requests: queue.Queue[RemotingCommand] = queue.Queue()
        self.answer_calls: Any = None  # callable(request) -> RemotingCommand | None
        self.closed_by_peer = threading.Event()
        self._reader = threading.Thread(target=self._read, name="raw-remoting-reader",
                                        daemon=True)
        self._reader.start()

    @classmethod
    def over(cls, sock: socket.socket) -> RawRemotingClient:
        """A client on a socket already connected (e.g. from a chosen source address)."""
        return cls(None, sock=sock)

    def request(self, code: int, fields: dict[str, Any] | None = None, body: bytes = b"", *,
                oneway: bool = False) -> RemotingCommand:
        """A request command as this client would send it."""
        command = RemotingCommand.request(code, fields, body, oneway=oneway,
                                          version=self.version)
        command.language = self.language
        return command

    def call(self, code: int, fields: dict[str, Any] | None = None, body: bytes = b"", *,
             timeout_s: float = 10.0) -> RemotingCommand:
        """Send a request and wait for its response."""
        return self.call_command(self.request(code, fields, body), timeout_s=timeout_s)

    def call_command(self, command: RemotingCommand, *, timeout_s: float = 10.0
                     ) -> RemotingCommand:
        """Send ``command`` and wait for the response with its opaque."""
        answers = self.start_call(command)
        return answers.get(timeout=timeout_s)

    def start_call(self, command: RemotingCommand,
                   serialize_type: SerializeType = SerializeType.JSON
                   ) -> queue.Queue[RemotingCommand]:
        """Send ``command`` (JSON or binary header); the returned queue receives its
        response."""
        answers: queue.Queue[RemotingCommand] = queue.Queue()
        with self._lock:
            self._waiting[command.opaque] = answers
        self.send_bytes(encode(command, serialize_type))
        return answers

    def pipeline(self, commands: list[RemotingCommand]) -> list[queue.Queue[RemotingCommand]]:
        """Send all ``commands`` in one write; one response queue each."""
        queues = []
        with self._lock:
            for command in commands:
                queues.append(queue.Queue())
                self._waiting[command.opaque] = queues[-1]
        self.send_bytes(b"".join(encode(command) for command in commands))
        return queues

    def call_frame(self, frame: bytes, opaque: int, *, timeout_s: float = 10.0
                   ) -> RemotingCommand:
        """Write a frame built by hand (``ascii_frame``) and wait for the answer to
        ``opaque``."""
        answers: queue.Queue[RemotingCommand] = queue.Queue()
        with self._lock:
            self._waiting[opaque] = answers
        self.send_bytes(frame)
        return answers.get(timeout=timeout_s)

    def oneway(self, code: int, fields: dict[str, Any] | None = None, body: bytes = b"") -> None:
        """Send a oneway request (no response expected)."""
        self.send_bytes(encode(self.request(code, fields, body, oneway=True)))

    def send_bytes(self, data: bytes) -> None:
        """Write raw bytes."""
        self.sock.sendall(data)

    def close(self) -> None:
        """Close the socket and end the reader."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._reader.join(5)

    def __enter__(self) -> RawRemotingClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _read(self) -> None:
        """Read until the peer closes, the connection breaks or ``close``; the socket's
        timeout (``create_connection``'s 10 s, for connecting and writing) only means nothing
        came for that long, never that the peer closed."""
        decoder = FrameDecoder()
        try:
            while True:
                try:
                    data = self.sock.recv(1 << 16)
                except TimeoutError:
                    continue
                if not data:
                    break
                for command in decoder.feed(data):
                    self._on_command(command)
        except (OSError, WireError):
            pass
        self.closed_by_peer.set()

    def _on_command(self, command: RemotingCommand) -> None:
        if not command.is_response:
            self.server_requests.put(command)
            if self.answer_calls is not None and not command.is_oneway:
                answer = self.answer_calls(command)
                if answer is not None:
                    self.send_bytes(encode(answer))
            return
        with self._lock:
            answers = self._waiting.pop(command.opaque, None)
        if answers is not None:
            answers.put(command)


def ascii_frame(code: int, fields: dict[str, Any], opaque: int, body: bytes = b"") -> bytes:
    """A request frame whose JSON header escapes every non-ASCII character (``\\uXXXX``, as
    some peers write it), so a lone surrogate in ``fields`` reaches the server as the escape
    ``\\ud800``; built by hand, independently of ``wire.encode``."""
    header = json.dumps({"code": code, "flag": 0, "language": "JAVA", "opaque": opaque,
                         "serializeTypeCurrentRPC": "JSON", "version": 479,
                         "extFields": {key: str(value) for key, value in fields.items()}},
                        ensure_ascii=True).encode("ascii")
    return struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body


def nested_frame(depth: int, opaque: int = 1) -> bytes:
    """A frame whose JSON header nests ``depth`` arrays in ``extFields``."""
    header = (f'{{"code":105,"flag":0,"language":"JAVA","opaque":{opaque},"version":479,'
              f'"extFields":{{"topic":{"[" * depth}{"]" * depth}}}}}').encode()
    return struct.pack(">iI", 4 + len(header), len(header)) + header


def properties_text(properties: dict[str, str]) -> str:
    """A send header's properties string."""
    return "".join(f"{name}\x01{value}\x02" for name, value in properties.items())


def send_fields(topic: str, queue_id: int = 0, *, properties: dict[str, str] | None = None,
                group: str = "PG", v2: bool = True, **extra: Any) -> dict[str, Any]:
    """The header of a send (V2 one-letter keys, or V1 names)."""
    fields = {"producerGroup": group, "topic": topic, "defaultTopic": AUTO_CREATE_TOPIC,
              "defaultTopicQueueNums": 4, "queueId": queue_id, "sysFlag": 0,
              "bornTimestamp": 1_700_000_000_000, "flag": 0,
              "properties": properties_text(properties or {}), "reconsumeTimes": 0,
              "unitMode": False, **extra}
    if not v2:
        return fields
    keys = {"producerGroup": "a", "topic": "b", "defaultTopic": "c",
            "defaultTopicQueueNums": "d", "queueId": "e", "sysFlag": "f", "bornTimestamp": "g",
            "flag": "h", "properties": "i", "reconsumeTimes": "j", "unitMode": "k",
            "maxReconsumeTimes": "l", "batch": "m", "brokerName": "n"}
    return {keys[name]: value for name, value in fields.items()}


def pull_fields(group: str, topic: str, queue_id: int, offset: int, *, max_count: int = 32,
                sys_flag: int = 0x4, suspend_ms: int = 0, subscription: str = "*",
                commit_offset: int = 0) -> dict[str, Any]:
    """The header of a PULL_MESSAGE (subscription flag set by default)."""
    return {"consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
            "maxMsgNums": max_count, "sysFlag": sys_flag, "commitOffset": commit_offset,
            "suspendTimeoutMillis": suspend_ms, "subVersion": 0, "subscription": subscription,
            "expressionType": "TAG"}
