"""The broker's consumer registry (membership, heartbeat expiry, listeners) and orderly queue
locks, driven by a ``FakeClock``. The persist service's thread is stopped so that the tests
drive expiry through ``run_once`` alone.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from postbox.storage_engine import Broker, FakeClock, InvalidMessageError
from postbox.storage_engine.errors import InvalidQueueError, InvalidTopicError

GROUP = "billing"
EXPIRY_MS = 120_000
LOCK_EXPIRY_MS = 60_000
Q0, Q1, Q2 = ("orders", 0), ("orders", 1), ("orders", 2)


@pytest.fixture
def broker_factory(brokers) -> Callable[[str], Broker]:
    """``broker`` (tests/support/brokers.py) with this module's expiries and its persist
    service's thread stopped."""
    def open_quiet(name: str) -> Broker:
        opened = brokers.open(name, consumer_expiry_ms=EXPIRY_MS,
                              queue_lock_expiry_ms=LOCK_EXPIRY_MS)
        opened.persist_service.stop()
        return opened

    return open_quiet


@pytest.fixture
def changes(broker: Broker) -> list[tuple[str, list[str]]]:
    """Every membership notification, with the members the listener saw at that moment (it
    calls back into the broker, which must not deadlock: listeners run outside locks)."""
    seen: list[tuple[str, list[str]]] = []
    broker.add_membership_listener(lambda group: seen.append((group,
                                                              broker.consumer_ids(group))))
    return seen


def test_membership_changes_are_reported_and_ids_sorted(broker: Broker, changes):
    assert broker.register_consumer(GROUP, "client-b", ["orders"]) is True
    assert broker.register_consumer(GROUP, "client-b", ["orders"]) is False  # a refresh
    assert broker.register_consumer(GROUP, "client-a", ["orders", "audit"]) is True
    assert broker.consumer_ids(GROUP) == ["client-a", "client-b"]
    broker.unregister_consumer(GROUP, "client-b")
    broker.unregister_consumer(GROUP, "client-b")  # not a member any more: no notification
    assert changes == [(GROUP, ["client-b"]), (GROUP, ["client-a", "client-b"]),
                       (GROUP, ["client-a"])]
    assert broker.consumer_ids("other") == []


def test_first_heartbeat_creates_the_group_and_its_retry_topic(broker: Broker):
    broker.register_consumer(GROUP, "c1", ["orders"])
    assert broker.tables.subscription_groups.get(GROUP) is not None
    assert broker.queue_ids(f"%RETRY%{GROUP}") == [0]


def test_members_expire_lazily_in_consumer_ids(broker: Broker, clock: FakeClock, changes):
    broker.register_consumer(GROUP, "c1", ["orders"])
    clock.advance(EXPIRY_MS // 2)
    broker.register_consumer(GROUP, "c2", ["orders"])
    clock.advance(EXPIRY_MS // 2)
    assert broker.consumer_ids(GROUP) == ["c1", "c2"]  # exactly at the limit: still live
    clock.advance(1)
    assert broker.consumer_ids(GROUP) == ["c2"]
    assert changes[-1] == (GROUP, ["c2"])


def test_members_expire_in_the_persist_service_run(broker: Broker, clock: FakeClock, changes):
    broker.register_consumer(GROUP, "c1", ["orders"])
    broker.register_consumer("other", "c9", ["orders"])
    changes.clear()
    clock.advance(EXPIRY_MS + 1)
    broker.persist_service.run_once(clock.now_ms())
    assert sorted(changes) == [(GROUP, []), ("other", [])]
    assert broker.consumer_ids(GROUP) == [] and len(changes) == 2


def test_heartbeat_also_expires_stale_members(broker: Broker, clock: FakeClock):
    broker.register_consumer(GROUP, "c1", ["orders"])
    broker.register_consumer(GROUP, "c2", ["orders"])
    clock.advance(EXPIRY_MS + 1)
    assert broker.register_consumer(GROUP, "c2", ["orders"]) is True  # c1 left meanwhile
    assert broker.consumer_ids(GROUP) == ["c2"]


def test_a_failing_listener_does_not_stop_the_others(broker: Broker):
    seen = []

    def failing(group: str) -> None:
        raise RuntimeError("listener bug")

    broker.add_membership_listener(failing)
    broker.add_membership_listener(seen.append)
    assert broker.register_consumer(GROUP, "c1", ["orders"])
    assert seen == [GROUP]


def test_registry_rejects_bad_names(broker: Broker):
    with pytest.raises(InvalidMessageError, match="client id"):
        broker.register_consumer(GROUP, "", ["orders"])
    with pytest.raises(InvalidMessageError, match="'a b'"):
        broker.register_consumer("a b", "c1", ["orders"])
    with pytest.raises(InvalidTopicError):
        broker.register_consumer(GROUP, "c1", ["a/b"])
    with pytest.raises(InvalidMessageError, match="not the str"):
        broker.register_consumer(GROUP, "c1", "orders")


# ---- queue locks ---------------------------------------------------------------------------

def test_a_live_lock_of_another_client_is_not_granted(broker: Broker, clock: FakeClock):
    assert broker.lock_queues(GROUP, "c1", [Q0, Q1]) == {Q0, Q1}
    assert broker.lock_queues(GROUP, "c2", [Q1, Q2]) == {Q2}
    assert broker.lock_queues("other-group", "c2", [Q1]) == {Q1}  # locks are per group
    clock.advance(LOCK_EXPIRY_MS)
    assert broker.lock_queues(GROUP, "c1", [Q0, Q1]) == {Q0, Q1}  # renewed by the owner
    clock.advance(LOCK_EXPIRY_MS)
    assert broker.lock_queues(GROUP, "c2", [Q1]) == set()  # renewed above: still live
    clock.advance(1)
    assert broker.lock_queues(GROUP, "c2", [Q0, Q1]) == {Q0, Q1}  # lapsed


def test_unlock_releases_only_own_locks(broker: Broker):
    broker.lock_queues(GROUP, "c1", [Q0, Q1])
    broker.unlock_queues(GROUP, "c2", [Q0, Q1])
    assert broker.lock_queues(GROUP, "c2", [Q0, Q1]) == set()
    broker.unlock_queues(GROUP, "c1", [Q0])
    assert broker.lock_queues(GROUP, "c2", [Q0, Q1]) == {Q0}


def test_a_member_that_leaves_releases_its_locks(broker: Broker, clock: FakeClock):
    broker.register_consumer(GROUP, "c1", ["orders"])
    broker.register_consumer(GROUP, "c3", ["orders"])
    broker.lock_queues(GROUP, "c1", [Q0])
    broker.lock_queues(GROUP, "c3", [Q2])
    broker.unregister_consumer(GROUP, "c1")
    assert broker.lock_queues(GROUP, "c2", [Q0]) == {Q0}
    clock.advance(EXPIRY_MS + 1)
    broker.persist_service.run_once(clock.now_ms())  # c3 expires
    assert broker.lock_queues(GROUP, "c4", [Q2]) == {Q2}


def test_lock_rejects_malformed_queues(broker: Broker):
    with pytest.raises(InvalidQueueError, match="-1"):
        broker.lock_queues(GROUP, "c1", [("orders", -1)])
    with pytest.raises(InvalidQueueError, match="pair"):
        broker.lock_queues(GROUP, "c1", ["orders"])
