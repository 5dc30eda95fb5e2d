"""``RemotingBroker.send`` against scripted peers: a name server and two brokers on real sockets.

The brokers here are scripted (``ScriptedBroker``): they answer what a test tells them, to
produce what a real cluster does only by accident — a broker refusing with a retryable code, a
stored-but-not-flushed status, a broker that is down, a request held while others queue. What
a real broker stores is covered against Apache RocketMQ (``test_remoting_client_live``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from postbox.network.client.remote_broker import RemotingBroker
from postbox.network.client.send_lanes import Lane, Slot
from postbox.network.client.sending import SendAlone
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.network.protocol.wire import RemotingCommand
from postbox.storage_engine import Message
from postbox.storage_engine.contract.message import PutStatus
from postbox.storage_engine.errors import BrokerUnavailableError, NoPermissionError
from postbox.storage_engine.formats import decode_properties, encode_host, encode_offset_msg_id
from tests.support.polling import wait_until
from tests.support.tiny_remoting_server import PeerSocket, TinyRemotingServer, free_port_address

Reply = Callable[[RemotingCommand], RemotingCommand | None]


def stored(request: RemotingCommand, code: int = 0, offset: int = 7,
           count: int = 1) -> RemotingCommand:
    """A broker's answer to a send of ``count`` messages stored from queue offset ``offset``."""
    ids = ",".join(encode_offset_msg_id(encode_host("10.0.0.9", 10911), 1000 * offset + n)
                   for n in range(count))
    return request.response(code, {"msgId": ids, "queueId": request.ext_fields["e"],
                                   "queueOffset": offset, "MSG_REGION": "DefaultRegion"})


