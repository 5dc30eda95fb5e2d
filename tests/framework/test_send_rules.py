"""One message rule at every entry point: no empty body, no system property names among user
properties (each refused with the argument to use), and ``unique_key=`` to resend a message
under the id it had. Every refusal happens before anything is written."""

from __future__ import annotations

import pytest

from postbox import storage_engine
from postbox.framework import (
    App,
    AppStateError,
    BrokerClient,
    ConsumedMessage,
    DeadLetter,
    InvalidMessageError,
    SendResult,
    SendStatus,
    check_message,
)
from postbox.framework.testing import InlineRunner
from postbox.storage_engine import Broker, Message, PutStatus, infer_config
from postbox.storage_engine import InvalidMessageError as StoreInvalidMessageError
from postbox.storage_engine.formats import PROPERTY_ARGUMENTS, SYSTEM_PROPERTY_NAMES
from tests.support.polling import wait_until

HINTS = [("UNIQ_KEY", "unique_key="), ("KEYS", "keys="), ("TAGS", "tags="),
         ("DELAY", "delay_level="), ("TIMER_DELIVER_MS", "deliver_at="),
         ("__STARTDELIVERTIME", "delay_level="), ("__SHARDINGKEY", "sharding_key=")]


def written(broker: BrokerClient) -> tuple[int, dict]:
    """What the store holds: its commit-log end and its topics. A remote broker (where the test
    has a namespace of its own): ``(0, {})`` until its topic ``orders`` exists."""
    if isinstance(broker, Broker):
        return broker.store.commit_log.max_position, dict(broker.store.topics())
    if broker.topic_config("orders") is None:
        return 0, {}
    return -1, {"orders": broker.queue_ids("orders")}


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
    wait_until(lambda: len(broker.find_by_unique_key("orders", "order-1-payment")) >= 2,
               what="both copies in the key index")  # indexed after the send returns
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


@pytest.mark.embedded_only("calls the store underneath the broker")
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


# ---- one rule set, one error type ------------------------------------------------------------

@pytest.mark.embedded_only("sets the store's maximum message size")
def test_framework_and_store_refuse_with_one_error_type(open_broker):
    """``framework.InvalidMessageError`` is the store's: a refusal by the store underneath (here
    a body over the store's own ``max_message_size_bytes``) is caught by the framework's name."""
    broker = open_broker(max_message_size_bytes=16)
    app = App(broker=broker)
    assert InvalidMessageError is StoreInvalidMessageError
    with pytest.raises(InvalidMessageError, match="max_message_size_bytes"):
        app.producer.send("orders", b"x" * 17)
    assert written(broker) == (0, {})


SAME_RULE = [
    pytest.param(dict(topic="a/b"), id="topic-slash"),
    pytest.param(dict(topic="t" * 128), id="topic-too-long"),
    pytest.param(dict(tags="a\x01b"), id="tags-framing"),
    pytest.param(dict(keys=["a\x02b"]), id="key-framing"),
    pytest.param(dict(properties={"note": "a\x01b"}), id="property-value-framing"),
    pytest.param(dict(properties={"": "v"}), id="property-name-empty"),
    pytest.param(dict(tags="\ud800"), id="tags-not-unicode"),
    pytest.param(dict(body=b""), id="empty-body"),
]


@pytest.mark.embedded_only("calls the store underneath the broker")
@pytest.mark.parametrize("fields", SAME_RULE)
def test_framework_check_and_store_state_a_broken_rule_alike(open_broker, fields):
    """The rules are stated once (``formats.message_rules``): ``check_message`` (the outbox's
    check) and the store's encoder refuse the same message with the same words."""
    message = {"topic": "orders", "body": b"x", **fields}
    store = open_broker().store
    with pytest.raises(StoreInvalidMessageError) as by_store:
        store.put_message(Message(message.pop("topic"), message.pop("body"), **message))
    with pytest.raises(InvalidMessageError) as by_framework:
        check_message(**{"topic": "orders", "body": b"x", **fields})
    assert str(by_framework.value) == str(by_store.value)


