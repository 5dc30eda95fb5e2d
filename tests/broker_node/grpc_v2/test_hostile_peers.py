"""Hostile peers against a ``postbox broker`` process over real sockets, a well-behaved client
served throughout:

* a peer that pipelines pulls and never reads its answers holds at most about the in-flight
  bound of the broker's memory (``remotingMaxOutputBytes``), not every answer it asked for;
* sockets that connect and trickle bytes cannot lock new clients out: one address gets at most
  ``remotingMaxConnectionsPerPeer`` connections, a frame must be whole within
  ``remotingFrameReadTimeoutMillis`` of its first byte, and the last
  ``remotingReservedConnections`` slots wait for peers that were served before;
* a flood of connections under a low open-file limit cannot take the descriptors the store
  needs (the listeners' caps are fitted to what the store leaves): writes keep working, refusals
  log once per interval, new clients are served once the flood closed;
* a flood of pipelined queries cannot make other connections wait behind it: each connection
  gets a bounded number of frames per IO round, and one whose lane refuses is not read a while.
"""

from __future__ import annotations

import json
import resource
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.hostile_requests import QueryFlood
from bench.remoting_raw import RawRemotingClient, pull_fields, send_fields
from postbox.network.protocol.acl_signature import sign_request
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.network.protocol.wire import RemotingCommand, encode
from tests.support.broker_process import TEST_BROKER_CONF, BrokerProcess
from tests.support.polling import wait_until

BODY = b"m" * 60_000


