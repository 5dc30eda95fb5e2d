"""Attacks of ``bench/hostile_peers_bench.py`` at the connection and frame level: a deeply
nested header, lone surrogates echoed back, pulls pipelined and never read, slow sockets
trickling bytes, a descriptor-exhausting flood (and its log lines).

Each is ``attack(run) -> figures``: ``run`` (``hostile_peers_bench.AttackRun``) holds the broker
under attack, the profile's durations and ``probe()``, which counts how many new clients are
served at that moment (called while the attack is at its worst)."""

from __future__ import annotations

import socket
import threading
import time
import zlib
from typing import Any

from bench.hostile_harness import connect, raise_descriptor_limit, served_once, split_address
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
from postbox.network.protocol.codes import RequestCode
from postbox.network.protocol.wire import RemotingCommand, encode
from postbox.storage_engine.formats.topic_names import DELAY_TOPIC

LONE = "\ud800"


def nested_header(run: Any) -> dict[str, object]:
    """A JSON header nested 1 000 deep, to the broker and to the name server."""
    closed = 0
    for address in (run.broker.remoting, run.broker.namesrv):
        with RawRemotingClient(address) as hostile:
            hostile.send_bytes(nested_frame(1000))
            closed += hostile.closed_by_peer.wait(5)
    time.sleep(run.short_s)
    run.probe()
    return {"hostile_connections_closed": f"{closed}/2"}


