"""FIFO message groups through the outbox: ``outbox.send(message_group=)`` and a relay that
publishes each group's stubs in send order, a failing stub holding back its own group alone.

Runs over the ``engine`` fixture's database (SQLite by default; PostgreSQL or MariaDB with
``POSTBOX_TEST_DATABASE_URL``) and an embedded broker. A relay killed (``kill -9``) between its
claim and its outcome leaves exactly an abandoned claim: a lease that runs out with no outcome
recorded, which is what these tests leave behind (the claim made, its relay gone); one killed
after the broker stored the message and before the record leaves the message stored too.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine

from postbox import outbox
from postbox.framework import App, InvalidMessageError, Producer, SendResult
from postbox.outbox import Relay, RelayOptions, ResendRules, StubStatus, claim_stubs
from postbox.outbox.claims import unpublished_due
from postbox.outbox.clock import utc_now
from postbox.storage_engine import Broker
from postbox.storage_engine.formats.constants import PROPERTY_SHARDING_KEY
from tests.outbox.conftest import stored_records, stub_row, stub_rows

TOPIC = "order-events"


class Clock:
    """A database time the test moves (naive UTC, as the relay reads it)."""

    def __init__(self) -> None:
        self.now = utc_now()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


class FlakyProducer:
    """A producer whose sends of the bodies in ``refuse`` raise (a refusal: the attempt
    counts) and, while ``down``, every send raises as an unreachable broker does."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.refuse: dict[bytes, int] = {}
        """Body → how many more sends of it fail."""
        self.down = False

    def send(self, topic: str, body: bytes, **options: Any) -> SendResult:
        if self.down:
            raise ConnectionRefusedError("broker down")
        if self.refuse.get(body, 0) > 0:
            self.refuse[body] -= 1
            raise RuntimeError(f"refused {body!r}")
        return self.producer.send(topic, body, **options)

    def send_batch(self, topic: str, messages: Any, **options: Any) -> list[SendResult]:
        if self.down:
            raise ConnectionRefusedError("broker down")
        return self.producer.send_batch(topic, messages, **options)


def send_interleaved(engine: Engine, groups: list[str], per_group: int, *,
                     ungrouped: bool = True) -> dict[str | None, list[str]]:
    """Commit ``per_group`` messages of each group, interleaved (g0-0, g1-0, …, g0-1, …),
    each in its own transaction, with an ungrouped message after each round; return each
    group's bodies in send order (None: the ungrouped ones)."""
    sent: dict[str | None, list[str]] = defaultdict(list)
    clock = utc_now()
    for number in range(per_group):
        for group in [*groups, *([None] if ungrouped else [])]:
            body = f"{group or 'free'}-{number}"
            clock += timedelta(microseconds=1)  # distinct send times, as separate commits
            with engine.begin() as connection:
                outbox.send(connection, TOPIC, body, message_group=group, now=clock)
            sent[group].append(body)
    return sent


def stored_by_group(broker: Broker) -> dict[str | None, list[str]]:
    """The bodies stored for ``TOPIC``, per message group, in each queue's order."""
    found: dict[str | None, list[str]] = defaultdict(list)
    for view in stored_records(broker, TOPIC):
        found[view.properties.get(PROPERTY_SHARDING_KEY)].append(view.body.decode())
    return found


def relay_over(app: App, engine: Engine, clock: Clock, **options: Any) -> tuple[Relay,
                                                                                FlakyProducer]:
    flaky = FlakyProducer(app.producer)
    settings = RelayOptions(**{"retry_delay_ms": 1_000, **options})
    return Relay(lambda: flaky, engine, options=settings, now=clock), flaky  # type: ignore


def test_send_stores_the_group_and_refuses_a_bad_one_or_a_delay(engine: Engine):
    with engine.begin() as connection:
        grouped = outbox.send(connection, TOPIC, b"x", message_group="order-42")
        free = outbox.send(connection, TOPIC, b"y")
    assert stub_row(engine, grouped)["message_group"] == "order-42"
    assert stub_row(engine, free)["message_group"] is None
    for bad in ("", " ", "x" * 129, "tab\there"):
        with engine.begin() as connection, pytest.raises(InvalidMessageError,
                                                         match="message_group"):
            outbox.send(connection, TOPIC, b"x", message_group=bad)
    with engine.begin() as connection, pytest.raises(InvalidMessageError, match="not both"):
        outbox.send(connection, TOPIC, b"x", message_group="g", delay=timedelta(seconds=5))
    with engine.begin() as connection, pytest.raises(InvalidMessageError, match="not both"):
        outbox.send(connection, TOPIC, b"x", message_group="g", delay_level=2)
    assert len(stub_rows(engine)) == 2


