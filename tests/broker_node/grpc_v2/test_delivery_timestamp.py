"""A delayed message's delivery timestamp round-trips through the MessagingService conversion, as
Apache RocketMQ 5's proxy gives it back (the Java client's ``MessageView.getDeliveryTimestamp()``
was once empty for Postbox); it becomes a timer (``TIMER_DELIVER_MS``), never delivered early;
beyond ``timerMaxDelaySec`` it is refused with ``ILLEGAL_DELIVERY_TIME``; with timers off a
delay level carries it."""

from __future__ import annotations

import time

import pytest

from postbox.broker_node.grpc_v2.conversion import (
    PROPERTY_DELIVERY_TIMESTAMP_MS,
    message_from_proto,
    message_to_proto,
    timestamp,
)
from postbox.broker_node.grpc_v2.protocol import Code, definition
from postbox.broker_node.grpc_v2.statuses import RequestError
from postbox.storage_engine import Broker, StoreConfig
from postbox.storage_engine.config import DelayConfig
from tests.support.broker_process import write_broker_conf
from tests.support.polling import wait_until

PEER = ("127.0.0.1", 40000)


def proto(body: bytes, deliver_ms: int | None = None) -> definition.Message:
    message = definition.Message(topic=definition.Resource(name="later"), body=body)
    message.system_properties.message_id = "0102AB" + body.hex().upper()
    if deliver_ms is not None:
        message.system_properties.delivery_timestamp.CopyFrom(timestamp(deliver_ms))
    return message


def test_delayed_message_reports_the_delivery_time_it_asked_for(tmp_path):
    config = StoreConfig.from_broker_conf(write_broker_conf(tmp_path), root_dir=tmp_path / "s")
    with Broker.open(config) as broker:
        now_ms = int(time.time() * 1000)
        asked = {b"soon": now_ms + 150, b"past": now_ms - 5_000, b"plain": None}
        for body, deliver_ms in asked.items():
            message, _ = message_from_proto(proto(body, deliver_ms), "later", peer_host=PEER,
                                            now_ms=now_ms, delay=config.delay)
            broker.send(message, queue_id=0)
        views = wait_until(lambda: len(found := broker.pull("g", "later", 0, 0, 8).messages) == 3
                           and found, timeout_s=10)
    received = {view.body: message_to_proto(view) for view in views}
    soon = next(view for view in views if view.body == b"soon")
    assert soon.store_timestamp_ms >= asked[b"soon"]  # a timer: never early
    for body, deliver_ms in asked.items():
        system = received[body].system_properties
        assert PROPERTY_DELIVERY_TIMESTAMP_MS not in received[body].user_properties
        if deliver_ms is None:
            assert not system.HasField("delivery_timestamp")
            assert system.message_type == definition.NORMAL
        else:
            assert system.delivery_timestamp == timestamp(deliver_ms)
            assert system.message_type == definition.DELAY


def test_clients_cannot_set_the_delivery_property_themselves():
    message = proto(b"x")
    message.user_properties[PROPERTY_DELIVERY_TIMESTAMP_MS] = "1"
    with pytest.raises(RequestError):
        message_from_proto(message, "later", peer_host=PEER, now_ms=0, delay=DelayConfig())


@pytest.mark.parametrize("name", ["__RMQ.TRANSIENT.flag", "DLQ_REASON", "CORRELATION_ID", ""])
def test_grpc_sends_obey_the_one_property_rule(name):
    """The gRPC entry point refuses user properties by ``formats.message_rules``, like every
    other entry point: transient names, every system name, empty names."""
    message = proto(b"x")
    message.user_properties[name] = "v"
    with pytest.raises(RequestError) as refused:
        message_from_proto(message, "later", peer_host=PEER, now_ms=0, delay=DelayConfig())
    assert refused.value.code == Code.ILLEGAL_MESSAGE_PROPERTY_KEY


def test_grpc_empty_body_is_refused_in_the_rule_s_words():
    with pytest.raises(RequestError, match="body is empty") as refused:
        message_from_proto(proto(b""), "later", peer_host=PEER, now_ms=0, delay=DelayConfig())
    assert refused.value.code == Code.MESSAGE_BODY_EMPTY


def test_delivery_time_becomes_a_timer_and_is_refused_beyond_the_maximum():
    now_ms = 1_800_000_000_000
    message, _ = message_from_proto(proto(b"t", now_ms + 2_500), "later", peer_host=PEER,
                                    now_ms=now_ms, delay=DelayConfig())
    assert message.properties["TIMER_DELIVER_MS"] == str(now_ms + 2_500)
    assert "DELAY" not in message.properties
    with pytest.raises(RequestError, match="timerMaxDelaySec") as refused:
        message_from_proto(proto(b"far", now_ms + 3_001_000), "later", peer_host=PEER,
                           now_ms=now_ms, delay=DelayConfig(timer_max_delay_s=3000))
    assert refused.value.code == Code.ILLEGAL_DELIVERY_TIME
    levelled, _ = message_from_proto(proto(b"lv", now_ms + 2_500), "later", peer_host=PEER,
                                     now_ms=now_ms, delay=DelayConfig(timer_enabled=False))
    assert levelled.properties["DELAY"] == "2"  # 5 s: the smallest level covering 2.5 s
    assert levelled.properties[PROPERTY_DELIVERY_TIMESTAMP_MS] == str(now_ms + 2_500)