def _registration() -> tuple[dict[str, object], bytes]:
    body = register_body({"t@LONE@": QueueData("b@LONE@", 2, 2, 6)},
                         {"counter": 1, "timestamp": 1}).replace(b"@LONE@", b"\\ud800")
    fields = {"brokerName": "b" + LONE, "brokerAddr": "127.0.0.1:1", "clusterName": "C" + LONE,
              "haServerAddr": "", "brokerId": 0, "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}
    return fields, body


def surrogate_requests() -> list[tuple[bool, str, int, dict[str, object], bytes]]:
    """(to the name server?, label, code, fields, body): values the answers echo back."""
    registration, body = _registration()
    rc = RequestCode
    return [
        (True, "route lone topic", rc.GET_ROUTEINFO_BY_TOPIC, {"topic": LONE}, b""),
        (True, "route topic+lone", rc.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders" + LONE}, b""),
        (True, "register broker", rc.REGISTER_BROKER, registration, body),
        (True, "cluster info", rc.GET_BROKER_CLUSTER_INFO, {}, b""),
        (True, "kv config", GET_KV_CONFIG, {"namespace": LONE, "key": LONE}, b""),
        (False, "pull group/topic", rc.PULL_MESSAGE, pull_fields("G" + LONE, "T" + LONE, 0, 0),
         b""),
        (False, "pull subscription", rc.PULL_MESSAGE,
         pull_fields("G", "T", 0, 0, subscription=LONE), b""),
        (False, "send topic", rc.SEND_MESSAGE_V2, send_fields("T" + LONE, 0), b"x"),
        (False, "send system topic", rc.SEND_MESSAGE_V2,
         send_fields(DELAY_TOPIC + LONE, 0), b"x"),
        (False, "send trace topic", rc.SEND_MESSAGE_V2,
         send_fields("RMQ_SYS_TRACE_TOPIC", 0, group=LONE), b"x"),
        (False, "send properties", rc.SEND_MESSAGE_V2,
         send_fields("Good", 0, properties={"KEYS": LONE, LONE: "v"}), b"x"),
        (False, "heartbeat", rc.HEART_BEAT, {}, b'{"clientID":"' + b"\\ud800" + b'"}'),
    ]


def lone_surrogates(run: Any) -> dict[str, object]:
    """Each request on a new connection; after each, is its listener still serving? In the
    full profile a killed listener's broker is replaced by a fresh one (``run.fresh_broker``)
    so every frame is tried; in ``--quick`` a dead listener's later frames are skipped."""
    answered, sent, killers = 0, 0, []
    broker, dead = run.broker, {True: False, False: False}
    for opaque, (namesrv, label, code, fields, body) in enumerate(surrogate_requests(), 1000):
        if dead[namesrv]:
            if not run.full:
                continue
            broker, dead = run.fresh_broker(), {True: False, False: False}
        address = broker.namesrv if namesrv else broker.remoting
        sent += 1
        try:
            with RawRemotingClient(address) as hostile:
                hostile.call_frame(ascii_frame(code, fields, opaque, body), opaque, timeout_s=3)
                answered += 1
        except Exception:  # closed or unanswered
            pass
        if not served_once(address, "127.0.0.5", 3, namesrv=namesrv):
            dead[namesrv] = True
            killers.append(f"{'namesrv' if namesrv else 'broker'}: {label}")
    run.probe()
    return {"frames_answered": f"{answered}/{sent} sent ({len(surrogate_requests())} built)",
            "listeners_killed": len(killers), "listener_killed_by": "; ".join(killers) or "none"}


def unread_pulls(run: Any) -> dict[str, object]:
    """2.4 MB in one queue, then ``run.pull_count`` pulls of it (300: ~550 MiB of answers;
    full profile 800) pipelined on a socket with a 4 KiB receive buffer that is never read."""
    body = b"m" * 60_000
    with RawRemotingClient(run.broker.remoting) as loader:
        for _ in range(40):
            loader.call(RequestCode.SEND_MESSAGE_V2, send_fields("Big", 0), body)
        pulls = b"".join(encode(loader.request(RequestCode.PULL_MESSAGE,
                                               pull_fields("G", "Big", 0, 0)))
                         for _ in range(run.pull_count))
    run.rebase_memory()
    hostile = socket.socket()
    hostile.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    hostile.connect(split_address(run.broker.remoting))
    writer = threading.Thread(target=_send_quietly, args=(hostile, pulls), daemon=True)
    writer.start()
    time.sleep(run.long_s / 2)
    run.probe()
    time.sleep(run.long_s / 2)
    hostile.close()
    writer.join(5)
    return {"hostile_sent_kib": len(pulls) >> 10,
            "answers_asked_mib": (run.pull_count * 32 * 60_000) >> 20}


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass


SLOW_FRAME = encode(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2,
                                            send_fields("Good", 0), b"s" * 4000))


def open_flood(address: str, count: int, first_host: int = 10, per_host: int = 103,
               first_byte: bool = False) -> list[socket.socket]:
    """``count`` connections from 127.0.0.FIRST_HOST on, ``per_host`` per address."""
    flood: list[socket.socket] = []
    host = first_host
    while len(flood) < count and host < 250:
        for _ in range(min(per_host, count - len(flood))):
            try:
                sock = connect(address, f"127.0.0.{host}", 2)
                if first_byte:
                    sock.send(SLOW_FRAME[:1])
            except OSError:
                break
            flood.append(sock)
        host += 1
    return flood


def _trickle(sockets: list[socket.socket], stop: threading.Event) -> int:
    """The next byte of a 4 KB frame on every socket once a second; how many stayed open."""
    alive, at = list(sockets), 1
    while alive and not stop.wait(1.0):
        alive = [sock for sock in alive if _send_byte(sock, SLOW_FRAME[at:at + 1])]
        at += 1
    return len(alive)


def _send_byte(sock: socket.socket, byte: bytes) -> bool:
    try:
        sock.send(byte)
        return True
    except OSError:
        return False


def slow_sockets(run: Any) -> dict[str, object]:
    """1 023 connections from ten addresses, each trickling a frame at 1 byte/s; new clients
    are counted early (10 s) and late (past the 30 s frame deadline in the full profile)."""
    raise_descriptor_limit(8192)
    flood = open_flood(run.broker.remoting, 1023, first_byte=True)
    stop = threading.Event()
    still: list[int] = []
    trickler = threading.Thread(target=lambda: still.append(_trickle(flood, stop)), daemon=True)
    trickler.start()
    early_at = min(10.0, run.long_s / 2)
    time.sleep(early_at)
    early = run.probe()
    time.sleep(max(0.0, run.long_s - early_at))
    late = run.probe()
    stop.set()
    trickler.join(10)
    for sock in flood:
        sock.close()
    return {"flood_connected": len(flood), "flood_still_open": still[0] if still else None,
            f"served_at_{early_at:.0f}s": early, f"served_at_{run.long_s:.0f}s": late}


def descriptor_flood(run: Any) -> dict[str, object]:
    """Under RLIMIT_NOFILE 400, 600 connections from ten addresses; the log lines written while
    the broker is out of descriptors, whether its store stopped taking writes (a file it could
    not open), and whether a new client is served once the flood closed."""
    raise_descriptor_limit(8192)
    lines_before = run.broker.log_lines()
    flood = open_flood(run.broker.remoting, 600, per_host=60)
    started = time.monotonic()
    time.sleep(run.long_s / 2)
    run.probe()
    time.sleep(run.long_s / 2)
    window = time.monotonic() - started
    lines = run.broker.log_lines() - lines_before
    text = run.broker.log_text()
    failures = text.count("accept failed")
    stopped_writes = any(words in text for words in ("[fail-stop]", "refuses writes",
                                                     "stopped accepting writes"))
    log_bytes = run.broker.log_path.stat().st_size
    for sock in flood:
        sock.close()
    time.sleep(1)
    again = served_once(run.broker.remoting, "127.0.0.6", 5)
    return {"flood_connected": len(flood), "log_lines": lines, "window_s": round(window, 1),
            "accept_failed_lines": failures, "log_mib": round(log_bytes / (1 << 20), 1),
            "store_stopped_writes": stopped_writes, "served_again": again}