def test_a_dead_letter_shows_its_first_topic_and_reason(open_broker, fake_clock):
    """``ConsumedMessage`` over a dead letter restores the topic it was first sent to and the
    ``DeadLetter`` reason (the outbox's dead-letter rule reads both through it)."""
    broker = open_broker(clock=fake_clock)
    app = App(broker=broker, clock=fake_clock)

    @app.handler(topic="orders", consumer_group="billing")
    def refuse(message):
        raise DeadLetter("cannot parse")

    app.producer.send("orders", b"poison")
    InlineRunner(app, broker=broker).run_until_idle(advance_clock=True)
    app.stop()
    (letter,) = broker.dead_letters("billing")
    dead = ConsumedMessage(letter, "billing")
    assert (dead.topic, dead.stored_topic) == ("orders", "%DLQ%billing")
    assert dead.dead_letter_reason == "cannot parse"


def test_broker_and_producer_return_one_result_type(open_broker):
    """``Producer.send`` returns the broker's ``SendResult`` itself (DESIGN §4's name): the
    UNIQ_KEY as ``msg_id``, the asked-for and the stored queue, the store's status."""
    broker = open_broker()
    sent = App(broker=broker).producer.send("orders", b"x", delay_level=1)
    direct = broker.send(Message("orders", b"y", unique_key="k-1"))
    assert SendResult is storage_engine.SendResult
    assert type(sent) is type(direct) is SendResult
    assert sent.msg_id == sent.unique_key and direct.msg_id == "k-1"
    assert (sent.topic, sent.stored_topic) == ("orders", "SCHEDULE_TOPIC_XXXX")
    assert sent.status is SendStatus.SEND_OK is PutStatus.PUT_OK


# ---- delay levels and a stopped app ---------------------------------------------------------

@pytest.mark.parametrize("level", [19, 100, -1])
def test_a_delay_level_outside_the_levels_is_refused(open_broker, client, level):
    """Above the 18 levels is refused as below 1 is (a broker would clamp it to 2 h)."""
    broker = open_broker()
    app = App(broker=client(broker))
    with pytest.raises(InvalidMessageError, match=r"delay_level must be an int in 1\.\.18"):
        app.producer.send("orders", b"x", delay_level=level)
    assert written(broker) == (0, {})
    assert app.producer.send("orders", b"x", delay_level=18).delay_level == 18


@pytest.mark.embedded_only("configures the store's delay levels")
def test_the_level_count_is_the_embedded_stores_own(open_broker):
    app = App(broker=open_broker(levels="1s 2s 3s"))
    with pytest.raises(InvalidMessageError, match=r"1\.\.3 .*messageDelayLevel.*got 4"):
        app.producer.send("orders", b"x", delay_level=4)
    assert app.producer.send("orders", b"x", delay_level=3).delay_level == 3


def test_sending_after_stop_is_refused_and_opens_nothing(tmp_path):
    """A producer kept from before ``stop()`` and ``app.producer`` both refuse; the store is
    not reopened behind the caller's back (its lock stays free for another process)."""
    app = App(tmp_path / "store")
    producer = app.producer
    producer.send("orders", b"before")
    app.stop()
    with pytest.raises(AppStateError, match="app was stopped"):
        producer.send("orders", b"after")
    with pytest.raises(AppStateError, match="app was stopped"):
        producer.send_batch("orders", [b"after"])
    with pytest.raises(AppStateError, match="app was stopped"):
        app.producer.send("orders", b"after")
    assert not app.running
    with Broker.open(infer_config(tmp_path / "store")) as broker:  # not locked
        assert broker.store.commit_log.max_position > 0
    with app:  # start() makes it usable again
        assert app.producer.send("orders", b"restarted").status is SendStatus.SEND_OK
