"""Remoting server benchmark: raw sends and pulls through ``BrokerRemotingServer`` vs the same
calls on the embedded ``Broker``, one run.

Run ``python -m bench.remoting_server_bench`` (``--messages N``, ``--threads T``). Each mode
gets a fresh store (ASYNC flush) in a temp dir:

* **embedded**: T threads call ``Broker.send(Message(topic, body), queue_id=t % 4)``, then 4
  threads pull every queue with ``Broker.pull(..., max_count=32)``.
* **inproc**: the same over TCP to a ``BrokerRemotingServer`` in this process (one GIL for
  client and server), each thread with its own connection and a minimal blocking client
  (SEND_MESSAGE_V2 with a UNIQ_KEY, PULL_MESSAGE with maxMsgNums 32).
* **2proc**: the server in a child process (this module with ``--serve DIR``), the clients here;
  **2proc-pipelined**: the same with ``--window`` sends in flight per connection (written in
  one go, then their answers read), as clients that share a connection between threads do.

Bodies are 100 bytes. Figures are messages per second; ratios are to embedded of the same run.
On a busy 2-core machine expect +-30 %.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from postbox.broker_node.server.broker import BrokerRemotingServer
from postbox.network.protocol.codes import RequestCode
from postbox.network.protocol.wire import FrameDecoder, RemotingCommand, encode
from postbox.storage_engine import Broker, Message, StoreConfig
from postbox.storage_engine.formats.topic_names import AUTO_CREATE_TOPIC

TOPIC = "BENCH"
BODY = b"x" * 100


class _Client:
    """One blocking connection: a request, then its answer."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = FrameDecoder()
        self.buffer = bytearray(1 << 16)  # recv_into: recv(1 MiB) would allocate per call

    def call(self, code: int, fields: dict, body: bytes = b"") -> RemotingCommand:
        return self.calls([RemotingCommand.request(code, fields, body)])[0]

    def calls(self, requests: list[RemotingCommand]) -> list[RemotingCommand]:
        """Send all ``requests`` in one write, then read as many answers (pipelining)."""
        self.sock.sendall(b"".join(encode(request) for request in requests))
        answers: list[RemotingCommand] = []
        while len(answers) < len(requests):
            size = self.sock.recv_into(self.buffer)
            if not size:
                raise ConnectionError("the server closed the connection")
            answers += self.decoder.feed(memoryview(self.buffer)[:size])
        return answers


def _parallel(count: int, work: Callable[[int], int]) -> tuple[float, int]:
    done = [0] * count
    threads = [threading.Thread(target=lambda n=n: done.__setitem__(n, work(n)))
               for n in range(count)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started, sum(done)


def _embedded(root: Path, messages: int, threads: int) -> tuple[float, float]:
    with Broker.open(StoreConfig(root_dir=root)) as broker:
        per = messages // threads

        def send(n: int) -> int:
            for _ in range(per):
                broker.send(Message(TOPIC, BODY), queue_id=n % 4)
            return per

        send_s, sent = _parallel(threads, send)
        broker.store.wait_dispatched()

        def pull(queue_id: int) -> int:
            offset = got = 0
            while (result := broker.pull("G", TOPIC, queue_id, offset, 32)).messages:
                offset, got = result.next_offset, got + len(result.messages)
            return got

        pull_s, pulled = _parallel(4, pull)
        assert pulled == sent, (pulled, sent)
        return sent / send_s, pulled / pull_s


def _remote(address: tuple[str, int], messages: int, threads: int,
            window: int = 1, topic: str = TOPIC) -> tuple[float, float]:
    per = messages // threads // window * window

    def send(n: int) -> int:
        client = _Client(address)
        fields = {"a": "PG", "b": topic, "c": AUTO_CREATE_TOPIC, "d": 4, "e": n % 4, "f": 0, "h": 0,
                  "g": 0}
        for first in range(0, per, window):
            requests = [RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, {
                **fields, "i": f"UNIQ_KEY\x01{n:08X}{number:024X}\x02WAIT\x01true\x02"},
                BODY) for number in range(first, first + window)]
            for answer in client.calls(requests):
                assert answer.code == 0, answer.remark
        client.sock.close()
        return per

    send_s, sent = _parallel(threads, send)
    time.sleep(0.5)  # dispatch

    def pull(queue_id: int) -> int:
        client = _Client(address)
        offset = got = 0
        while True:
            answer = client.call(RequestCode.PULL_MESSAGE, {
                "consumerGroup": "G", "topic": topic, "queueId": queue_id,
                "queueOffset": offset, "maxMsgNums": 32, "sysFlag": 4, "commitOffset": 0,
                "suspendTimeoutMillis": 0, "subVersion": 0, "subscription": "*"})
            if answer.code != 0:
                break
            offset = int(answer.ext_fields["nextBeginOffset"])
            got += _count_records(answer.body)
        client.sock.close()
        return got

    pull_s, pulled = _parallel(4, pull)
    assert pulled == sent, (pulled, sent)
    return sent / send_s, pulled / pull_s


def _count_records(body: bytes) -> int:
    count = at = 0
    while at < len(body):
        at += int.from_bytes(body[at:at + 4], "big")
        count += 1
    return count


def _serve(root: str) -> None:
    with Broker.open(StoreConfig(root_dir=Path(root))) as broker, \
            BrokerRemotingServer(broker) as server:
        print(json.dumps(server.address), flush=True)
        sys.stdin.read()


def main(argv: list[str] | None = None) -> int:
    """Run the three modes and print one line each (messages/s and ratios to embedded)."""
    parser = argparse.ArgumentParser(prog="remoting_server_bench")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--window", type=int, default=8,
                        help="sends each thread keeps in flight on its connection in the "
                             "pipelined rows")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.serve:
        _serve(options.serve)
        return 0
    figures: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as temp:
        figures["embedded"] = _embedded(Path(temp) / "e", options.messages, options.threads)
        with Broker.open(StoreConfig(root_dir=Path(temp) / "i")) as broker, \
                BrokerRemotingServer(broker) as server:
            assert server.address is not None
            figures["inproc"] = _remote(server.address, options.messages, options.threads)
        child = subprocess.Popen([sys.executable, "-m", "bench.remoting_server_bench",
                                  "--serve", str(Path(temp) / "p")],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None and child.stdin is not None
            address = tuple(json.loads(child.stdout.readline()))
            figures["2proc"] = _remote(address, options.messages, options.threads)  # type: ignore[arg-type]
            figures["2proc-pipelined"] = _remote(address, options.messages,  # type: ignore[arg-type]
                                                 options.threads, options.window,
                                                 f"{TOPIC}_PIPELINED")
        finally:
            child.communicate("")
    base_send, base_pull = figures["embedded"]
    for mode, (send_rate, pull_rate) in figures.items():
        print(f"{mode:9} send {send_rate:8.0f}/s ({send_rate / base_send:.2f}x)   "
              f"pull {pull_rate:8.0f} msgs/s ({pull_rate / base_pull:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
