"""Failures over the gRPC transport: an unreachable broker is a prompt, clear error; names
from the network are validated as local ones (and nothing reaches the disk); storage errors keep
their class; URLs and options are checked before anything connects."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from framework import App, ConfigurationError
from network.grpc_v2.client import RemoteBroker
from storage_engine import (
    BrokerConfig,
    BrokerUnavailableError,
    InvalidMessageError,
    Message,
    StoreClosedError,
)
from storage_engine.errors import InvalidQueueError, InvalidTopicError, TopicNotFoundError

UNREACHABLE_PROMPTLY_S = 5.0


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens once the probe is closed


def _tree(root) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


def test_broker_down_is_a_prompt_clear_error_not_a_hang():
    address = f"127.0.0.1:{_closed_port()}"
    app = App(store_url=f"grpc://{address}")

    @app.handler(topic="events", consumer_group="g")
    def handle(message) -> None:
        return None

    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError) as error:
        app.producer.send("events", b"x")
    assert address in str(error.value) and error.value.address == address
    with pytest.raises(BrokerUnavailableError):
        app.start()
    app.stop()
    assert time.monotonic() - started < UNREACHABLE_PROMPTLY_S


def test_call_deadline_is_timeout_ms():
    """A broker that accepts the connection but never answers costs a call ``timeout_ms``
    (milliseconds, as every duration of the engine), not the default 10 s."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        with RemoteBroker(address, timeout_ms=300) as client:
            started = time.monotonic()
            with pytest.raises(BrokerUnavailableError):
                client.send(Message("events", b"x"))
            assert time.monotonic() - started < UNREACHABLE_PROMPTLY_S


def test_bad_names_over_the_network_are_rejected_and_create_nothing(open_broker, loopback):
    broker = open_broker()
    client = loopback(broker).client()
    client.send(Message("events", b"ok"))
    broker.store.wait_dispatched()
    before = _tree(broker.store.root_dir)
    for bad in ("../escape", "a/b", "x" * 200, "", "dot.ted"):
        with pytest.raises(InvalidTopicError):
            client.send(Message(bad, b"x"))
        with pytest.raises(InvalidTopicError):
            client.create_topic(bad)
        with pytest.raises(InvalidMessageError):
            client.pull("g", bad, 0, 0)
        with pytest.raises(InvalidMessageError):
            client.wait_for_arrival({(bad, 0): 0}, 10)
        with pytest.raises(InvalidMessageError):
            client.register_consumer("g", "c1", [bad])
    for bad_group in ("../escape", "a/b", "x" * 250, "", "dot.ted"):
        with pytest.raises(InvalidMessageError):
            client.commit_offset(bad_group, "events", 0, 1)
        with pytest.raises(InvalidMessageError):
            client.register_consumer(bad_group, "c1", ["events"])
    assert _tree(broker.store.root_dir) == before  # no directory, no file
    assert broker.topic_config("a/b") is None and broker.consumer_ids("g") == []


def test_storage_errors_keep_their_class_and_context(open_broker, loopback):
    broker = open_broker(broker=BrokerConfig(auto_create_topic=False))
    client = loopback(broker).client()
    with pytest.raises(TopicNotFoundError):
        client.send(Message("nowhere", b"x"))
    client.create_topic("events", 2)
    with pytest.raises(InvalidQueueError) as error:
        client.pull("g", "events", 5, 0)
    assert error.value.topic == "events"
    with pytest.raises(InvalidMessageError):
        client.pull("g", "events", 0, -1)
    client.close()
    with pytest.raises(StoreClosedError):
        client.queue_ids("events")


def test_grpc_urls_are_checked_before_anything_connects(tmp_path):
    app = App(store_url="grpc://127.0.0.1:1")  # nothing listens; nothing connects yet

    @app.handler(topic="events", consumer_group="g")
    def handle(message) -> None:
        return None

    assert handle.__name__ == "handle"
    for url in ("grpc://127.0.0.1", "grpc://:9876", "grpc://host:9876/path",
                "grpc://host:99999"):
        with pytest.raises(ConfigurationError):
            App(store_url=url)
    with pytest.raises(ConfigurationError, match="access_key"):
        App(store_url="grpc://ak:sk@127.0.0.1:9876")
    with pytest.raises(ConfigurationError, match="broker_conf"):
        App(store_url="grpc://127.0.0.1:9876", broker_conf={"maxMessageSize": "1024"})
    with pytest.raises(ConfigurationError):
        App(store_url="grpc://127.0.0.1:9876", access_key="ak")
    with pytest.raises(ConfigurationError):
        App(store_url=tmp_path.as_uri(), access_key="ak", secret_key="sk")
    assert not list(tmp_path.iterdir())


def test_client_waits_end_on_cancel_and_wake(open_broker, loopback):
    client: RemoteBroker = loopback(open_broker()).client()
    client.create_topic("events", 1)
    started = time.monotonic()
    assert client.wait_for_arrival({("events", 0): 0}, 10_000, cancel=lambda: True) is False
    assert time.monotonic() - started < 1
    threading.Timer(0.2, client.wake_waiters).start()
    started = time.monotonic()
    assert client.wait_for_arrival({("events", 0): 0}, 10_000) is False
    assert time.monotonic() - started < 2
    threading.Timer(0.2, lambda: client.send(Message("events", b"x"))).start()
    assert client.wait_for_arrival({("events", 0): 0}, 10_000) is True
