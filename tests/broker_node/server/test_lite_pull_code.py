"""LITE_PULL_MESSAGE (361): RocketMQ 5's ``DefaultLitePullConsumer`` pulls with this code
(the same header and answer as PULL_MESSAGE 11); the broker answered 3 (not supported), so a
lite pull consumer against ``postbox broker`` received nothing."""

from __future__ import annotations

from bench.remoting_raw import pull_fields
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.storage_engine import Message
from tests.support.stored_records import decode_records

LITE_PULL_MESSAGE = 361


def test_lite_pull_answers_like_pull(connect, broker):
    broker.create_topic("LP", 1)
    broker.send(Message(topic="LP", body=b"lite"), queue_id=0)
    broker.store.wait_dispatched()
    client = connect()
    lite = client.call(LITE_PULL_MESSAGE, pull_fields("G", "LP", 0, 0))
    plain = client.call(RequestCode.PULL_MESSAGE, pull_fields("G", "LP", 0, 0))
    assert lite.code == ResponseCode.SUCCESS, lite.remark
    assert [r.body for r in decode_records(lite.body)] == [b"lite"]
    assert lite.ext_fields == plain.ext_fields and lite.body == plain.body
