"""Timer messages through ``postbox broker start`` (both protocols, real sockets): gRPC
``delivery_timestamp`` and remoting ``TIMER_DELIVER_MS`` sends, the refusals beyond
``timerMaxDelaySec`` (gRPC ``ILLEGAL_DELIVERY_TIME``, remoting 13 MESSAGE_ILLEGAL), and a
``kill -9`` while timers are pending, and again while the restarted broker reads them back from
the timer wheel's files: after the restart every one is delivered once, never early, those due
after the restart at their moment."""

from __future__ import annotations

import sys
import time

from bench.remoting_raw import RawRemotingClient, send_fields
from postbox.broker_node.grpc_v2.conversion import timestamp
from postbox.broker_node.grpc_v2.protocol import Code, definition, service
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.storage_engine import Broker
from tests.broker_node.grpc_v2.conftest import store_config
from tests.broker_node.grpc_v2.raw_calls import TIMEOUT_S, resource, stub
from tests.support.broker_process import BrokerProcess, write_broker_conf
from tests.support.polling import wait_until

TOPIC = "timed"
MAX_DELAY_S = 600
LATE_MS_MAX = 1000
"""Lateness allowed after the restart for a timer due once the broker is back (loaded machine;
the embedded test measures the service itself)."""


def grpc_send(address: str, body: str, deliver_ms: int) -> definition.Status:
    proto = definition.Message(topic=resource(TOPIC), body=body.encode())
    proto.system_properties.message_id = "0102AB" + body.encode().hex().upper()
    proto.system_properties.message_type = definition.DELAY
    proto.system_properties.delivery_timestamp.CopyFrom(timestamp(deliver_ms))
    response = stub(address).SendMessage(service.SendMessageRequest(messages=[proto]),
                                         timeout=TIMEOUT_S)
    return response.status


def remoting_send(client: RawRemotingClient, body: str, deliver_ms: int):
    return client.call(RequestCode.SEND_MESSAGE_V2, send_fields(TOPIC, 0, properties={
        "UNIQ_KEY": "0103AB" + body.encode().hex().upper(),
        "TIMER_DELIVER_MS": str(deliver_ms)}), body.encode())


def test_timers_survive_kill_9_and_come_at_their_moment(tmp_path):
    conf = write_broker_conf(tmp_path)
    with conf.open("a") as extra:
        extra.write(f"timerMaxDelaySec={MAX_DELAY_S}\n")
    store = tmp_path / "store"
    with Broker.open(store_config(store, conf)) as broker:
        broker.create_topic(TOPIC, 1)
    server = BrokerProcess(store, broker_conf=conf).start()
    client = RawRemotingClient(server.remoting_address)
    start = int(time.time() * 1000)
    asked = {}
    try:
        far = grpc_send(server.address, "far", start + (MAX_DELAY_S + 5) * 1000)
        assert far.code == Code.ILLEGAL_DELIVERY_TIME and "timerMaxDelaySec" in far.message
        refused = remoting_send(client, "far", start + (MAX_DELAY_S + 5) * 1000)
        assert refused.code == ResponseCode.MESSAGE_ILLEGAL
        assert "timerMaxDelaySec" in refused.remark
        for n in range(12):  # every second from +1 s to +12 s, the two ways in turn
            body, deliver_ms = f"t{n}", start + 1000 * (n + 1)
            if n % 2:
                assert remoting_send(client, body, deliver_ms).code == ResponseCode.SUCCESS
            else:
                assert grpc_send(server.address, body, deliver_ms).code == Code.OK
            asked[body] = deliver_ms
        assert grpc_send(server.address, "past", start - 5000).code == Code.OK
    finally:
        client.close()
        server.kill()  # kill -9 with every timer pending (or a few delivered)
    killed_ms = int(time.time() * 1000)
    assert (store / "timerwheel").is_file() and (store / "config" / "timercheck").is_file()
    assert any((store / "timerlog").iterdir())
    loading = BrokerProcess(store, broker_conf=conf).start()
    loading.kill()  # again, while the timer service reads the pending timers back
    again = BrokerProcess(store, broker_conf=conf).start()
    back_ms = int(time.time() * 1000)
    try:
        time.sleep(max(0.0, (max(asked.values()) - int(time.time() * 1000)) / 1000) + 1.0)
    finally:
        assert again.stop() == 0
    with Broker.open(store_config(store, conf)) as broker:
        views = wait_until(lambda: broker.pull("inspector", TOPIC, 0, 0, 32).messages)
    bodies = [view.body.decode() for view in views]
    assert sorted(bodies) == sorted([*asked, "past"])  # each once
    lateness = {view.body.decode(): view.store_timestamp_ms - asked[view.body.decode()]
                for view in views if view.body != b"past"}
    sys.stdout.write(f"killed at +{killed_ms - start} ms, back at +{back_ms - start} ms; "
                     f"lateness ms {lateness}\n")
    for body, late_ms in lateness.items():
        assert late_ms >= 0, (body, late_ms)
        if asked[body] > back_ms:
            assert late_ms <= LATE_MS_MAX, (body, late_ms)


def test_a_remoting_delete_marker_cancels_a_timer_across_kill_9(tmp_path):
    conf = write_broker_conf(tmp_path)
    store = tmp_path / "store"
    with Broker.open(store_config(store, conf)) as broker:
        broker.create_topic(TOPIC, 1)
    server = BrokerProcess(store, broker_conf=conf).start()
    client = RawRemotingClient(server.remoting_address)
    deliver_ms = int(time.time() * 1000) + 2000
    try:
        assert remoting_send(client, "cancelled", deliver_ms).code == ResponseCode.SUCCESS
        assert remoting_send(client, "kept", deliver_ms).code == ResponseCode.SUCCESS
        marker = client.call(RequestCode.SEND_MESSAGE_V2, send_fields(TOPIC, 0, properties={
            "UNIQ_KEY": "0104AB" + b"marker".hex().upper(),
            "TIMER_DEL_UNIQKEY": "0103AB" + b"cancelled".hex().upper(),
            "TIMER_DELIVER_MS": str(deliver_ms)}), b"marker")
        assert marker.code == ResponseCode.SUCCESS
    finally:
        client.close()
        server.kill()  # before the deliver time: the restart rebuilds the schedule
    again = BrokerProcess(store, broker_conf=conf).start()
    try:
        time.sleep(max(0.0, (deliver_ms - int(time.time() * 1000)) / 1000) + 1.0)
    finally:
        assert again.stop() == 0
    with Broker.open(store_config(store, conf)) as broker:
        views = wait_until(lambda: broker.pull("inspector", TOPIC, 0, 0, 32).messages)
    assert [view.body for view in views] == [b"kept"]