def test_each_group_is_published_in_send_order_in_one_queue(app: App, broker: Broker,
                                                             engine: Engine):
    sent = send_interleaved(engine, ["g0", "g1", "g2"], 4)
    clock = Clock()
    relay, _ = relay_over(app, engine, clock)
    assert relay.publish_due() == 16  # one pass: a claim per round frees each successor
    stored = stored_by_group(broker)
    assert {group: stored[group] for group in ("g0", "g1", "g2")} == {
        group: sent[group] for group in ("g0", "g1", "g2")}
    assert sorted(stored[None]) == sorted(sent[None])
    queues = defaultdict(set)
    for view in stored_records(broker, TOPIC):
        queues[view.properties.get(PROPERTY_SHARDING_KEY)].add(view.queue_id)
    assert all(len(queues[group]) == 1 for group in ("g0", "g1", "g2"))


def test_a_refused_stub_holds_back_its_group_alone(app: App, broker: Broker, engine: Engine):
    sent = send_interleaved(engine, ["g0", "g1", "g2"], 4)
    clock = Clock()
    relay, flaky = relay_over(app, engine, clock)
    flaky.refuse[b"g1-1"] = 2  # its first two attempts are refused
    relay.publish_due()
    stored = stored_by_group(broker)
    assert stored["g1"] == ["g1-0"]  # g1-1 failed: g1-2, g1-3 wait behind it
    assert stored["g0"] == sent["g0"] and stored["g2"] == sent["g2"]
    assert sorted(stored[None]) == sorted(sent[None])
    waiting = {row["content"]: row for row in stub_rows(engine) if row["published_at"] is None}
    assert sorted(waiting) == [b"g1-1", b"g1-2", b"g1-3"]
    assert waiting[b"g1-1"]["send_count"] == 1 and waiting[b"g1-2"]["send_count"] == 0

    with engine.begin() as connection:  # new sends of other groups go on meanwhile
        outbox.send(connection, TOPIC, "g0-4", message_group="g0", now=clock.now)
    relay.publish_due()
    assert stored_by_group(broker)["g0"] == [*sent["g0"], "g0-4"]
    assert stored_by_group(broker)["g1"] == ["g1-0"]  # g1-1 not due again yet

    clock.advance(seconds=1)  # its retry: refused again (second attempt)
    relay.publish_due()
    assert stored_by_group(broker)["g1"] == ["g1-0"]
    clock.advance(seconds=2)  # third attempt goes through, and its successors after it
    relay.publish_due()
    assert stored_by_group(broker)["g1"] == sent["g1"]
    assert stub_row(engine, _id_of(engine, b"g1-1"))["send_count"] == 3


def test_a_void_stub_no_longer_holds_back_its_group(app: App, broker: Broker,
                                                    engine: Engine):
    send_interleaved(engine, ["g0"], 3, ungrouped=False)
    clock = Clock()
    relay, flaky = relay_over(app, engine, clock, rules=ResendRules(max_send_count=1))
    flaky.refuse[b"g0-0"] = 1
    relay.publish_due()  # g0-0 refused at its one allowed attempt: void, an operator's
    assert stub_row(engine, _id_of(engine, b"g0-0"))["status"] == StubStatus.VOID.value
    relay.publish_due()
    assert stored_by_group(broker)["g0"] == ["g0-1", "g0-2"]


def test_a_broker_outage_keeps_every_group_in_order(app: App, broker: Broker, engine: Engine):
    sent = send_interleaved(engine, ["g0", "g1"], 2)
    clock = Clock()
    relay, flaky = relay_over(app, engine, clock, outage_backoff_ms=100)
    flaky.down = True
    assert relay.publish_due() == 0
    more = send_interleaved(engine, ["g0", "g1"], 2)  # sent during the outage
    clock.advance(seconds=1)
    assert relay.publish_due() == 0  # still down: nothing counted, nothing void
    flaky.down = False
    clock.advance(seconds=1)
    relay.publish_due()
    stored = stored_by_group(broker)
    for group in ("g0", "g1"):
        assert stored[group] == [*sent[group], *more[group]]
    rows = stub_rows(engine)
    assert all(row["published_at"] is not None and row["send_count"] == 1 for row in rows)


