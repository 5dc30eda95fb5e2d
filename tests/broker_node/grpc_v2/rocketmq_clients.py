"""Starting the official rocketmq-python-client against a test server.

Importing ``rocketmq`` creates ``~/logs/rocketmq_python/`` (the client's own log). Every client
started here is appended to the test's ``clients`` list, which shuts it down at teardown.
"""

from __future__ import annotations

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
)

REQUEST_TIMEOUT_S = 5


def configuration(address: str, access_key: str = "", secret_key: str = ""
                  ) -> ClientConfiguration:
    """A client configuration for ``address`` (signed when a key is given)."""
    return ClientConfiguration(address, Credentials(access_key, secret_key),
                               request_timeout=REQUEST_TIMEOUT_S)


def start_producer(clients: list, config: ClientConfiguration, *topics: str) -> Producer:
    """A started producer."""
    producer = Producer(config, topics or None)
    producer.startup()
    clients.append(producer)
    return producer


def start_simple_consumer(clients: list, config: ClientConfiguration, group: str,
                          topic: str, expression: str = "*",
                          await_duration_s: int = 2) -> SimpleConsumer:
    """A started simple consumer of one topic."""
    consumer = SimpleConsumer(config, group, {topic: FilterExpression(expression)},
                              await_duration=await_duration_s)
    consumer.startup()
    clients.append(consumer)
    return consumer


def start_push_consumer(clients: list, config: ClientConfiguration, group: str, topic: str,
                        listener: MessageListener) -> PushConsumer:
    """A started push consumer of one topic (4 consumption threads)."""
    consumer = PushConsumer(config, group, listener, {topic: FilterExpression()},
                            consumption_thread_count=4)
    consumer.startup()
    clients.append(consumer)
    return consumer


def message(topic: str, body: bytes, *, tag: str | None = None, keys: tuple[str, ...] = (),
            properties: dict[str, str] | None = None,
            delivery_timestamp_ms: int | None = None) -> Message:
    """A client message."""
    built = Message()
    built.topic = topic
    built.body = body
    if tag is not None:
        built.tag = tag
    for key in keys:  # the setter adds one key per assignment
        built.keys = key
    for name, value in (properties or {}).items():
        built.add_property(name, value)
    if delivery_timestamp_ms is not None:
        built.delivery_timestamp = delivery_timestamp_ms
    return built
