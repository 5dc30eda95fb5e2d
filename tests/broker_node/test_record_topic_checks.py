"""Requests that name a stored record by its commit-log position (send-back 36, view by id 33)
reach only records of a topic the caller has SUB on (the access hook's ``check_topic`` on the
record's own topic, after the rights on the topic the request names): otherwise a key with SUB
on one topic could copy another topic's message into its retry topic, or read it, by guessing
its position."""

from __future__ import annotations

import pytest

from bench.remoting_raw import RawRemotingClient
from postbox.broker_node.access import RemotingAccess
from postbox.broker_node.acl_file import parse_acl
from postbox.broker_node.server.broker import BrokerRemotingServer
from postbox.network.protocol.acl_signature import sign_request
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.storage_engine import Broker, Message
from tests.support.small_store import small_store_config
from tests.support.stored_records import decode_records

ACL = {"accounts": [{"access_key": "app", "secret_key": "s", "topics": {"orders": "SUB"},
                     "groups": {"billing": "SUB"}}]}


@pytest.fixture
def served(tmp_path):
    with Broker.open(small_store_config(tmp_path / "store")) as broker:
        access = RemotingAccess(parse_acl(ACL))
        server = BrokerRemotingServer(broker, access=access)
        server.start()
        try:
            secret = broker.send(Message(topic="secret", body=b"payroll"), queue_id=0)
            mine = broker.send(Message(topic="orders", body=b"order"), queue_id=0)
            broker.store.wait_dispatched()
            with RawRemotingClient(server.address) as client:
                yield client, broker, secret.log_position, mine.log_position
        finally:
            server.stop()


def _signed(client, code, fields):
    return client.call_command(sign_request(client.request(code, fields), "app", "s"))


def test_send_back_of_another_topics_record_is_refused(served):
    client, broker, secret, mine = served
    fields = {"group": "billing", "delayLevel": 1, "originTopic": "orders"}
    stolen = _signed(client, RequestCode.CONSUMER_SEND_MSG_BACK, {**fields, "offset": secret})
    assert stolen.code == ResponseCode.NO_PERMISSION
    assert "no SUB right on topic 'secret'" in stolen.remark
    unnamed = _signed(client, RequestCode.CONSUMER_SEND_MSG_BACK,
                      {"group": "billing", "delayLevel": 1, "offset": secret})
    assert unnamed.code == ResponseCode.NO_PERMISSION
    assert "no SUB right on topic 'secret'" in unnamed.remark
    assert broker.topic_config("%RETRY%billing") is None or \
        broker.store.max_offset("%RETRY%billing", 0) == 0
    own = _signed(client, RequestCode.CONSUMER_SEND_MSG_BACK, {**fields, "offset": mine})
    assert own.code == 0, own.remark


def test_view_by_id_of_another_topics_record_is_refused(served):
    client, _, secret, mine = served
    stolen = _signed(client, RequestCode.VIEW_MESSAGE_BY_ID, {"topic": "orders",
                                                              "offset": secret})
    assert stolen.code == ResponseCode.NO_PERMISSION and b"payroll" not in stolen.body
    assert "no SUB right on topic 'secret'" in stolen.remark
    unnamed = _signed(client, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": secret})
    assert unnamed.code == ResponseCode.NO_PERMISSION and b"payroll" not in unnamed.body
    assert _signed(client, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": mine}).code == 0
    own = _signed(client, RequestCode.VIEW_MESSAGE_BY_ID, {"topic": "orders", "offset": mine})
    assert own.code == 0
    assert [record.body for record in decode_records(own.body)] == [b"order"]