def _address(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def _rss_bytes(server: BrokerProcess) -> int:
    assert server.process is not None
    for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


FD_LIMIT = """import os, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[1])))
os.execv(sys.argv[2], sys.argv[2:])"""
"""Runs a command with a lower file-descriptor limit (as ``prlimit --nofile``)."""


def _with_fd_limit(limit: int) -> tuple[str, ...]:
    return (sys.executable, "-c", FD_LIMIT, str(limit))


def _enough_descriptors(count: int) -> None:
    """Raise this process's soft descriptor limit (the broker inherits it) to ``count``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count:
        assert hard == resource.RLIM_INFINITY or hard >= count, f"needs {count} descriptors"
        resource.setrlimit(resource.RLIMIT_NOFILE, (count, hard))


@contextmanager
def _broker(tmp_path: Path, conf: str = "", *, prefix: tuple[str, ...] = (),
            acl: Path | None = None) -> Iterator[BrokerProcess]:
    """A broker process with ``conf`` added to the test broker.conf; stopped cleanly."""
    _enough_descriptors(4096)  # the floods below open over 2 000 sockets
    path = tmp_path / "broker.conf"
    path.write_text(TEST_BROKER_CONF + conf)
    server = BrokerProcess(tmp_path / "store", broker_conf=path, acl=acl)
    server.args = [*prefix, *server.args]
    server.start()
    try:
        yield server
    finally:
        code = server.stop()
        assert code == 0, server.stderr_text()[-3000:]


def _send_ok(client: RawRemotingClient, timeout_s: float = 30) -> float:
    """One well-behaved send; its latency in seconds."""
    started = time.monotonic()
    answer = client.call(RequestCode.SEND_MESSAGE_V2, send_fields("Good", 0), b"ok",
                         timeout_s=timeout_s)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return time.monotonic() - started


def _connect(address: str, source: str, timeout_s: float = 5) -> socket.socket:
    """A connection from ``source`` (blocking once connected: a client's reader may wait)."""
    sock = socket.create_connection(_address(address), timeout=timeout_s,
                                    source_address=(source, 0))
    sock.settimeout(None)
    return sock


def _served(address: str, source: str, timeout_s: float = 5) -> bool:
    """Whether a new client from ``source`` gets its send answered within ``timeout_s``."""
    try:
        sock = _connect(address, source)
    except OSError:
        return False
    with RawRemotingClient.over(sock) as client:
        try:
            _send_ok(client, timeout_s=timeout_s)
        except Exception:  # refused: closed at once, the answer never comes
            return False
    return True


def test_a_peer_that_never_reads_holds_bounded_memory(tmp_path):
    with _broker(tmp_path) as server, RawRemotingClient(server.remoting_address) as good:
        for _ in range(40):  # 2.4 MB in queue 0: every pull answers 32 messages, ~1.9 MB
            assert good.call(RequestCode.SEND_MESSAGE_V2, send_fields("Big", 0),
                             BODY).code == ResponseCode.SUCCESS
        _send_ok(good)
        before = _rss_bytes(server)
        hostile = socket.socket()
        hostile.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        hostile.connect(_address(server.remoting_address))
        pulls = b"".join(encode(good.request(RequestCode.PULL_MESSAGE,
                                             pull_fields("G", "Big", 0, 0)))
                         for _ in range(300))  # ~570 MB of answers asked for
        writer = threading.Thread(target=_send_quietly, args=(hostile, pulls), daemon=True)
        writer.start()
        latencies = [_send_ok(good) for _ in range(20)]
        grown = _rss_bytes(server) - before
        hostile.close()
        writer.join(10)
        assert grown < 128 * 1024 * 1024, f"the broker grew {grown >> 20} MiB"
        assert max(latencies) < 30


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass  # closed at the end of the test


def test_trickling_sockets_from_one_address_cannot_lock_new_clients_out(tmp_path):
    with _broker(tmp_path) as server:
        address = server.remoting_address
        assert _served(address, "127.0.0.2")  # a client served before the flood
        flood = []
        for _ in range(1100):  # each starts a frame and never finishes it
            try:
                sock = _connect(address, "127.0.0.1")
                sock.sendall(b"\x00")
                flood.append(sock)
            except OSError:
                break
        with RawRemotingClient.over(_connect(address, "127.0.0.4")) as good:
            accepted = [_served(address, "127.0.0.3") for _ in range(10)]
            assert all(accepted), accepted
            _send_ok(good)
        assert "remotingMaxConnectionsPerPeer" in server.stderr_text()
        # now from many addresses: the unreserved slots fill up; a peer already served still
        # gets one of the reserved slots
        for host in range(10, 18):
            for _ in range(128):
                try:
                    flood.append(_connect(address, f"127.0.0.{host}"))
                except OSError:
                    break
        wait_until(lambda: "remotingReservedConnections" in server.stderr_text(), 30,
                   "the unreserved slots full")
        assert _served(address, "127.0.0.2")
        for sock in flood:
            sock.close()


def test_with_acl_a_new_client_that_signs_gets_a_reserved_slot_during_a_flood(tmp_path):
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps({"accounts": [
        {"access_key": "ops", "secret_key": "ops-secret", "admin": True}]}))
    with _broker(tmp_path, acl=acl) as server:
        address = server.remoting_address
        flood = []
        for host in range(10, 19):  # 1 152 silent sockets from 9 addresses
            for _ in range(128):
                try:
                    flood.append(_connect(address, f"127.0.0.{host}"))
                except OSError:
                    break

        def signed_client_served() -> bool:
            try:
                sock = _connect(address, "127.0.0.5")
            except OSError:
                return False
            with RawRemotingClient.over(sock) as client:
                try:
                    answer = client.call_command(sign_request(client.request(
                        RequestCode.SEND_MESSAGE_V2, send_fields("Good", 0), b"ok"),
                        "ops", "ops-secret"), timeout_s=5)
                except Exception:  # refused: closed at once
                    return False
            return answer.code == ResponseCode.SUCCESS

        wait_until(signed_client_served, 30, "a signed new client served during the flood")
        with RawRemotingClient.over(_connect(address, "127.0.0.6")) as unsigned:
            unsigned.send_bytes(encode(unsigned.request(RequestCode.SEND_MESSAGE_V2,
                                                        send_fields("Good", 0), b"no")))
            assert unsigned.closed_by_peer.wait(10)  # refused, or its probation failed
        assert "remotingReservedConnections" in server.stderr_text()
        for sock in flood:
            sock.close()


def test_a_frame_must_arrive_whole_within_the_read_deadline(tmp_path):
    conf = "remotingFrameReadTimeoutMillis=2000\n"
    with _broker(tmp_path, conf) as server, \
            RawRemotingClient(server.remoting_address) as good:
        address = server.remoting_address
        _send_ok(good)
        flood: list[socket.socket] = []
        for host in range(10, 20):  # 1 100 sockets from 10 addresses: over every cap
            for _ in range(110):
                try:
                    flood.append(_connect(address, f"127.0.0.{host}"))
                except OSError:
                    break
        stop = threading.Event()
        trickler = threading.Thread(target=_trickle, args=(flood, stop), daemon=True)
        trickler.start()
        try:
            _send_ok(good)
            wait_until(lambda: _served(address, "127.0.0.3"), 20,
                       "a new client served while the slow sockets trickle")
            _send_ok(good)
        finally:
            stop.set()
            trickler.join(10)
            for sock in flood:
                sock.close()
        assert "remotingFrameReadTimeoutMillis" in server.stderr_text()


SLOW_FRAME = encode(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_fields("Good", 0),
                                            b"s" * 4000))


