"""``outbox.send``: a stub written in the caller's transaction, or nothing at all."""

from __future__ import annotations

import json
import re
from datetime import datetime

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from postbox import outbox
from postbox.framework import App
from postbox.outbox import (
    BodyNotSerializableError,
    InvalidMessageError,
    NoTransactionError,
    Outbox,
    RelayOptions,
    StubStatus,
)
from postbox.storage_engine import Broker
from tests.outbox.conftest import (
    add_order,
    order_count,
    stored_records,
    stub_count,
    stub_row,
)
from tests.support.polling import wait_until

UNIQ_KEY = re.compile(r"[0-9A-F]{32}")
NOW = datetime(2024, 5, 6, 7, 8, 9, 123456)


def test_send_in_session_transaction_stores_one_stub(engine: Engine):
    sessions = sessionmaker(engine)
    properties = {"source": "shop", "trace": "t-1"}
    with sessions.begin() as session:
        add_order(session, 1)
        message_id = outbox.send(session, "orders", b"\x00raw\xff", tags="created",
                                 keys=["order-1", "customer-7"], properties=properties,
                                 delay_level=3, now=NOW)

    assert UNIQ_KEY.fullmatch(message_id)
    row = stub_row(engine, message_id)
    assert row["status"] == StubStatus.UNCONFIRMED.value == "unconfirmed"
    assert row["send_count"] == 0
    assert row["topic"] == "orders"
    assert row["tags"] == "created"
    assert row["keys"] == "order-1 customer-7"
    assert bytes(row["content"]) == b"\x00raw\xff"
    assert json.loads(row["properties"]) == properties
    assert row["delay_level"] == 3
    assert row["created_at"] == row["updated_at"] == row["next_resend_at"] == NOW
    for unset in ("queue_id", "queue_offset", "log_position", "offset_msg_id", "published_at",
                  "lease_owner", "lease_until", "confirmed_at", "last_error"):
        assert row[unset] is None, unset
    assert order_count(engine) == 1


def test_send_in_connection_transaction_encodes_text_and_json(engine: Engine):
    with engine.begin() as connection:
        add_order(connection, 1)
        text_id = outbox.send(connection, "orders", "héllo €", keys="a b")
        json_id = outbox.send(connection, "orders", {"order": 1, "items": [1, 2], "name": "é"})
        plain_id = outbox.send(connection, "orders", b"x")

    assert len({text_id, json_id, plain_id}) == 3
    assert all(UNIQ_KEY.fullmatch(message_id) for message_id in (text_id, json_id, plain_id))
    text_row, json_row, plain_row = (stub_row(engine, message_id)
                                     for message_id in (text_id, json_id, plain_id))
    assert bytes(text_row["content"]) == "héllo €".encode()
    assert text_row["keys"] == "a b"
    assert bytes(json_row["content"]) == '{"order":1,"items":[1,2],"name":"é"}'.encode()
    for row in (json_row, plain_row):
        assert row["tags"] is None and row["keys"] is None
        assert row["properties"] is None and row["delay_level"] is None
        assert row["status"] == "unconfirmed" and row["send_count"] == 0


def test_caller_chosen_message_id_is_used_as_is(engine: Engine):
    with engine.begin() as connection:
        message_id = outbox.send(connection, "orders", b"x", message_id="order-42:created")
    assert message_id == "order-42:created"
    assert stub_row(engine, "order-42:created")["topic"] == "orders"
    assert stub_count(engine) == 1


def test_rolled_back_business_transaction_leaves_no_stub_and_nothing_is_published(
        app: App, broker: Broker):
    box = Outbox(app, options=RelayOptions(poll_interval_ms=50))
    app.start()

    with pytest.raises(RuntimeError, match="business failure"), box.session.begin() as session:
        add_order(session, 1)
        lost_id = outbox.send(session, "lost", b"never")
        raise RuntimeError("business failure")
    # a committed message afterwards proves the relay ran after the rollback
    with box.session.begin() as session:
        add_order(session, 2)
        kept_id = outbox.send(session, "kept", b"kept")
    wait_until(lambda: stub_row(box.engine, kept_id)["published_at"], what="the kept publish")
    box.relay.publish_due()

    assert stub_row(box.engine, lost_id) is None
    assert stub_count(box.engine) == 1 and order_count(box.engine) == 1
    assert stored_records(broker, "lost") == []
    assert broker.find_by_unique_key("lost", lost_id) == []
    assert broker.topic_config("lost") is None  # never created: nothing was sent to it
    assert [record.unique_key for record in stored_records(broker, "kept")] == [kept_id]
    assert box.relay.stats.published == 1 and box.relay.stats.failed == 0


# ---- no transaction -----------------------------------------------------------------------


def test_session_without_a_transaction_is_refused(engine: Engine):
    with Session(engine) as session, pytest.raises(NoTransactionError, match="transaction"):
        outbox.send(session, "orders", b"x")
    assert stub_count(engine) == 0


def test_connection_without_begin_is_refused(engine: Engine):
    with engine.connect() as connection:
        with pytest.raises(NoTransactionError, match="transaction"):
            outbox.send(connection, "orders", b"x")
        connection.commit()
    assert stub_count(engine) == 0


