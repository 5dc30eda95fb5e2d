"""The relay: committed stubs reach the broker once, with where they went recorded."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from sqlalchemy import Engine, func, select, update

from postbox import outbox
from postbox.framework import App, Producer, SendFailure
from postbox.outbox import (
    Outbox,
    Relay,
    RelayOptions,
    ResendRules,
    StubStatus,
    claim_stubs,
    create_database_engine,
    message_stub,
)
from postbox.outbox.claims import unpublished_due
from postbox.outbox.clock import utc_now
from postbox.outbox.database import TRANSACTION_ATTEMPTS, run_transaction
from postbox.outbox.relay import PublishFailure
from postbox.storage_engine import Broker
from postbox.storage_engine.formats.topic_names import DELAY_TOPIC
from tests.outbox.conftest import (
    add_order,
    embedded,
    records_of,
    stored_records,
    stub_count,
    stub_row,
    stub_rows,
)
from tests.support.polling import wait_until

FAST_POLL = RelayOptions(poll_interval_ms=50)


class Clock:
    """A database time the test moves (naive UTC, as the relay reads it)."""

    def __init__(self) -> None:
        self.now = utc_now()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def send_stubs(engine: Engine, count: int, topic: str = "orders", first_order: int = 1
               ) -> list[str]:
    """Commit ``count`` orders, each with its stub, in one transaction; return the ids."""
    with engine.begin() as connection:
        ids = []
        for number in range(first_order, first_order + count):
            add_order(connection, number)
            ids.append(outbox.send(connection, topic, f"order {number}",
                                   keys=f"order-{number}"))
    return ids


def unpublished(engine: Engine) -> int:
    """How many stubs are not recorded as stored in the broker yet."""
    with engine.connect() as connection:
        return connection.execute(select(func.count()).select_from(message_stub).where(
            message_stub.c.published_at.is_(None))).scalar_one()


def assert_published_as_stored(engine: Engine, broker: Broker, message_id: str) -> None:
    """The stub records exactly where the one stored record of its message is."""
    row = stub_row(engine, message_id)
    assert row["status"] == "unconfirmed"
    assert row["send_count"] == 1
    assert row["published_at"] is not None
    assert row["lease_owner"] is None and row["lease_until"] is None
    assert row["last_error"] is None
    assert row["next_resend_at"] > row["published_at"]
    [record] = records_of(broker, row["topic"], message_id)
    assert record.unique_key == message_id
    assert record.topic == row["topic"]
    assert bytes(record.body) == bytes(row["content"])
    assert record.tags == row["tags"]
    assert " ".join(record.keys) == (row["keys"] or "")
    assert (record.queue_id, record.queue_offset, record.log_position) == (
        row["queue_id"], row["queue_offset"], row["log_position"])
    if embedded(broker):  # the offset message id names the record's position in this store
        assert broker.store.view_message_by_id(row["offset_msg_id"]).log_position == \
            row["log_position"]


# ---- the after-commit hook and polling ------------------------------------------------------


def test_committed_send_is_published_promptly_by_the_after_commit_hook(
        app: App, broker: Broker, make_engine: Callable[[], Engine]):
    box = Outbox(app, options=RelayOptions(poll_interval_ms=60_000))
    # a stub from another process, found by the relay thread's first poll at start
    [polled_id] = send_stubs(make_engine(), 1, first_order=100)
    app.start()
    wait_until(lambda: box.relay.stats.published_by_poll == 1, what="the first poll")

    properties = {"source": "shop"}
    with box.session.begin() as session:
        add_order(session, 1)
        message_id = outbox.send(session, "orders", {"order": 1}, tags="created",
                                 keys=["order-1", "customer-7"], properties=properties)
    # the next poll is a minute away: only the hook can publish it within the deadline. The
    # counter moves after the stub's row is written, so waiting on it sees both.
    wait_until(lambda: box.relay.stats.published_by_hook == 1, timeout_s=5,
               what="the hook's publish")

    assert stub_row(box.engine, message_id)["published_at"] is not None
    assert box.relay.stats.published_by_poll == 1
    assert_published_as_stored(box.engine, broker, message_id)
    assert_published_as_stored(box.engine, broker, polled_id)
    [record] = records_of(broker, "orders", message_id)
    assert bytes(record.body) == b'{"order":1}'
    assert record.properties["source"] == "shop"
    assert [view.unique_key for view in stored_records(broker, "orders")].count(message_id) == 1


def test_sends_before_start_are_remembered_and_published_at_start(app: App, broker: Broker):
    box = Outbox(app, options=RelayOptions(poll_interval_ms=60_000))
    with box.session.begin() as session:
        add_order(session, 1)
        message_id = outbox.send(session, "orders", "before start")
    assert not box.relay.is_running  # an app not over rocketmq:// starts nothing at commit
    app.start()
    wait_until(lambda: stub_row(box.engine, message_id)["published_at"], what="the publish")
    assert_published_as_stored(box.engine, broker, message_id)


def test_polling_publishes_stubs_the_hook_never_saw(app: App, broker: Broker,
                                                    make_engine: Callable[[], Engine]):
    other_process = make_engine()  # no relay attached: nobody hears these commits
    ids = send_stubs(other_process, 5)
    with other_process.begin() as connection:
        chosen = outbox.send(connection, "orders", b"chosen", message_id="order-9:created")
    relay = Relay(app.producer, make_engine(), options=RelayOptions(batch_size=4))

    assert relay.publish_due() == 4  # one batch, oldest first
    assert relay.publish_due() == 2
    assert relay.publish_due() == 0

    assert relay.stats.published == relay.stats.published_by_poll == 6
    for message_id in [*ids, chosen]:
        assert_published_as_stored(other_process, broker, message_id)
    assert Counter(view.unique_key for view in stored_records(broker, "orders")) == \
        Counter({message_id: 1 for message_id in [*ids, chosen]})


def test_running_relay_polls_within_its_interval(app: App, make_engine: Callable[[], Engine]):
    clock = Clock()  # the relay's passes driven on a fake clock, as its thread would run them
    clock.advance(minutes=1)  # ahead of the sends below (a stub is due from its send time)
    relay = Relay(app.producer, make_engine(), options=FAST_POLL, now=clock)
    assert relay.run_once(relay.clock.now_ms()) == 0  # the first pass polls: nothing yet
    ids = send_stubs(make_engine(), 3)
    clock.advance(milliseconds=49)
    assert relay.run_once(relay.clock.now_ms()) == 0  # the next poll is not due
    assert relay.idle_wait_ms(relay.clock.now_ms()) == 1  # the thread sleeps until it is
    clock.advance(milliseconds=1)
    assert relay.run_once(relay.clock.now_ms()) == 3
    assert all(stub_row(relay.engine, message_id)["published_at"] for message_id in ids)
    assert relay.stats.published_by_poll == 3


def test_a_failed_pass_backs_off_doubling_and_the_loop_goes_on(app: App, tmp_path):
    # a real database fault: a database with no outbox tables (as if it were not migrated)
    clock = Clock()
    relay = Relay(app.producer, create_database_engine(f"sqlite:///{tmp_path / 'bare.db'}"),
                  now=clock)
    start_ms = relay.clock.now_ms()
    assert relay.run_once(start_ms) == 0
    assert relay.stats.errors == 1
    assert relay.idle_wait_ms(start_ms) == 200
    assert relay.run_once(start_ms + 199) == 0  # still backing off: no attempt
    assert relay.stats.errors == 1
    assert relay.run_once(start_ms + 200) == 0  # tried again, failed again: twice the wait
    assert relay.stats.errors == 2
    assert relay.idle_wait_ms(start_ms + 200) == 400
    relay.engine.dispose()


def test_several_relays_never_publish_a_stub_twice(app: App, broker: Broker,
                                                   make_engine: Callable[[], Engine]):
    total = 300
    writer = make_engine()
    ids = [message_id for first in range(1, total + 1, 100)
           for message_id in send_stubs(writer, 100, first_order=first)]
    producer = app.producer
    relays = [Relay(producer, make_engine(), options=RelayOptions(batch_size=10),
                    owner=f"relay-{number}") for number in range(3)]
    start = threading.Barrier(len(relays))
    errors: list[BaseException] = []

    def drain(relay: Relay) -> None:
        """Publish until no stub is left unpublished (a pass may find every due stub locked
        or leased by the others; that relay then tries again)."""
        try:
            start.wait()
            deadline = time.monotonic() + 30
            while relay.publish_due() or unpublished(relay.engine):
                assert time.monotonic() < deadline, "the relays did not finish"
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=drain, args=(relay,)) for relay in relays]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []

    counted = Counter(view.unique_key for view in stored_records(broker, "orders"))
    assert counted == Counter({message_id: 1 for message_id in ids})
    rows = stub_rows(writer)
    assert len(rows) == total
    assert all(row["send_count"] == 1 and row["queue_offset"] is not None and
               row["lease_owner"] is None for row in rows)
    assert sum(relay.stats.published for relay in relays) == total
    assert all(relay.stats.failed == 0 for relay in relays)


# ---- failures, leases, delays ---------------------------------------------------------------


def closed_broker_producer(open_broker) -> Producer:
    """A real producer over a broker that has been closed: every send raises
    ``StoreClosedError`` (the broker is unavailable, not the message at fault)."""
    broker = open_broker("closed-store")
    producer = Producer(broker)
    broker.close()
    return producer


OVERSIZE_BODY = "x" * 2_048
"""Over the tight store's 1 KiB message limit (far under the framework's 4 MiB): a publish
refused for the message's own reason."""