class ScriptedBroker:
    """A broker that answers sends with ``reply`` (None: hold the answer)."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.requests: list[RemotingCommand] = []
        self.server = TinyRemotingServer(self._handle)

    def _handle(self, command: RemotingCommand, peer: PeerSocket
                ) -> list[bytes | RemotingCommand]:
        self.requests.append(command)
        answer = self.reply(command)
        return [] if answer is None else [answer]


def route_body(brokers: dict[str, str]) -> bytes:
    return json.dumps({
        "brokerDatas": [{"brokerName": name, "cluster": "C", "brokerAddrs": {"0": address}}
                        for name, address in brokers.items()],
        "queueDatas": [{"brokerName": name, "readQueueNums": 2, "writeQueueNums": 2,
                        "perm": 6, "topicSysFlag": 0} for name in brokers],
    }).encode()


@pytest.fixture
def cluster() -> Iterator[Callable[..., RemotingBroker]]:
    servers: list[TinyRemotingServer] = []
    clients: list[RemotingBroker] = []

    def make(**brokers: ScriptedBroker | str) -> RemotingBroker:
        addresses = {name: broker if isinstance(broker, str) else broker.server.address
                     for name, broker in brokers.items()}
        servers.extend(broker.server for broker in brokers.values()
                       if isinstance(broker, ScriptedBroker))
        namesrv = TinyRemotingServer(lambda command, peer: [
            command.response(0, body=route_body(addresses))])
        servers.append(namesrv)
        client = RemotingBroker(namesrv.address, namespace="ns", timeout_ms=5_000)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()
    for server in servers:
        server.close()


def test_a_send_carries_the_stores_fields_and_returns_the_global_queue(cluster) -> None:
    broker_b = ScriptedBroker(lambda request: stored(request, offset=41))
    client = cluster(**{"broker-a": ScriptedBroker(stored), "broker-b": broker_b})
    result = client.send(Message("orders", b"body", tags="TagA", keys=["k1", "k2"],
                                 properties={"region": "eu"}, flag=3), queue_id=3)
    [request] = broker_b.requests
    assert request.code == RequestCode.SEND_MESSAGE_V2 and request.body == b"body"
    fields = request.ext_fields
    assert (fields["b"], fields["e"], fields["n"], fields["h"]) == ("ns%orders", "1",
                                                                    "broker-b", "3")
    properties = decode_properties(fields["i"])
    assert properties == {"region": "eu", "KEYS": "k1 k2", "TAGS": "TagA",
                          "UNIQ_KEY": result.unique_key}
    assert len(result.unique_key or "") == 32
    assert (result.topic, result.queue_id, result.stored_topic, result.stored_queue_id) == (
        "orders", 3, "orders", 3)
    assert (result.queue_offset, result.log_position, result.status) == (41, 41_000,
                                                                         PutStatus.PUT_OK)
    delayed = client.send(Message("orders", b"later", properties={"DELAY": "3"}), queue_id=0)
    assert (delayed.stored_topic, delayed.stored_queue_id, delayed.delay_level) == (
        "SCHEDULE_TOPIC_XXXX", 2, 3)


def test_retryable_refusals_and_dead_brokers_move_the_send_to_another_broker(cluster) -> None:
    busy = ScriptedBroker(lambda request: request.response(ResponseCode.SERVICE_NOT_AVAILABLE,
                                                           remark="busy"))
    healthy = ScriptedBroker(stored)
    client = cluster(**{"broker-a": busy, "broker-b": healthy})
    for _ in range(4):
        assert client.send(Message("orders", b"x")).queue_id in (2, 3)  # broker-b's queues
    assert len(healthy.requests) == 4 and len(busy.requests) <= 4
    down = cluster(**{"broker-a": free_port_address(), "broker-b": ScriptedBroker(stored)})
    for _ in range(3):
        assert down.send(Message("orders", b"x")).queue_id in (2, 3)


def test_a_refusal_everywhere_raises_the_stores_error(cluster) -> None:
    refuse = ScriptedBroker(lambda request: request.response(ResponseCode.NO_PERMISSION,
                                                             remark="topic not writable"))
    client = cluster(**{"broker-a": refuse})
    with pytest.raises(NoPermissionError, match="topic not writable"):
        client.send(Message("orders", b"x"))
    assert len(refuse.requests) == 3  # RocketMQ's three attempts


@pytest.mark.parametrize(("code", "status"), [
    (ResponseCode.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_DISK_TIMEOUT),
    (ResponseCode.SLAVE_NOT_AVAILABLE, PutStatus.SLAVE_NOT_AVAILABLE),
    (ResponseCode.FLUSH_SLAVE_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT),
])
def test_stored_but_unconfirmed_codes_are_statuses_not_errors(cluster, code: int,
                                                              status: PutStatus) -> None:
    client = cluster(**{"broker-a": ScriptedBroker(lambda request: stored(request, code))})
    assert client.send(Message("orders", b"x")).status is status


def test_sends_are_pipelined_a_held_answer_does_not_block_the_next_send(cluster) -> None:
    release = threading.Event()

    def hold_first(request: RemotingCommand) -> RemotingCommand | None:
        if b"held" in request.body:
            threading.Thread(target=lambda: (release.wait(10), broker.server.peers[0].send(
                stored(request, offset=1)))).start()
            return None
        return stored(request, offset=2)

    broker = ScriptedBroker(hold_first)
    client = cluster(**{"broker-a": broker})
    with ThreadPoolExecutor(2) as pool:
        held = pool.submit(client.send, Message("orders", b"held"))
        wait_until(lambda: len(broker.requests) == 1, timeout_s=10)
        assert client.send(Message("orders", b"free")).queue_offset == 2  # not behind "held"
        assert not held.done()
        release.set()
        assert held.result(10).queue_offset == 1


def test_sends_queued_during_a_write_share_one_batch_with_their_own_unique_keys(cluster
                                                                               ) -> None:
    broker = ScriptedBroker(lambda request: stored(
        request, offset=100, count=request.body.count(b"UNIQ_KEY") or 1))
    client = cluster(**{"broker-a": broker})
    sender = client._sender
    writing, release = threading.Event(), threading.Event()
    write = sender._write_batch

    def slow_first_write(batch: list[Slot], done: Callable[[], None]) -> None:
        if not writing.is_set():
            writing.set()
            release.wait(10)
        write(batch, done)

    lane = Lane(slow_first_write)
    sender._lanes[("ns%orders", None)] = lane
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(client.send, Message("orders", b"first"))
        assert writing.wait(10)
        rest = [pool.submit(client.send, Message("orders", f"m{i}".encode()))
                for i in range(3)]
        wait_until(lambda: len(lane._queue) == 3, timeout_s=10)
        release.set()
        results = [first.result(10)] + [future.result(10) for future in rest]
    assert [request.code for request in broker.requests] == [310, 320]
    batch = broker.requests[1]
    assert batch.ext_fields["m"] == "true" and lane.calls == 2
    assert sorted(result.queue_offset for result in results[1:]) == [100, 101, 102]
    assert len({result.unique_key for result in results}) == 4
    for result in results[1:]:
        assert result.unique_key is not None and result.unique_key.encode() in batch.body


def test_a_broker_without_batches_gets_single_sends(cluster) -> None:
    def no_batches(request: RemotingCommand) -> RemotingCommand:
        if request.code == RequestCode.SEND_BATCH_MESSAGE:
            return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
        return stored(request)

    broker = ScriptedBroker(no_batches)
    client = cluster(**{"broker-a": broker})
    sender = client._sender
    slots = [Slot(sender.prepare(Message("orders", f"m{i}".encode()), None, None))
             for i in range(3)]
    over = threading.Event()
    sender._write_batch(slots, over.set)  # a call of three, as queued senders make it
    assert all(slot.wait(10_000) for slot in slots)
    assert all(isinstance(slot.outcome, SendAlone) for slot in slots) and over.wait(10)
    assert [request.code for request in broker.requests] == [320]
    assert client.send(Message("orders", b"after")).status is PutStatus.PUT_OK
    assert broker.requests[-1].code == RequestCode.SEND_MESSAGE_V2
    assert not sender._batch_supported


def test_an_unanswered_send_times_out_and_leaves_no_pending_call(cluster) -> None:
    silent = ScriptedBroker(lambda request: None)
    client = cluster(**{"broker-a": silent})
    quick = RemotingBroker(client.namesrv_addresses, timeout_ms=200)  # same name server
    try:
        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError, match="within 200 ms"):
            quick.send(Message("orders", b"x"))
        assert time.monotonic() - started < 5
        connection = quick.context.connections.get(silent.server.address)
        assert connection._pending == {}
    finally:
        quick.close()


def test_sends_past_the_calls_in_flight_queue_and_go_as_one_batch_when_a_call_ends(
        cluster) -> None:
    """Two calls of a lane in flight (``MAX_CALLS_IN_FLIGHT``): later senders queue, and the
    first answer writes all of them as one SEND_BATCH_MESSAGE."""
    held: list[RemotingCommand] = []

    def hold_singles(request: RemotingCommand) -> RemotingCommand | None:
        if b"held" in request.body:
            held.append(request)
            return None
        return stored(request, offset=100, count=request.body.count(b"UNIQ_KEY") or 1)

    broker = ScriptedBroker(hold_singles)
    client = cluster(**{"broker-a": broker})
    lane = Lane(client._sender._write_batch)
    client._sender._lanes[("ns%orders", None)] = lane
    with ThreadPoolExecutor(5) as pool:
        first = [pool.submit(client.send, Message("orders", f"held{i}".encode()))
                 for i in range(2)]
        wait_until(lambda: len(held) == 2, timeout_s=10)
        rest = [pool.submit(client.send, Message("orders", f"m{i}".encode())) for i in range(3)]
        wait_until(lambda: len(lane._queue) == 3, timeout_s=10)
        assert len(broker.requests) == 2  # at the cap: nothing more written
        broker.server.peers[0].send(stored(held[0], offset=1))
        assert sorted(future.result(10).queue_offset for future in rest) == [100, 101, 102]
        broker.server.peers[0].send(stored(held[1], offset=2))
        assert sorted(future.result(10).queue_offset for future in first) == [1, 2]
    assert [request.code for request in broker.requests] == [310, 310, 320]
    assert lane.calls == 3 and lane._in_flight == 0


def test_a_send_queued_past_its_timeout_is_taken_out_and_the_lane_goes_on(cluster) -> None:
    """At the cap, a queued send that times out was never written: its error says nothing
    was sent, and the broker never sees it; the call in flight still ends and the lane goes
    on. (One lane shared by a patient client and a quick one: the quick one's send queues
    behind the patient one's call and gives up first.)"""
    broker = ScriptedBroker(lambda request: None)
    client = cluster(**{"broker-a": broker})
    quick = RemotingBroker(client.namesrv_addresses, namespace="ns", timeout_ms=300)
    try:
        lane = Lane(client._sender._write_batch, max_in_flight=1)
        client._sender._lanes[("ns%orders", None)] = quick._sender._lanes[
            ("ns%orders", None)] = lane
        with ThreadPoolExecutor(1) as pool:
            written = pool.submit(client.send, Message("orders", b"written"))
            wait_until(lambda: len(broker.requests) == 1, timeout_s=10)
            with pytest.raises(BrokerUnavailableError, match="nothing was sent"):
                quick.send(Message("orders", b"queued"))
            assert not lane._queue and lane._in_flight == 1
            broker.reply = lambda request: stored(request, offset=5)
            broker.server.peers[0].send(stored(broker.requests[0], offset=4))
            assert written.result(10).queue_offset == 4
        assert client.send(Message("orders", b"after")).queue_offset == 5
        assert [request.body for request in broker.requests] == [b"written", b"after"]
        assert lane._in_flight == 0
    finally:
        quick.close()
