"""The remoting client's consumer calls against a Postbox broker served over remoting.

Each call is compared with the same call on the embedded ``Broker`` behind the server: equal
pull results (status, offsets, every field of every view), equal start offsets, send-back into
the same retry and dead-letter records; and the remote-only parts — long polls answered on
arrival, waits that wake and cancel, read-ahead, notices of membership changes, exclusive
queue locks — checked on real sockets.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from postbox.network.client.errors import RemotingResponseError
from postbox.network.client.membership import HeartbeatService
from postbox.network.client.remote_broker import RemotingBroker
from postbox.network.protocol.codes import RequestCode
from postbox.storage_engine import (
    Broker,
    ConsumeFrom,
    FakeClock,
    GetStatus,
    Message,
    MessageView,
    SendBackOutcome,
)
from postbox.storage_engine.formats import encode_record_parts, unpack_record
from tests.support.brokers import BrokerFactory
from tests.support.consuming_clients import ConsumingClients
from tests.support.polling import wait_until
from tests.support.postbox_remoting import PostboxRemoting, serve_remoting

QUEUES = 4


@pytest.fixture
def broker_factory(tmp_path) -> Iterator[Callable[..., Broker]]:
    """Brokers on the default small store (``BrokerFactory``), closed and verified at the end."""
    with BrokerFactory(tmp_path) as brokers:
        yield brokers.open


@pytest.fixture
def broker_topics() -> dict[str, int]:
    return {"orders": QUEUES}


@pytest.fixture
def served(broker) -> Iterator[PostboxRemoting]:
    with serve_remoting(broker) as serving:
        yield serving


@pytest.fixture
def clients(served) -> Iterator[ConsumingClients]:
    made = ConsumingClients(served.namesrv)
    yield made
    made.close()


def broker_parked(served: PostboxRemoting) -> int:
    """Pulls the broker holds now."""
    assert served.node is not None
    return served.node.broker_server.pulls.hold.parked_count


def send(broker: Broker, count: int, *, queue_id: int = 0, prefix: str = "m") -> None:
    for index in range(count):
        broker.send(Message("orders", f"{prefix}{index}".encode(),
                            tags=("paid", "new", "void")[index % 3], keys=[f"k{index}"]),
                    queue_id=queue_id)
    broker.store.wait_dispatched()


def same(remote, local) -> None:
    assert (remote.status, remote.next_offset, remote.min_offset, remote.max_offset) == (
        local.status, local.next_offset, local.min_offset, local.max_offset)
    assert [view.as_dict() for view in remote.messages] == [
        view.as_dict() for view in local.messages]


@pytest.mark.parametrize(("offset", "max_count", "tags"), [
    (0, 32, None), (3, 5, None), (0, 32, "paid || void"), (0, 32, "none"), (10, 32, None),
    (11, 32, None), (40, 32, None),
])
def test_pulls_equal_the_embedded_broker(broker, clients, offset, max_count, tags):
    send(broker, 10)
    consuming = clients.new(read_ahead=False)
    remote = consuming.pull("billing", "orders", 0, offset, max_count, tags=tags)
    same(remote, broker.pull("billing", "orders", 0, offset, max_count, tags=tags))
    empty = consuming.pull("billing", "orders", 1, 0, 32)
    same(empty, broker.pull("billing", "orders", 1, 0, 32))


def test_a_full_batch_reads_ahead_and_the_next_pull_takes_it(broker, clients):
    send(broker, 20)
    consuming = clients.new()
    first = consuming.pull("billing", "orders", 0, 0, 8)
    assert len(first.messages) == 8 and consuming.puller.flight_count() == 1
    second = consuming.pull("billing", "orders", 0, 8, 8)
    same(second, broker.pull("billing", "orders", 0, 8, 8))
    third = consuming.pull("billing", "orders", 0, 16, 8)  # not full: caught up
    same(third, broker.pull("billing", "orders", 0, 16, 8))
    assert consuming.puller.flight_count() == 1  # the long poll at 20, sent at once


def test_a_pull_a_held_long_poll_answers_sends_nothing(broker, served, clients):
    consuming = clients.new()
    send(broker, 3)
    found = consuming.pull("billing", "orders", 0, 0, 8)  # caught up: the long poll goes out
    assert len(found.messages) == 3
    wait_until(lambda: broker_parked(served) == 1, what="the long poll parked at the broker")
    pulls = served.requests_served(RequestCode.PULL_MESSAGE)
    for _ in range(3):
        same(consuming.pull("billing", "orders", 0, 3, 8), broker.pull("billing", "orders", 0,
                                                                        3, 8))
    assert served.requests_served(RequestCode.PULL_MESSAGE) == pulls  # answered here
    assert consuming.wait_for_arrival({("orders", 0): 3}, 300) is False  # the same poll waits
    assert served.requests_served(RequestCode.PULL_MESSAGE) == pulls
    send(broker, 1, prefix="late")
    assert consuming.wait_for_arrival({("orders", 0): 3}, 10_000) is True
    late = consuming.pull("billing", "orders", 0, 3, 8)  # the poll's own answer
    assert [view.body for view in late.messages] == [b"late0"]
    # caught up again: the next long poll (at 4) goes out at once, and it is the only request
    wait_until(lambda: broker_parked(served) == 1, what="the next long poll parked")
    assert served.requests_served(RequestCode.PULL_MESSAGE) == pulls + 1
    assert consuming.puller.flight_count() == 1


def test_a_parked_queue_wakes_on_arrival_and_its_answer_is_kept(broker, clients):
    consuming = clients.new()
    positions = {("orders", queue_id): 0 for queue_id in range(QUEUES)}
    for queue_id in range(QUEUES):
        same(consuming.pull("billing", "orders", queue_id, 0, 32),
             broker.pull("billing", "orders", queue_id, 0, 32))  # nothing there yet
    outcome: list[tuple[bool, float]] = []

    def wait() -> None:
        started = time.monotonic()
        outcome.append((consuming.wait_for_arrival(positions, 20_000),
                        time.monotonic() - started))

    waiter = threading.Thread(target=wait)
    waiter.start()
    deadline = time.monotonic() + 10
    while consuming.puller.flight_count() < QUEUES and time.monotonic() < deadline:
        time.sleep(0.01)  # until the long polls are parked at the broker
    send(broker, 1, queue_id=2, prefix="late")
    waiter.join(25)
    assert outcome[0][0] is True and outcome[0][1] < 10
    found = consuming.pull("billing", "orders", 2, 0, 32)  # the long poll's own answer
    same(found, broker.pull("billing", "orders", 2, 0, 32))
    assert [view.body for view in found.messages] == [b"late0"]
    assert consuming.pull("billing", "orders", 2, 1, 32).status is GetStatus.OFFSET_OVERFLOW_ONE
    assert consuming.puller.flight_count() == QUEUES  # the others stay parked; 2's is new


def test_wake_cancel_and_timeout_end_a_wait(broker, clients):
    consuming = clients.new()
    consuming.pull("billing", "orders", 0, 0, 32)
    positions = {("orders", 0): 0}
    results: list[tuple[bool, float]] = []

    def wait(cancel=None) -> None:
        started = time.monotonic()
        results.append((consuming.wait_for_arrival(positions, 20_000, cancel),
                        time.monotonic() - started))

    for stop in (consuming.wake_waiters, None):
        flag = threading.Event()
        waiter = threading.Thread(target=wait, args=(() if stop else (flag.is_set,)))
        waiter.start()
        time.sleep(0.3)
        (stop or flag.set)()
        waiter.join(10)
    started = time.monotonic()
    assert consuming.wait_for_arrival(positions, 200) is False
    assert time.monotonic() - started < 2
    assert [woken for woken, _ in results] == [False, False]
    assert all(seconds < 2 for _, seconds in results), results


def test_an_unexplained_position_is_watched_by_its_max_offset(broker, clients):
    consuming = clients.new()
    waiter_result: list[bool] = []
    waiter = threading.Thread(target=lambda: waiter_result.append(
        consuming.wait_for_arrival({("orders", 3): 0}, 20_000)))
    waiter.start()
    time.sleep(0.3)
    send(broker, 1, queue_id=3)
    waiter.join(10)
    assert waiter_result == [True]


def test_offsets_and_start_offsets_equal_the_embedded_broker(broker, clients):
    send(broker, 6, queue_id=0)
    consuming = clients.new()
    assert consuming.query_offset("billing", "orders", 0) is None
    consuming.commit_offset("billing", "orders", 0, 4)
    assert consuming.query_offset("billing", "orders", 0) == 4 == broker.query_offset(
        "billing", "orders", 0)
    for group in ("billing", "fresh"):
        for queue_id in (0, 1):
            for rule, stamp in ((ConsumeFrom.LAST, None), (ConsumeFrom.FIRST, None),
                                (ConsumeFrom.TIMESTAMP, 0),
                                (ConsumeFrom.TIMESTAMP, int(time.time() * 1000) + 60_000)):
                assert consuming.start_offset(group, "orders", queue_id, rule, stamp) == (
                    broker.start_offset(group, "orders", queue_id, rule, stamp)), (
                    group, queue_id, rule, stamp)


def test_send_back_retries_then_dead_letters_as_embedded(broker, clients):
    send(broker, 1, queue_id=0)
    consuming = clients.new()
    consuming.register_consumer("billing", "c1", ["orders", "%RETRY%billing"])
    (view,) = consuming.pull("billing", "orders", 0, 0, 32).messages
    retried = consuming.send_back("billing", view, delay_level=1, max_reconsume_times=1)
    assert (retried.outcome, retried.reconsume_count) == (SendBackOutcome.RETRY, 1)
    retry_queue = next(queue_id for queue_id in broker.queue_ids("%RETRY%billing"))
    copy = None
    deadline = time.monotonic() + 20
    while copy is None and time.monotonic() < deadline:  # level 1 is 1 s away
        found = consuming.pull("billing", "%RETRY%billing", retry_queue, 0, 32,
                               suspend_timeout_ms=2_000).messages
        copy = found[0] if found else None
    assert copy is not None, "the retry never reached %RETRY%billing"
    assert copy.properties["RETRY_TOPIC"] == "orders" and copy.reconsume_count == 1
    assert copy.unique_key == view.unique_key
    dead = consuming.send_back("billing", copy, delay_level=0, max_reconsume_times=1,
                               reason="cannot parse")
    assert dead.outcome is SendBackOutcome.DEAD_LETTER
    broker.store.wait_dispatched()
    (letter,) = broker.dead_letters("billing")
    assert letter.unique_key == view.unique_key and letter.properties["RETRY_TOPIC"] == "orders"
    assert letter.properties.get("DLQ_REASON") == "cannot parse"
    at_once = consuming.send_back("billing", view, delay_level=-1)
    assert at_once.outcome is SendBackOutcome.DEAD_LETTER
    broker.store.wait_dispatched()
    assert len(broker.dead_letters("billing")) == 2


def test_members_see_each_other_and_hear_of_changes(broker, clients):
    first, second = clients.new(), clients.new()
    heard: list[str] = []
    changed = threading.Event()
    first.add_membership_listener(lambda group: (heard.append(group), changed.set()))
    assert first.register_consumer("billing", "c1", ["orders"]) is True
    assert "billing" in heard  # told before register_consumer returned (and by a notice)
    assert first.register_consumer("billing", "c1", ["orders"]) is False
    changed.clear()
    second.register_consumer("billing", "c2", ["orders"])
    assert changed.wait(10), "no NOTIFY_CONSUMER_IDS_CHANGED after c2 joined"
    assert first.consumer_ids("billing") == ["c1", "c2"] == broker.consumer_ids("billing")
    changed.clear()
    second.unregister_consumer("billing", "c2")
    assert changed.wait(10), "no notice after c2 left"
    assert first.consumer_ids("billing") == ["c1"]


def test_a_member_keeps_the_last_members_when_the_broker_briefly_lists_none(broker, clients):
    member, outsider = clients.new(), clients.new()
    member.register_consumer("billing", "c1", ["orders"])
    assert member.consumer_ids("billing") == ["c1"]
    broker.unregister_consumer("billing", "c1")  # the broker answers "no consumer" for now
    assert member.consumer_ids("billing") == ["c1"]  # a registered member skips that round
    assert outsider.consumer_ids("billing") == []  # one that never joined hears "none"
    member.unregister_consumer("billing", "c1")
    assert member.consumer_ids("billing") == []


def test_queue_locks_are_exclusive(broker, clients):
    first, second = clients.new(), clients.new()
    queues = [("orders", queue_id) for queue_id in range(QUEUES)]
    assert first.lock_queues("billing", "c1", queues) == set(queues)
    assert second.lock_queues("billing", "c2", queues) == set()
    first.unlock_queues("billing", "c1", queues[:2])
    assert second.lock_queues("billing", "c2", queues) == set(queues[:2])
    assert first.lock_queues("billing", "c1", queues) == set(queues[2:])


def test_the_heartbeat_service_keeps_a_registration_alive(broker, clients):
    consuming = clients.new()
    consuming.register_consumer("billing", "c1", ["orders"])
    clock = FakeClock(1_000_000)
    service = HeartbeatService(consuming.membership, clock, interval_ms=20_000)
    broker.unregister_consumer("billing", "c1")  # the broker forgot it (as after an expiry)
    service.run_once(clock.now_ms())  # not due yet: nothing sent
    assert broker.consumer_ids("billing") == []
    clock.advance(service.interval_ms)
    service.run_once(clock.now_ms())
    assert broker.consumer_ids("billing") == ["c1"]
    consuming.unregister_consumer("billing", "c1")
    assert broker.consumer_ids("billing") == []
    clock.advance(service.interval_ms)
    service.run_once(clock.now_ms())  # unregistered: no longer repeated
    assert broker.consumer_ids("billing") == []


def test_each_member_heartbeats_over_its_own_connection(broker, clients):
    consuming = clients.new()
    consuming.register_consumer("billing", "c1", ["orders"])
    consuming.register_consumer("billing", "c2", ["orders"])
    assert consuming.consumer_ids("billing") == ["c1", "c2"]
    sockets = {member: consuming.membership._connections_of(member).addresses()
               for member in ("c1", "c2")}
    assert sockets["c1"] and sockets["c1"] == sockets["c2"]  # same broker, separate sets
    assert consuming.membership._connections_of("c1") is not (
        consuming.membership._connections_of("c2"))
    consuming.unregister_consumer("billing", "c2")
    assert consuming.consumer_ids("billing") == ["c1"]


def test_a_refused_send_back_is_sent_to_the_retry_topic_by_the_client(broker, clients):
    """As RocketMQ's client: when the broker refuses CONSUMER_SEND_MSG_BACK (here: no message
    at the position named), the client sends the retry copy itself; a dead letter it cannot
    hand back is an error (the framework then consumes it again locally)."""
    send(broker, 1, queue_id=0)
    with serve_remoting(broker) as served:
        remote = RemotingBroker(served.namesrv)
        try:
            remote.register_consumer("billing", "c1", ["orders", "%RETRY%billing"])
            (view,) = remote.pull("billing", "orders", 0, 0, 32).messages
            moved = MessageView(unpack_record(encode_record_parts(
                view.topic.encode(), view.is_v2, view.body, view.properties_bytes,
                view.queue_id, view.flag, view.queue_offset, view.log_position + 10**9,
                view.sys_flag, view.born_timestamp_ms, view.raw_born_host,
                view.store_timestamp_ms, view.raw_store_host, view.reconsume_count,
                view.prepared_transaction_position, view.body_crc), 0))
            result = remote.send_back("billing", moved, delay_level=2, max_reconsume_times=5)
            assert result.outcome is SendBackOutcome.RETRY and result.receipt is not None
            assert (result.receipt.topic, result.receipt.delay_level) == ("%RETRY%billing", 2)
            broker.store.wait_dispatched()
            (copy,) = broker.store.get_message("billing", result.receipt.stored_topic,
                                               result.receipt.stored_queue_id, 0, 1).messages
            assert copy.body == view.body and copy.reconsume_count == 1
            assert copy.properties["ORIGIN_MESSAGE_ID"] == moved.msg_id
            assert copy.properties["RETRY_TOPIC"] == "orders"
            assert copy.properties["RECONSUME_TIME"] == "1"
            assert copy.properties["MAX_RECONSUME_TIMES"] == "5"
            with pytest.raises(RemotingResponseError):
                remote.send_back("billing", moved, delay_level=-1)
        finally:
            remote.unregister_consumer("billing", "c1")
            remote.close()