def test_a_killed_relays_claim_holds_back_its_group_until_its_lease_ends(
        app: App, broker: Broker, engine: Engine):
    sent = send_interleaved(engine, ["g0", "g1"], 3, ungrouped=False)
    clock = Clock()
    # a relay claims the heads of both groups, publishes g0-0 (the broker stores it) and is
    # killed before it records anything: g0-0 stored, g1-0 not, both claims abandoned
    claimed = claim_stubs(engine, unpublished_due(clock.now, 5), owner="killed", now=clock.now,
                          lease=timedelta(seconds=30), limit=10)
    assert sorted(item.content for item in claimed) == [b"g0-0", b"g1-0"]  # heads only
    head = next(item for item in claimed if item.content == b"g0-0")
    app.producer.send(TOPIC, head.content, unique_key=head.message_id, message_group="g0")

    survivor, _ = relay_over(app, engine, clock)
    assert survivor.publish_due() == 0  # the killed relay's leases hold both groups
    assert stored_by_group(broker)["g1"] == []
    clock.advance(seconds=31)
    assert survivor.publish_due() == 6
    stored = stored_by_group(broker)
    assert stored["g0"] == ["g0-0", *sent["g0"]]  # g0-0 twice (at-least-once), then in order
    assert stored["g1"] == sent["g1"]
    assert all(row["send_count"] == 1 for row in stub_rows(engine))  # abandoned: not counted


def test_the_hand_off_publishes_a_transactions_group_in_order(app: App, broker: Broker,
                                                              engine: Engine):
    clock = Clock()
    relay, _ = relay_over(app, engine, clock)
    relay.attach()
    try:
        with engine.begin() as connection:  # one transaction, one group, several events
            for number in range(5):
                outbox.send(connection, TOPIC, f"g0-{number}", message_group="g0",
                            now=clock.now - timedelta(milliseconds=1, microseconds=-number))
        assert relay.run_once(relay.clock.now_ms()) == 5  # the handed-over ids, in rounds
    finally:
        relay.detach()
    assert stored_by_group(broker)["g0"] == [f"g0-{number}" for number in range(5)]


def _id_of(engine: Engine, body: bytes) -> str:
    [message_id] = [row["message_id"] for row in stub_rows(engine) if row["content"] == body]
    return message_id


class RecordingProducer:
    """``send_to_group`` that records each copy and refuses the bodies in ``refuse``."""

    def __init__(self, refuse: set[bytes]) -> None:
        self.refuse = refuse
        self.sent: list[tuple[str, bytes]] = []

    def send_to_group(self, group: str, topic: str, body: bytes, **options: Any) -> Any:
        if body in self.refuse:
            raise ConnectionRefusedError("broker down")
        self.sent.append((group, body))
        return type("Result", (), {"stored_topic": f"%RETRY%{group}", "stored_queue_id": 0,
                                   "queue_offset": len(self.sent)})()


def test_resends_go_in_send_order_per_group_and_a_failure_holds_back_its_groups_later_ones(
        engine: Engine):
    from postbox.outbox.alerts import Alerter
    from postbox.outbox.claims import ClaimedStub
    from postbox.outbox.resend import Resender

    start = utc_now()

    def claimed(body: str, group: str | None, seconds: int) -> ClaimedStub:
        return ClaimedStub(f"id-{body}", TOPIC, None, None, body.encode(), {}, None, 2, 0, 1,
                           "token", None, group, start + timedelta(seconds=seconds))

    producer = RecordingProducer(refuse={b"g-1"})
    app = type("FakeApp", (), {"producer": producer})()
    relay = Relay(lambda: producer, engine)  # type: ignore[arg-type, return-value]
    resender = Resender(app, engine, relay, rules=ResendRules(), alerter=Alerter(),  # type: ignore[arg-type]
                        owner="test")
    stubs = [claimed("g-3", "g", 3), claimed("free", None, 0), claimed("g-1", "g", 1),
             claimed("h-2", "h", 2), claimed("g-2", "g", 2), claimed("h-1", "h", 1)]
    lost = {item.message_id: ["billing"] for item in stubs}
    lost["id-g-2"] = ["billing", "shipping"]
    assert resender._resend_to_groups(stubs, lost) == 4
    assert producer.sent == [("billing", b"free"), ("shipping", b"g-2"), ("billing", b"h-1"),
                             ("billing", b"h-2")]  # g-1 failed: g-2, g-3 wait for billing