def _trickle(sockets: list[socket.socket], stop: threading.Event) -> None:
    """The next byte of a well-formed 4 KB frame on every socket, every 0.5 s (a slow-loris:
    each frame would take over half an hour)."""
    alive = list(sockets)
    at = 0
    while alive and not stop.wait(0.5):
        still = []
        for sock in alive:
            try:
                sock.send(SLOW_FRAME[at:at + 1])
                still.append(sock)
            except OSError:
                pass
        alive, at = still, at + 1


def test_a_descriptor_flood_cannot_stop_the_store_taking_writes(tmp_path):
    """Under RLIMIT_NOFILE 400, 600 connections held for 12 s (the store's checkpoint and
    offset writes come due every 1 s and 5 s): the listeners' caps are fitted to the
    descriptors the store leaves, so its writes keep working; refusals log once per interval;
    a new client is served once the flood closed."""
    with _broker(tmp_path, prefix=_with_fd_limit(400)) as server:
        address = server.remoting_address
        with RawRemotingClient(address) as good:
            _send_ok(good)
            flood: list[socket.socket] = []
            for host in range(10, 20):
                for _ in range(60):
                    try:
                        flood.append(_connect(address, f"127.0.0.{host}"))
                    except OSError:
                        pass
            first = time.monotonic()
            while time.monotonic() - first < 12:  # past the writes that failed with EMFILE
                time.sleep(1)
                _send_ok(good)  # the store takes writes; the connections it has are served
            text = server.stderr_text()
            allowed = 1 + int((time.monotonic() - first) / 10)  # one line per 10 s
            for sock in flood:
                sock.close()
            wait_until(lambda: _served(address, "127.0.0.3"), 30, "accepting again")
            _send_ok(good)
        assert "each of the 2 remoting listeners accepts at most" in text
        assert "[fail-stop]" not in text and "stopped by an error" not in text, text[-3000:]
        for kind in ("accept failed", "refused 127.0.0.1"):
            assert text.count(kind) <= allowed, f"{text.count(kind)} lines of {kind!r}"


def test_a_query_flood_leaves_sends_and_new_clients_served_promptly(tmp_path):
    """Eight connections pipelining key queries as fast as the broker reads them (SYNC_FLUSH):
    the IO thread serves each connection a bounded number of frames per round and stops
    reading one whose lane refuses, so a producer's sends and a new client wait well under a
    second, not behind the flood."""
    with _broker(tmp_path, "flushDiskType=SYNC_FLUSH\n") as server:
        address = server.remoting_address
        with RawRemotingClient(address) as good:
            good.call(RequestCode.SEND_MESSAGE_V2,
                      send_fields("TP", 0, properties={"KEYS": "k"}), b"k")
            flood = QueryFlood(address)
            try:
                time.sleep(1)
                latencies = sorted(_send_ok(good) for _ in range(20))
                new_client = _served(address, "127.0.0.3", timeout_s=3)
            finally:
                flood.stop()
        assert flood.overloaded or flood.answered_bytes, "the flood was not served at all"
        assert latencies[len(latencies) // 2] < 0.5, latencies
        assert new_client, "a new client got no answer within 3 s"
