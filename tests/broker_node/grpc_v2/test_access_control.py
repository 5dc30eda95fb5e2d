"""Access control with ``--acl``: signed official clients work; unsigned calls, a wrong
secret, and a key without rights on a topic or group are refused and write nothing."""

from __future__ import annotations

import concurrent.futures
import json
import time
from pathlib import Path

import grpc
import pytest

from postbox.broker_node.acl_file import parse_acl
from postbox.broker_node.grpc_v2 import (
    AccessControl,
    AccessDeniedError,
    Credentials,
    signed_metadata,
)
from postbox.broker_node.grpc_v2.auth import sign
from postbox.broker_node.grpc_v2.protocol import Code
from postbox.storage_engine import Broker, ConfigError
from tests.broker_node.grpc_v2.conftest import store_config
from tests.broker_node.grpc_v2.raw_calls import pull_status, receive_status, send
from tests.broker_node.grpc_v2.rocketmq_clients import (
    configuration,
    message,
    start_producer,
    start_simple_consumer,
)
from tests.support.polling import wait_until

ACL = {
    "clock_skew_s": 300,
    "accounts": [
        {"access_key": "app", "secret_key": "app-secret",
         "topics": {"secure": "PUB|SUB"}, "groups": {"readers": "SUB"}, "create_topics": True},
        {"access_key": "outsider", "secret_key": "outsider-secret",
         "topics": {"elsewhere": "PUB|SUB", "*": "DENY"}, "groups": {"others": "SUB"}},
    ],
}


def header_for(secret: str, date_time: str) -> str:
    return (f"MQv2-HMAC-SHA1 Credential=app, SignedHeaders=x-mq-date-time, "
            f"Signature={sign(secret, date_time)}")


def acl_file(tmp_path: Path) -> Path:
    path = tmp_path / "acl.json"
    path.write_text(json.dumps(ACL))
    return path


def test_signed_client_is_accepted_and_others_are_refused(broker_server, clients, tmp_path):
    server = broker_server(acl=acl_file(tmp_path))
    good = configuration(server.address, "app", "app-secret")
    producer = start_producer(clients, good, "secure")
    receipt = producer.send(message("secure", b"classified"))
    consumer = start_simple_consumer(clients, good, "readers", "secure", await_duration_s=2)
    item = wait_until(lambda: consumer.receive(1, 5))[0]
    assert item.message_id == receipt.message_id
    consumer.ack(item)

    unsigned = send(server.address, "denied", b"x")
    assert unsigned.status.code == Code.UNAUTHORIZED
    wrong = send(server.address, "denied", b"x",
                 metadata=signed_metadata(Credentials("app", "not-the-secret"), "client-1"))
    assert wrong.status.code == Code.UNAUTHORIZED
    unknown = send(server.address, "denied", b"x",
                   metadata=signed_metadata(Credentials("nobody", "s"), "client-1"))
    assert unknown.status.code == Code.UNAUTHORIZED
    outsider = signed_metadata(Credentials("outsider", "outsider-secret"), "client-2")
    assert send(server.address, "secure", b"x", metadata=outsider).status.code == Code.FORBIDDEN
    assert send(server.address, "denied", b"x", metadata=outsider).status.code == Code.FORBIDDEN
    assert receive_status(server.address, "readers", "elsewhere",
                          metadata=outsider).code == Code.FORBIDDEN
    assert pull_status(server.address, "readers", "secure",
                       metadata=outsider).code == Code.FORBIDDEN

    wrong_secret = configuration(server.address, "app", "bad")
    refused = start_producer(clients, wrong_secret)
    with pytest.raises(Exception, match="route"):  # QueryRoute answered UNAUTHORIZED
        refused.send(message("secure", b"never stored"))

    for client in reversed(clients):
        client.shutdown()
    clients.clear()
    assert server.stop() == 0
    with Broker.open(store_config(server.store, tmp_path / "broker.conf")) as broker:
        assert broker.topic_config("denied") is None
        assert broker.topic_config("elsewhere") is None
        assert broker.store.max_offset("secure", 0) + sum(
            broker.store.max_offset("secure", q) for q in range(1, 8)) == 1