def test_autocommit_connection_is_refused(engine: Engine):
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        with pytest.raises(NoTransactionError, match="AUTOCOMMIT"), connection.begin():
            outbox.send(connection, "orders", b"x")
        with pytest.raises(NoTransactionError):
            outbox.send(connection, "orders", b"x")
    autocommit_engine = engine.execution_options(isolation_level="AUTOCOMMIT")
    with autocommit_engine.connect() as connection, \
            pytest.raises(NoTransactionError, match="AUTOCOMMIT"), connection.begin():
        outbox.send(connection, "orders", b"x")
    assert stub_count(engine) == 0


def test_something_else_than_a_session_or_connection_is_refused(engine: Engine):
    with pytest.raises(TypeError, match="Session or Connection"):
        outbox.send(engine, "orders", b"x")  # type: ignore[arg-type]
    assert stub_count(engine) == 0


# ---- bad input: a clear error, nothing written --------------------------------------------

FOUR_MIB = 4 * 1024 * 1024

BAD_MESSAGES = [
    pytest.param({"body": b"x" * (FOUR_MIB + 1)}, InvalidMessageError, "limit is 4,194,304",
                 id="oversized-body"),
    pytest.param({"body": object()}, BodyNotSerializableError, "not bytes, text or JSON",
                 id="unserialisable-body"),
    pytest.param({"body": {"x": float("nan")}}, BodyNotSerializableError, "JSON",
                 id="nan-in-json-body"),
    pytest.param({"topic": "../etc"}, InvalidMessageError, "outside [A-Za-z0-9_%|-]",
                 id="topic-dot-dot"),
    pytest.param({"topic": "a/b"}, InvalidMessageError, "outside [A-Za-z0-9_%|-]",
                 id="topic-slash"),
    pytest.param({"topic": ""}, InvalidMessageError, "non-empty", id="topic-empty"),
    pytest.param({"topic": "t" * 200}, InvalidMessageError, "200 characters",
                 id="topic-too-long"),
    pytest.param({"topic": "%DLQ%group"}, InvalidMessageError, "system topic",
                 id="topic-system"),
    pytest.param({"properties": {"note": "a\x01b"}}, InvalidMessageError, "U+0001",
                 id="property-framing"),
    pytest.param({"properties": {"UNIQ_KEY": "mine"}}, InvalidMessageError,
                 "use the message_id= argument", id="property-uniq-key"),
    pytest.param({"properties": {"KEYS": "k"}}, InvalidMessageError, "use the keys= argument",
                 id="property-keys"),
    pytest.param({"properties": {"TAGS": "t"}}, InvalidMessageError, "use the tags= argument",
                 id="property-tags"),
    pytest.param({"properties": {"DELAY": "3"}}, InvalidMessageError,
                 "use the delay_level= argument", id="property-delay"),
    pytest.param({"properties": {"TRAN_MSG": "true"}}, InvalidMessageError, "system property",
                 id="property-tran-msg"),
    pytest.param({"properties": {"__STARTDELIVERTIME": "1"}}, InvalidMessageError,
                 "delay_level=", id="property-start-deliver-time"),
    pytest.param({"body": b""}, InvalidMessageError, "body is empty", id="empty-bytes-body"),
    pytest.param({"body": ""}, InvalidMessageError, "body is empty", id="empty-text-body"),
    pytest.param({"tags": "a\x02b"}, InvalidMessageError, "U+0002", id="tags-framing"),
    pytest.param({"keys": ["good", "has space"]}, InvalidMessageError, "contains a space",
                 id="key-with-space"),
    pytest.param({"delay_level": -1}, InvalidMessageError, "delay_level", id="negative-delay"),
    pytest.param({"message_id": ""}, InvalidMessageError, "message_id", id="empty-message-id"),
    pytest.param({"message_id": "m" * 200}, InvalidMessageError, "at most 128",
                 id="long-message-id"),
    pytest.param({"message_id": "a\x01b"}, InvalidMessageError, "message_id",
                 id="framing-in-message-id"),
]


@pytest.mark.parametrize(("overrides", "error", "fragment"), BAD_MESSAGES)
@pytest.mark.parametrize("through", ["session", "connection"])
def test_bad_message_raises_and_nothing_is_written(engine: Engine, through: str,
                                                   overrides: dict, error: type,
                                                   fragment: str):
    arguments = {"topic": "orders", "body": b"ok", **overrides}
    topic, body = arguments.pop("topic"), arguments.pop("body")
    context = sessionmaker(engine).begin() if through == "session" else engine.begin()
    with pytest.raises(error) as raised, context as target:
        add_order(target, 1)
        outbox.send(target, "orders", b"fine")  # a good stub earlier in the same transaction
        outbox.send(target, topic, body, **arguments)
    assert fragment in str(raised.value)
    assert isinstance(raised.value, InvalidMessageError)
    assert stub_count(engine) == 0
    assert order_count(engine) == 0


def test_a_bad_message_leaves_the_transaction_usable(engine: Engine):
    """The error is raised before any SQL, so a caller may catch it and still commit."""
    with engine.begin() as connection:
        add_order(connection, 1)
        with pytest.raises(InvalidMessageError):
            outbox.send(connection, "a/b", b"x")
        good_id = outbox.send(connection, "orders", b"x")
        assert connection.execute(text("SELECT 1")).scalar_one() == 1
    assert stub_count(engine) == 1 and order_count(engine) == 1
    assert stub_row(engine, good_id) is not None
