"""Server life cycle: SIGTERM during a long poll exits 0 with the store closed cleanly and the
pop watermark persisted as the group's offset (so nothing in flight is lost across a restart);
calls Postbox does not implement answer "not supported"."""

from __future__ import annotations

import time

import grpc
import pytest

from postbox.broker_node.grpc_v2.protocol import Code, service
from postbox.storage_engine import Broker
from tests.broker_node.grpc_v2.conftest import store_config
from tests.broker_node.grpc_v2.raw_calls import TIMEOUT_S, resource, stub
from tests.broker_node.grpc_v2.rocketmq_clients import (
    configuration,
    message,
    start_producer,
    start_simple_consumer,
)
from tests.cli.cli_support import assert_one_error_line, run
from tests.support.broker_process import BrokerProcess
from tests.support.polling import wait_until


def test_sigterm_persists_the_watermark_and_a_restart_redelivers(broker_server, clients,
                                                                  tmp_path):
    server = broker_server()
    config = configuration(server.address)
    producer = start_producer(clients, config, "fifo")
    for index in range(3):
        built = message("fifo", f"m{index}".encode())
        built.message_group = "order-7"  # one queue for all three
        producer.send(built)
    consumer = start_simple_consumer(clients, config, "keepers", "fifo", await_duration_s=2)
    received = []
    wait_until(lambda: received.extend(consumer.receive(3, 30)) or len(received) == 3)
    by_body = {item.body: item for item in received}
    assert all(item.message_group == "order-7" for item in received)
    consumer.ack(by_body[b"m0"])
    consumer.ack(by_body[b"m2"])  # m1 stays in flight

    stopped_at = time.monotonic()
    assert server.stop() == 0  # the consumer may be in a long poll right now
    assert time.monotonic() - stopped_at < 10
    assert "stopped" in server.stdout_lines()
    assert not (server.store / "abort").exists()
    for client in reversed(clients):
        client.shutdown()
    clients.clear()
    conf = tmp_path / "broker.conf"
    with Broker.open(store_config(server.store, conf)) as broker:
        queue_id = next(q for q in broker.queue_ids("fifo") if broker.store.max_offset("fifo", q))
        assert broker.query_offset("keepers", "fifo", queue_id) == 1  # m1, the one in flight

    again = BrokerProcess(server.store, broker_conf=conf).start()
    try:
        config = configuration(again.address)
        consumer = start_simple_consumer(clients, config, "keepers", "fifo", await_duration_s=2)
        redelivered = []
        wait_until(lambda: redelivered.extend(consumer.receive(3, 30)) or len(redelivered) == 2)
        assert sorted(item.body for item in redelivered) == [b"m1", b"m2"]
        for item in redelivered:
            consumer.ack(item)
        consumer.shutdown()
        clients.clear()
    finally:
        assert again.stop() == 0


def test_unsupported_calls_answer_not_implemented(broker_server):
    server = broker_server()
    calls = stub(server.address)
    ending = calls.EndTransaction(service.EndTransactionRequest(topic=resource("t")),
                                  timeout=TIMEOUT_S)
    assert ending.status.code == Code.INVALID_TRANSACTION_ID  # transactions are served
    recall = calls.RecallMessage(service.RecallMessageRequest(topic=resource("t")),
                                 timeout=TIMEOUT_S)
    assert recall.status.code == Code.NOT_IMPLEMENTED
    lite = calls.SyncLiteSubscription(service.SyncLiteSubscriptionRequest(), timeout=TIMEOUT_S)
    assert lite.status.code == Code.NOT_IMPLEMENTED
    channel = grpc.insecure_channel(server.address)
    unknown = channel.unary_unary("/apache.rocketmq.v2.MessagingService/NoSuchCall",
                                  request_serializer=lambda value: value,
                                  response_deserializer=lambda value: value)
    with pytest.raises(grpc.RpcError) as refused:
        unknown(b"", timeout=TIMEOUT_S)
    assert refused.value.code() is grpc.StatusCode.UNIMPLEMENTED


def test_cli_refuses_a_bad_listen_address_before_opening_the_store(tmp_path):
    result = run("broker", "start", "--store", str(tmp_path / "never"), "--listen", "nowhere")
    assert_one_error_line(result, "nowhere", "host:port")
    assert not (tmp_path / "never").exists()


def test_a_second_server_on_the_same_port_fails(broker_server, tmp_path):
    server = broker_server()
    port = server.address.rsplit(":", 1)[1]
    result = run("broker", "start", "--store", str(tmp_path / "other"), "--listen",
                 f"127.0.0.1:{port}")
    assert_one_error_line(result, f"127.0.0.1:{port}")