def test_access_control_checks_signature_time_and_rights():
    access = AccessControl(parse_acl(ACL))
    metadata = signed_metadata(Credentials("app", "app-secret"), "client-1")
    assert access.check(metadata, topics=["secure"], groups=["readers"]).access_key == "app"
    assert access.check(metadata, topics=["secure"], write=True).access_key == "app"
    with pytest.raises(AccessDeniedError) as denied:
        access.check(metadata, topics=["other"], write=True)
    assert denied.value.v2_code == Code.FORBIDDEN
    with pytest.raises(AccessDeniedError):
        access.check(metadata, groups=["others"])
    old = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() - 3 * 86400))
    with pytest.raises(AccessDeniedError) as unauthenticated:
        access.check([("x-mq-date-time", old), ("authorization", header_for("app-secret", old))])
    assert unauthenticated.value.v2_code == Code.UNAUTHORIZED
    assert "away from the server's clock" in str(unauthenticated.value)
    local_time = time.strftime("%Y%m%dT%H%M%SZ", time.localtime())  # the official client's way
    assert access.check([("x-mq-date-time", local_time),
                         ("authorization", header_for("app-secret", local_time))])
    with pytest.raises(AccessDeniedError):
        access.check([])


def test_authorize_aborts_calls_of_another_grpc_service():
    """``AccessControl.authorize`` as Postbox's own service uses it: gRPC status codes."""
    access = AccessControl(parse_acl(ACL))

    def handle(request: bytes, context) -> bytes:
        access.authorize(context, topics=[request.decode()], groups=["readers"])
        return b"ok"

    workers = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    server = grpc.server(workers)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "test.Echo", {"Call": grpc.unary_unary_rpc_method_handler(handle)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        call = channel.unary_unary("/test.Echo/Call")
        app = signed_metadata(Credentials("app", "app-secret"), "client-1")
        assert call(b"secure", metadata=app, timeout=5) == b"ok"
        for topic, metadata, code in [
                (b"secure", None, grpc.StatusCode.UNAUTHENTICATED),
                (b"secure", signed_metadata(Credentials("app", "x"), "c"),
                 grpc.StatusCode.UNAUTHENTICATED),
                (b"elsewhere", app, grpc.StatusCode.PERMISSION_DENIED)]:
            with pytest.raises(grpc.RpcError) as refused:
                call(topic, metadata=metadata, timeout=5)
            assert refused.value.code() is code
    finally:
        channel.close()
        server.stop(0).wait()
        workers.shutdown()


def test_acl_file_create_right_and_group_topics():
    settings = parse_acl({"accounts": [
        {"access_key": "a", "secret_key": "s", "topics": {"*": "PUB|SUB"},
         "groups": {"billing": "SUB"}},
        {"access_key": "c", "secret_key": "s", "create_topics": True},
        {"access_key": "ops", "secret_key": "s", "admin": True}]})
    plain, creator, ops = (settings.accounts[key] for key in ("a", "c", "ops"))
    assert not plain.may_create_topics and creator.may_create_topics and ops.may_create_topics
    assert plain.may("topic", "%RETRY%billing", "SUB") and plain.may("topic", "%DLQ%billing",
                                                                      "SUB")
    assert not plain.may("topic", "%RETRY%billing", "PUB")  # only the broker writes them
    assert not plain.may("topic", "%DLQ%others", "SUB")  # "*" does not cover other groups'
    assert not plain.may("topic", "SCHEDULE_TOPIC_XXXX", "PUB")
    with pytest.raises(ConfigError, match="create_topics"):
        parse_acl({"accounts": [{"access_key": "a", "secret_key": "s", "create_topics": "yes"}]})