def tight_producer(open_broker) -> Producer:
    """A real producer over a store that refuses messages over 1 KiB."""
    return Producer(open_broker("tight-store", max_message_size_bytes=1_024))


def send_oversize_stub(engine: Engine) -> str:
    with engine.begin() as connection:
        return outbox.send(connection, "orders", OVERSIZE_BODY)


@pytest.mark.embedded_only("sets the store's maximum message size")
def test_a_refused_publish_counts_the_attempt_and_retries_later(engine: Engine, open_broker):
    message_id = send_oversize_stub(engine)
    clock = Clock()
    relay = Relay(tight_producer(open_broker), engine, now=clock,
                  options=RelayOptions(retry_delay_ms=1_000,
                                       rules=ResendRules(max_send_count=3)))

    assert relay.publish_due() == 0
    row = stub_row(engine, message_id)
    assert row["send_count"] == 1
    assert row["status"] == "unconfirmed"
    assert row["last_error"].startswith("MessageTooLargeError: ")
    assert row["lease_owner"] is None and row["lease_until"] is None
    assert row["queue_offset"] is None and row["published_at"] is None
    assert row["next_resend_at"] == clock.now + timedelta(seconds=1)
    assert (relay.stats.failed, relay.stats.unavailable) == (1, 0)

    clock.advance(milliseconds=500)  # not due yet: nobody claims it
    assert relay.publish_due() == 0
    assert stub_row(engine, message_id)["send_count"] == 1

    clock.advance(milliseconds=600)  # due: the second attempt doubles the wait
    assert relay.publish_due() == 0
    row = stub_row(engine, message_id)
    assert row["send_count"] == 2 and row["status"] == "unconfirmed"
    assert row["next_resend_at"] == clock.now + timedelta(seconds=2)


