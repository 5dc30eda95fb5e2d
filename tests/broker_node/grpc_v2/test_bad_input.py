"""Requests the store must refuse: traversal and over-long topic/group names, oversized bodies
and requests, malformed messages and receipt handles. Clear statuses come back, nothing is
created on disk, and the server keeps working (the fixture verifies the store at the end)."""

from __future__ import annotations

import grpc
import pytest

from postbox.broker_node.grpc_v2.protocol import Code, definition, service
from postbox.storage_engine import Broker
from tests.broker_node.grpc_v2.conftest import store_config
from tests.broker_node.grpc_v2.raw_calls import (
    TIMEOUT_S,
    receive_status,
    resource,
    send,
    send_request,
    stub,
)
from tests.support.broker_process import MAX_BODY_BYTES

BAD_NAMES = ["../x", "a/b", "x" * 300, "", "a.b", "%2e%2e/x", "with space"]
"""Refused as topics and as groups (a group may be longer than a topic: its retry topic
``%RETRY%group`` may have 255 characters)."""


def test_bad_names_sizes_and_messages_are_refused(broker_server, tmp_path):
    server = broker_server()
    address = server.address
    calls = stub(address)
    for name in BAD_NAMES:
        assert send(address, name, b"x").status.code == Code.ILLEGAL_TOPIC, name
        route = calls.QueryRoute(service.QueryRouteRequest(topic=resource(name)),
                                 timeout=TIMEOUT_S)
        assert route.status.code == Code.ILLEGAL_TOPIC, name
        assert receive_status(address, name, "good").code == Code.ILLEGAL_CONSUMER_GROUP, name
        heartbeat = calls.Heartbeat(service.HeartbeatRequest(
            group=resource(name), client_type=definition.SIMPLE_CONSUMER),
            metadata=[("x-mq-client-id", "c1")], timeout=TIMEOUT_S)
        assert heartbeat.status.code == Code.ILLEGAL_CONSUMER_GROUP, name
        assignment = calls.QueryAssignment(service.QueryAssignmentRequest(
            topic=resource("good"), group=resource(name)), timeout=TIMEOUT_S)
        assert assignment.status.code == Code.ILLEGAL_CONSUMER_GROUP, name

    assert send(address, "x" * 128, b"x").status.code == Code.ILLEGAL_TOPIC
    too_large = send(address, "good", b"x" * (MAX_BODY_BYTES + 1))
    assert too_large.status.code == Code.MESSAGE_BODY_TOO_LARGE
    assert "max_message_size_bytes" in too_large.status.message
    with pytest.raises(grpc.RpcError) as refused:  # beyond the gRPC receive limit
        send(address, "good", b"x" * (2 * 1024 * 1024))
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert send(address, "good", b"").status.code == Code.MESSAGE_BODY_EMPTY

    request = send_request("good", b"x")
    request.messages[0].user_properties["UNIQ_KEY"] = "forged"
    assert calls.SendMessage(request, timeout=TIMEOUT_S).status.code \
        == Code.ILLEGAL_MESSAGE_PROPERTY_KEY
    request = send_request("good", b"x")
    request.messages[0].system_properties.keys.append("two words")
    assert calls.SendMessage(request, timeout=TIMEOUT_S).status.code == Code.ILLEGAL_MESSAGE_KEY
    request = send_request("good", b"x", message_id="")
    assert calls.SendMessage(request, timeout=TIMEOUT_S).status.code == Code.ILLEGAL_MESSAGE_ID
    request = send_request("good", b"x")
    request.messages[0].system_properties.tag = "a|b"
    assert calls.SendMessage(request, timeout=TIMEOUT_S).status.code == Code.ILLEGAL_MESSAGE_TAG
    request = send_request("good", b"x")
    request.messages[0].system_properties.delivery_timestamp.seconds = 4_000_000_000
    assert calls.SendMessage(request, timeout=TIMEOUT_S).status.code \
        == Code.ILLEGAL_DELIVERY_TIME

    for handle in ["pb1 ../x 0 0 0123456789abcdef", "garbage", "pb1 good -1 0 0123456789abcdef",
                   "pb1 good 0 0 0123456789abcdef"]:
        answer = calls.AckMessage(service.AckMessageRequest(
            group=resource("g"), topic=resource("good"),
            entries=[service.AckMessageEntry(message_id="m", receipt_handle=handle)]),
            timeout=TIMEOUT_S)
        assert answer.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE, handle

    ok = send(address, "good", b"still works")
    assert ok.status.code == Code.OK and ok.entries[0].offset == 0

    assert server.stop() == 0
    with Broker.open(store_config(server.store, tmp_path / "broker.conf")) as broker:
        assert sorted(broker.store.topics()) == ["good"]
        assert broker.consumer_groups() == []
    assert sorted(path.name for path in (server.store / "consumequeue").iterdir()) == ["good"]


def test_internal_retry_and_dead_letter_topics_are_not_writable(broker_server):
    server = broker_server()
    for topic in ["SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "%RETRY%g", "%DLQ%g"]:
        assert send(server.address, topic, b"x").status.code == Code.ILLEGAL_TOPIC, topic
    assert receive_status(server.address, "g", "SCHEDULE_TOPIC_XXXX").code == Code.ILLEGAL_TOPIC
