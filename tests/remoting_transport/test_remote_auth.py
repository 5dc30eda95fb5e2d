"""Access control on Postbox's service: signed calls with rights pass, unsigned or badly signed
calls and calls without the right fail as ``NoPermissionError``; an ``App`` given
``access_key``/``secret_key`` produces and consumes."""

from __future__ import annotations

import threading

import pytest

from framework import App, ConsumerOptions
from network.acl_file import parse_acl
from network.grpc_v2.auth import AccessControl, Credentials
from storage_engine import Message
from storage_engine.errors import NoPermissionError

ACL = {"accounts": [
    {"access_key": "orders-app", "secret_key": "s3cret",
     "topics": {"orders": "PUB|SUB", "*": "DENY"}, "groups": {"billing": "SUB"},
     "create_topics": True},  # %RETRY%billing comes with SUB on billing
    {"access_key": "reader", "secret_key": "r3ad", "topics": {"*": "SUB"},
     "groups": {"*": "SUB"}},
]}


@pytest.fixture
def secured(open_broker, loopback):
    return loopback(open_broker(), access=AccessControl(parse_acl(ACL)))


def test_calls_need_a_valid_signature_and_the_right(secured):
    good = secured.client(credentials=Credentials("orders-app", "s3cret"))
    assert good.send(Message("orders", b"x")).topic == "orders"
    for client in (secured.client(), secured.client(credentials=Credentials("orders-app", "no")),
                   secured.client(credentials=Credentials("nobody", "s3cret"))):
        with pytest.raises(NoPermissionError):
            client.send(Message("orders", b"x"))
    with pytest.raises(NoPermissionError):
        good.send(Message("audit", b"x"))  # no right on that topic
    with pytest.raises(NoPermissionError):
        secured.client(credentials=Credentials("reader", "r3ad")).send(Message("orders", b"x"))
    assert secured.client(credentials=Credentials("reader", "r3ad")).queue_ids("orders")


def test_app_with_credentials_produces_and_consumes(secured):
    app = App(store_url=f"grpc://{secured.address}", access_key="orders-app",
              secret_key="s3cret", consumer_options=ConsumerOptions(long_polling_ms=200))
    got = threading.Event()

    @app.handler(topic="orders", consumer_group="billing", consume_from="first")
    def handle(message) -> None:
        got.set()

    app.start()
    try:
        app.producer.send("orders", b"paid")
        assert got.wait(10)
    finally:
        app.stop()
