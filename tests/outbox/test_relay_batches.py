"""The relay publishes the stubs of one topic with batch sends: one call and one queue per batch,
each stub's own position recorded; a stub the producer refuses fails alone."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import Engine, update

from postbox import outbox
from postbox.framework import App, ConfigurationError
from postbox.outbox import Relay, RelayOptions, message_stub
from postbox.outbox.claims import ClaimedStub
from postbox.outbox.relay import BATCH_CONTENT_MAX, publish_groups
from postbox.storage_engine import Broker
from tests.outbox.conftest import add_order, stub_row
from tests.outbox.test_relay import assert_published_as_stored, send_stubs


def claimed(message_id: str, topic: str = "orders", *, delay: int | None = None,
            size: int = 10) -> ClaimedStub:
    return ClaimedStub(message_id=message_id, topic=topic, tags=None, keys=None,
                       content=b"x" * size, properties={}, delay_level=delay, send_count=1,
                       queue_id=None, queue_offset=None, token="token")


def ids(groups: list[list[ClaimedStub]]) -> list[list[str]]:
    return [[item.message_id for item in group] for group in groups]


def test_publish_groups_batch_one_topic_in_claim_order_within_the_limits():
    stubs = [claimed("a1"), claimed("b1", "refunds"), claimed("a2"), claimed("d", delay=3),
             claimed("a3"), claimed("b2", "refunds"), claimed("a4")]
    assert ids(publish_groups(stubs, True, 3)) == [
        ["a1", "a2", "a3"], ["b1", "b2"], ["d"], ["a4"]]
    # a resend publishes a delayed stub at once: then it may share a batch
    assert ids(publish_groups(stubs, False, 8)) == [
        ["a1", "a2", "d", "a3", "a4"], ["b1", "b2"]]
    assert ids(publish_groups(stubs, True, 1)) == [[item.message_id] for item in stubs]
    half = BATCH_CONTENT_MAX // 2
    big = [claimed("x1", size=half), claimed("x2", size=half), claimed("x3", size=1)]
    assert ids(publish_groups(big, True, 32)) == [["x1", "x2"], ["x3"]]


@pytest.mark.parametrize("field", ["batch_size", "send_batch_max"])
def test_relay_options_refuse_a_batch_of_none(field: str):
    with pytest.raises(ConfigurationError, match=field):
        RelayOptions(**{field: 0})


def test_a_claimed_batch_goes_in_one_call_to_one_queue(app: App, broker: Broker,
                                                       make_engine: Callable[[], Engine]):
    """Seven stubs of one topic and two of another, batches of three: each batch lands in one
    queue at consecutive offsets (single sends would go round robin over the queues), and
    every stub records where its own record is; a delayed stub goes alone."""
    other_process = make_engine()
    orders = send_stubs(other_process, 7)
    refunds = send_stubs(other_process, 2, topic="refunds", first_order=100)
    with other_process.begin() as connection:
        add_order(connection, 200)
        delayed = outbox.send(connection, "orders", b"later", delay_level=1)
    relay = Relay(app.producer, make_engine(), options=RelayOptions(send_batch_max=3))

    assert relay.publish_due() == 10
    assert relay.stats.publish_latency.snapshot().observations == 10  # one per stub
    for batch in (orders[:3], orders[3:6], orders[6:], refunds):
        rows = [stub_row(other_process, message_id) for message_id in batch]
        assert len({row["queue_id"] for row in rows}) == 1
        first = rows[0]["queue_offset"]
        assert [row["queue_offset"] for row in rows] == list(range(first, first + len(rows)))
        for message_id in batch:
            assert_published_as_stored(other_process, broker, message_id)
    assert stub_row(other_process, delayed)["queue_offset"] is None  # in the delay topic


def test_a_stub_refused_in_its_batch_fails_alone(app: App, broker: Broker,
                                                 make_engine: Callable[[], Engine]):
    """A stub whose row was edited to carry a reserved property name cannot be sent: the
    batch is refused before anything is sent, and the relay sends its stubs one by one, so the
    others are published and only that stub records the error and waits for its retry."""
    engine = make_engine()
    good_1, bad, good_2 = send_stubs(engine, 3)
    with engine.begin() as connection:
        connection.execute(update(message_stub).where(message_stub.c.message_id == bad)
                           .values(properties='{"UNIQ_KEY": "forged"}'))
    relay = Relay(app.producer, engine)

    assert relay.publish_due() == 2
    assert_published_as_stored(engine, broker, good_1)
    assert_published_as_stored(engine, broker, good_2)
    row = stub_row(engine, bad)
    assert row["published_at"] is None and row["send_count"] == 1
    assert "InvalidMessageError" in row["last_error"] and "unique_key=" in row["last_error"]
    assert relay.stats.failed == 1
