"""One message rule at every entry point: no empty body, no system property names among user
properties (each refused with the argument to use), and ``unique_key=`` to resend a message
under the id it had. Every refusal happens before anything is written."""

from __future__ import annotations

import pytest

from framework import App, InvalidMessageError
from framework.testing import InlineRunner
from storage_engine import Broker, Message
from storage_engine import InvalidMessageError as StoreInvalidMessageError
from storage_engine.formats import PROPERTY_ARGUMENTS, SYSTEM_PROPERTY_NAMES

HINTS = [("UNIQ_KEY", "unique_key="), ("KEYS", "keys="), ("TAGS", "tags="),
         ("DELAY", "delay_level="), ("TIMER_DELIVER_MS", "delay_level="),
         ("__STARTDELIVERTIME", "delay_level="), ("__SHARDINGKEY", "sharding_key=")]


def written(broker: Broker) -> tuple[int, dict]:
    """What the store holds: its commit-log end and its topics."""
    return broker.store.commit_log.max_position, dict(broker.store.topics())


@pytest.mark.parametrize(("name", "argument"), HINTS)
def test_a_reserved_property_names_the_argument_and_sends_nothing(open_broker, client, name,
                                                                   argument):
    broker = open_broker()
    app = App(broker=client(broker))
    before = written(broker)
    with pytest.raises(InvalidMessageError, match=f"use the {argument} argument"):
        app.producer.send("orders", b"x", properties={name: "v"})
    assert written(broker) == before


@pytest.mark.parametrize("name", sorted(SYSTEM_PROPERTY_NAMES - set(PROPERTY_ARGUMENTS)))
def test_every_other_system_property_is_refused(open_broker, name):
    broker = open_broker()
    app = App(broker=broker)
    with pytest.raises(InvalidMessageError, match=f"property {name!r}"):
        app.producer.send("orders", b"x", properties={name: "v"})
    assert written(broker) == (0, {})


def test_transient_properties_are_refused(open_broker):
    app = App(broker=open_broker())
    with pytest.raises(InvalidMessageError, match="never stores"):
        app.producer.send("orders", b"x", properties={"__RMQ.TRANSIENT.flag": "1"})


def test_unique_key_resends_the_same_message_id(open_broker, client):
    """A caller resending a message keeps its id, so an idempotent consumer sees one message."""
    broker = open_broker()
    app = App(broker=client(broker))
    first = app.producer.send("orders", b"pay 1", unique_key="order-1-payment")
    again = app.producer.send("orders", b"pay 1", unique_key="order-1-payment")
    assert first.msg_id == again.msg_id == "order-1-payment"
    broker.store.wait_dispatched()
    stored = broker.find_by_unique_key("orders", "order-1-payment")
    assert [view.unique_key for view in stored] == ["order-1-payment"] * 2
    seen: list[str] = []
    consumer = App(broker=broker)
    consumer.handler(topic="orders", consumer_group="billing", consume_from="first")(
        lambda message: seen.append(message.msg_id))
    InlineRunner(consumer).run_until_idle()
    assert seen == ["order-1-payment"] * 2


@pytest.mark.parametrize("bad", ["", "   ", "a\x01b", "x" * 129, 7])
def test_a_bad_unique_key_is_refused(open_broker, bad):
    broker = open_broker()
    with pytest.raises(InvalidMessageError, match="unique_key"):
        App(broker=broker).producer.send("orders", b"x", unique_key=bad)
    assert written(broker) == (0, {})


@pytest.mark.parametrize("body", [b"", ""])
def test_producer_refuses_an_empty_body(open_broker, client, body):
    broker = open_broker()
    app = App(broker=client(broker))
    with pytest.raises(InvalidMessageError, match="body is empty"):
        app.producer.send("orders", body)
    with pytest.raises(InvalidMessageError, match="body is empty"):
        app.producer.send("orders", body, delay_level=2)
    assert written(broker) == (0, {})


def test_broker_and_store_refuse_an_empty_body_before_writing(open_broker):
    broker = open_broker()
    with pytest.raises(StoreInvalidMessageError, match="body is empty"):
        broker.send(Message("orders", b""))
    with pytest.raises(StoreInvalidMessageError, match="body is empty"):
        broker.send(Message("orders", b"", properties={"DELAY": "2"}))
    with pytest.raises(StoreInvalidMessageError, match="body is empty"):
        broker.store.put_message(Message("orders", b""), queue_id=0)
    assert written(broker) == (0, {})
    assert broker.topic_config("orders") is None  # the refused send created no topic
