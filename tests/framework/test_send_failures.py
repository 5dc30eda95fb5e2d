"""``send_failure``: the errors of both transports sorted into "the broker is unavailable" and
"the message was refused" — on real failures where they can be produced here (a closed store,
a port nobody listens on, an oversize body, a topic the broker will not create), and on the
answers a broker gives for the rest, built by the client's own ``response_error``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from postbox.broker_node.namesrv.processor import NameServer
from postbox.broker_node.namesrv.route_table import RouteTable
from postbox.broker_node.server import RemotingServer
from postbox.framework import AppStateError, Producer, SendFailure, send_failure
from postbox.framework.transport import open_client
from postbox.network.client.broker_errors import response_error
from postbox.network.client.errors import RemotingTimeoutError, RouteNotFoundError
from postbox.network.protocol.codes import ResponseCode
from postbox.network.protocol.wire import RemotingCommand
from postbox.storage_engine import BrokerConfig, DiskFullError, NotMasterError, SystemClock
from tests.support.postbox_remoting import serve_remoting
from tests.support.services import free_port


def failure_of(call) -> BaseException:
    """What ``call()`` raised (it must raise)."""
    try:
        call()
    except Exception as error:  # any: sorting it is what the test is about
        return error
    raise AssertionError("the send did not fail")


@pytest.mark.embedded_only("closes and configures the embedded store")
def test_real_failures_of_the_embedded_broker(open_broker):
    tight = open_broker("tight", max_message_size_bytes=1_024)
    too_large = failure_of(lambda: Producer(tight).send("orders", b"x" * 2_048))
    assert send_failure(too_large) is SendFailure.MESSAGE

    strict = open_broker("strict", broker=BrokerConfig(auto_create_topic=False))
    unknown_topic = failure_of(lambda: Producer(strict).send("never-created", b"x"))
    assert type(unknown_topic).__name__ == "TopicNotFoundError"
    assert send_failure(unknown_topic) is SendFailure.MESSAGE

    closed = open_broker("closed")
    producer = Producer(closed)
    closed.close()
    assert send_failure(failure_of(lambda: producer.send("orders", b"x"))) \
        is SendFailure.TRANSIENT


def remote_send_failure(store_url: str, topic: str = "orders") -> BaseException:
    """What a send over ``store_url`` (``rocketmq://``) raised."""
    client = open_client(store_url)
    try:
        return failure_of(lambda: Producer(client).send(topic, b"x"))
    finally:
        client.close()


def test_a_name_server_nobody_listens_on_is_transient():
    refused = remote_send_failure(f"rocketmq://127.0.0.1:{free_port()}")
    assert type(refused).__name__ == "ConnectionClosedError"
    assert send_failure(refused) is SendFailure.TRANSIENT


@pytest.fixture
def lone_name_server() -> Iterator[str]:
    """A real name server that no broker has registered with (every broker down)."""
    server = RemotingServer(name="namesrv")
    NameServer(RouteTable(SystemClock())).register_handlers(server.handlers)
    server.start()
    try:
        yield server.address_text
    finally:
        server.stop()


def test_a_name_server_without_brokers_is_transient_not_a_missing_topic(lone_name_server):
    no_route = remote_send_failure(f"rocketmq://{lone_name_server}")
    assert type(no_route).__name__ == "RouteNotFoundError", no_route
    assert send_failure(no_route) is SendFailure.TRANSIENT


@pytest.mark.embedded_only("serves its own broker")
def test_a_cluster_that_will_not_create_the_topic_refuses_the_message(open_broker):
    strict = open_broker("strict-remote", broker=BrokerConfig(auto_create_topic=False))
    with serve_remoting(strict) as remote:
        unknown_topic = remote_send_failure(remote.store_url, "never-created")
    assert type(unknown_topic).__name__ == "TopicNotFoundError", unknown_topic
    assert send_failure(unknown_topic) is SendFailure.MESSAGE


def answer(code: int) -> BaseException:
    """The error the remoting client raises for a send answered with ``code``."""
    return response_error("send to topic 'orders'", RemotingCommand(code=code, remark="r"),
                          address="127.0.0.1:10911", topic="orders")


@pytest.mark.parametrize("error", [
    answer(ResponseCode.SYSTEM_BUSY), answer(ResponseCode.SERVICE_NOT_AVAILABLE),
    answer(ResponseCode.FLOW_CONTROL), answer(ResponseCode.GO_AWAY),
    answer(ResponseCode.SYSTEM_ERROR), answer(ResponseCode.FLUSH_DISK_TIMEOUT),
    answer(ResponseCode.SLAVE_NOT_AVAILABLE), answer(ResponseCode.FLUSH_SLAVE_TIMEOUT),
    RemotingTimeoutError("no answer in 3000 ms", address="127.0.0.1:10911"),
    RouteNotFoundError("topic 'orders' has no writable queue with a master now",
                       topic="orders"),
    DiskFullError("disk full"), NotMasterError("a slave"), ConnectionResetError("reset"),
    TimeoutError("timed out"), AppStateError("the app is stopped"),
], ids=lambda error: type(error).__name__ + str(getattr(error, "code", "")))
def test_the_broker_unavailable_for_now_is_transient(error):
    assert send_failure(error) is SendFailure.TRANSIENT


@pytest.mark.parametrize("error", [
    answer(ResponseCode.NO_PERMISSION), answer(ResponseCode.TOPIC_NOT_EXIST),
    answer(ResponseCode.INVALID_PARAMETER), answer(ResponseCode.MESSAGE_ILLEGAL),
    RuntimeError("a failure nobody classified"),
], ids=lambda error: type(error).__name__ + str(getattr(error, "code", "")))
def test_the_message_refused_or_an_unknown_failure_counts(error):
    assert send_failure(error) is SendFailure.MESSAGE