@pytest.mark.embedded_only("sets the store's maximum message size")
def test_stub_is_void_after_max_send_count_refused_attempts(engine: Engine, open_broker):
    message_id = send_oversize_stub(engine)
    relay = Relay(tight_producer(open_broker), engine,
                  options=RelayOptions(rules=ResendRules(max_send_count=2),
                                       retry_delay_ms=0))

    relay.publish_due()
    assert stub_row(engine, message_id)["status"] == "unconfirmed"
    relay.publish_due()
    row = stub_row(engine, message_id)
    assert row["status"] == StubStatus.VOID.value
    assert row["send_count"] == 2
    assert "MessageTooLargeError" in row["last_error"]
    assert row["lease_owner"] is None
    assert relay.stats.failed == 2 and relay.stats.voided == 1

    relay.publish_due()  # a void stub is left for an operator
    assert stub_row(engine, message_id)["send_count"] == 2


def test_an_unavailable_broker_backs_off_and_never_counts_the_attempts(
        engine: Engine, open_broker):
    [message_id] = send_stubs(engine, 1)
    clock = Clock()
    clock.now = clock.now.replace(microsecond=0) + timedelta(seconds=1)  # whole ms, as counted
    relay = Relay(closed_broker_producer(open_broker), engine, now=clock,
                  options=RelayOptions(outage_backoff_ms=500, outage_backoff_max_ms=4_000,
                                       outage_jitter_ratio=0,
                                       rules=ResendRules(max_send_count=2)))
    waits_ms = []
    for _ in range(8):  # four times max_send_count
        assert relay.publish_due() == 0
        row = stub_row(engine, message_id)
        assert (row["status"], row["send_count"]) == ("unconfirmed", 0)
        assert row["last_error"].startswith("StoreClosedError: ")
        assert row["lease_owner"] is None and row["published_at"] is None
        wait = row["next_resend_at"] - clock.now
        waits_ms.append(wait // timedelta(milliseconds=1))
        clock.advance(milliseconds=waits_ms[-1] - 1)  # backing off: no claim, no attempt
        assert relay.publish_due() == 0
        assert relay.run_once(relay.clock.now_ms()) == 0
        assert relay.idle_wait_ms(relay.clock.now_ms()) == 1
        assert stub_row(engine, message_id)["updated_at"] == row["updated_at"]
        clock.advance(milliseconds=1)
    assert waits_ms == [500, 1_000, 2_000, 4_000, 4_000, 4_000, 4_000, 4_000]
    assert (relay.stats.failed, relay.stats.unavailable, relay.stats.voided) == (8, 8, 0)
    assert relay.outage.failures == 8


def test_outage_waits_are_jittered_within_their_share():
    from postbox.outbox.outage import OutageBackoff

    draws = iter([0.0, 0.999, 0.5])
    backoff = OutageBackoff(1_000, 8_000, 0.5, draw=lambda: next(draws))
    assert backoff.failed(0, published=False) == 1_000  # no shortening drawn
    assert backoff.failed(0, published=False) == 1_001  # 2 s shortened by almost half
    assert backoff.until_ms == 1_001 and backoff.waiting(1_000) and not backoff.waiting(1_001)
    assert backoff.failed(0, published=True) == 750  # reachable again: the first wait, jittered
    assert (backoff.failures, backoff.until_ms) == (0, 0)


def test_a_stub_whose_claims_died_with_their_relays_max_send_count_times_is_not_stranded(
        app: App, broker: Broker, engine: Engine):
    [message_id] = send_stubs(engine, 1)
    clock = Clock()
    for attempt in range(5):  # five relays killed between their claim and its outcome
        [claimed] = claim_stubs(engine, unpublished_due(clock.now, 5), owner=f"dead-{attempt}",
                                now=clock.now, lease=timedelta(seconds=30), limit=10)
        clock.advance(seconds=31)  # its lease runs out
    # found by the chaos soak (bench/soak): relays killed between their claim and its outcome
    # during a broker outage used to use up max_send_count, and the stub was never claimed again
    assert claimed.send_count == 1  # each abandoned claim's attempt was replaced, not added to
    survivor = Relay(app.producer, engine, now=clock)
    assert survivor.publish_due() == 1
    row = stub_row(engine, message_id)
    assert row["published_at"] is not None and row["status"] == StubStatus.UNCONFIRMED.value
    assert row["send_count"] == 1 and row["lease_owner"] is None


def test_a_stub_left_at_max_send_count_by_an_abandoned_claim_is_claimed_again(
        app: App, broker: Broker, engine: Engine):
    [message_id] = send_stubs(engine, 1)
    clock = Clock()
    with engine.begin() as connection:  # as a relay of the earlier counting left it
        connection.execute(update(message_stub).where(message_stub.c.message_id == message_id)
                           .values(send_count=5, lease_owner="dead:0",
                                   lease_until=clock.now - timedelta(seconds=1)))
    assert Relay(app.producer, engine, now=clock).publish_due() == 1
    row = stub_row(engine, message_id)
    assert row["published_at"] is not None and row["send_count"] == 5


def test_a_dead_claimers_lease_blocks_others_until_it_expires(
        app: App, broker: Broker, engine: Engine, make_engine: Callable[[], Engine]):
    [message_id] = send_stubs(engine, 1)
    clock = Clock()
    [claimed] = claim_stubs(engine, unpublished_due(clock.now, 5), owner="dead", now=clock.now,
                            lease=timedelta(seconds=30), limit=10)
    # the claim counts the attempt before anything is published
    row = stub_row(engine, message_id)
    assert claimed.message_id == message_id and claimed.send_count == 1
    assert row["send_count"] == 1 and row["lease_owner"] == claimed.token
    assert row["lease_until"] == clock.now + timedelta(seconds=30)

    survivor = Relay(app.producer, make_engine(), now=clock)
    clock.advance(seconds=29)
    assert survivor.publish_due() == 0
    assert survivor.publish_ids([message_id]) == (0, [])  # present, but leased
    assert stub_row(engine, message_id)["lease_owner"] == claimed.token
    assert stored_records(broker, "orders") == []

    clock.advance(seconds=2)  # the lease ran out
    assert survivor.publish_due() == 1
    published = stub_row(engine, message_id)
    assert published["send_count"] == 1  # the abandoned claim's attempt was replaced
    assert published["lease_owner"] is None

    # the dead claimer wakes up and records its attempt: fenced by its old token, nothing moves
    dead = Relay(app.producer, engine, owner="dead", now=clock)
    dead._record([{"b_id": message_id, "b_token": claimed.token, "b_queue_id": 7,
                   "b_queue_offset": 999, "b_position": 123_456,
                   "b_offset_msg_id": "DEAD", "b_next": clock()}], [])
    dead._record([], [(claimed, PublishFailure("TimeoutError: too late",
                                               SendFailure.TRANSIENT))])
    dead._record([], [(claimed, PublishFailure("MessageTooLargeError: too big",
                                               SendFailure.MESSAGE))])
    with engine.begin() as connection:
        late = connection.execute(update(message_stub).where(
            message_stub.c.message_id == message_id,
            message_stub.c.lease_owner == claimed.token).values(status="void"))
        assert late.rowcount == 0
    assert dict(stub_row(engine, message_id)) == dict(published)
    assert [view.unique_key for view in stored_records(broker, "orders")] == [message_id]
    assert_published_as_stored_after_retry(engine, broker, message_id)


def assert_published_as_stored_after_retry(engine: Engine, broker: Broker,
                                           message_id: str) -> None:
    row = stub_row(engine, message_id)
    [record] = records_of(broker, "orders", message_id)
    assert (record.queue_id, record.queue_offset, record.log_position) == (
        row["queue_id"], row["queue_offset"], row["log_position"])
    assert row["last_error"] is None and row["status"] == "unconfirmed"


def test_delayed_message_goes_through_the_delay_topic(app: App, broker: Broker, engine: Engine):
    with engine.begin() as connection:
        add_order(connection, 1)
        message_id = outbox.send(connection, "orders", b"later", delay_level=2,
                                 tags="reminder")
    assert stub_row(engine, message_id)["delay_level"] == 2
    relay = Relay(app.producer, engine)
    assert relay.publish_due() == 1

    row = stub_row(engine, message_id)
    # published (log position, offsetMsgId, real queue) but its offset in the real queue is
    # unknown until the delay service delivers it: never a delay-topic offset under a real queue
    assert row["send_count"] == 1 and row["published_at"] is not None
    assert row["queue_offset"] is None
    if embedded(broker):  # the scheduled record, read from the store at the stub's position
        scheduled = broker.store.read_message(row["log_position"])
        assert scheduled.topic == DELAY_TOPIC
        assert scheduled.queue_id == 2 - 1  # the delay topic's queue of level 2
        assert scheduled.unique_key == message_id
        assert scheduled.properties["DELAY"] == "2"
        assert scheduled.properties["REAL_TOPIC"] == "orders"
        assert int(scheduled.properties["REAL_QID"]) == row["queue_id"]
        assert broker.store.view_message_by_id(row["offset_msg_id"]).log_position == \
            row["log_position"]

    # the delay service delivers it to the real topic (level 2: 40 ms here, 2 s in the lab)
    [delivered] = wait_until(lambda: broker.find_by_unique_key("orders", message_id),
                             what="the delayed delivery")
    assert bytes(delivered.body) == b"later" and delivered.tags == "reminder"
    assert delivered.queue_id == row["queue_id"]
    assert stub_count(engine) == 1


@pytest.mark.parametrize("level", [0, None])
def test_no_delay_level_publishes_straight_to_the_topic(app: App, broker: Broker,
                                                       engine: Engine, level: int | None):
    with engine.begin() as connection:
        message_id = outbox.send(connection, "orders", b"now", delay_level=level)
    assert stub_row(engine, message_id)["delay_level"] is None
    assert Relay(app.producer, engine).publish_due() == 1
    [record] = records_of(broker, "orders", message_id)
    assert record.log_position == stub_row(engine, message_id)["log_position"]


# ---- deadlocks ----------------------------------------------------------------------------


@pytest.mark.only_on_databases("postgresql", "mysql")  # SQLite serialises writers: no deadlock
def test_a_transaction_rolled_back_to_break_a_deadlock_is_run_again(
        engine: Engine, make_engine: Callable[[], Engine]):
    """Claims and records run through ``run_transaction``: on MariaDB a claim's ``SKIP LOCKED``
    scan can deadlock with another relay's record. Two transactions that lock two stubs in
    opposite orders deadlock for real; the victim is run again and both take effect."""
    assert engine.dialect.name != "sqlite"
    first, second = send_stubs(engine, 2)
    both_hold_one = threading.Barrier(2, timeout=10)
    attempts: Counter[str] = Counter()
    errors: list[BaseException] = []

    def bump(connection, message_id: str) -> None:
        connection.execute(update(message_stub).where(message_stub.c.message_id == message_id)
                           .values(send_count=message_stub.c.send_count + 1))

    def transfer(name: str, one: str, other: str) -> None:
        def work(connection) -> None:
            attempts[name] += 1
            bump(connection, one)
            if attempts[name] == 1:
                both_hold_one.wait()
            bump(connection, other)

        try:
            run_transaction(make_engine(), work)
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=transfer, args=("a", first, second)),
               threading.Thread(target=transfer, args=("b", second, first))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []  # without the rerun the victim would have raised here
    # at least one victim, run again; under load the rerun can meet the other transaction's
    # waiting lock once more and a second round picks a victim again ([2, 2])
    assert sum(attempts.values()) >= 3
    assert max(attempts.values()) <= TRANSACTION_ATTEMPTS
    assert [row["send_count"] for row in stub_rows(engine)] == [2, 2]  # each took effect once
