"""Membership over the network: listeners fire when other clients join, leave or expire;
registrations are kept alive by the client's heartbeats; a server with no free wait slot makes
waits back off instead of spinning or holding a thread."""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc

from network.grpc_v2.client import RemoteBroker
from network.grpc_v2.postbox_service import PostboxService
from storage_engine import BrokerConfig, Message

WAIT_S = 10.0


class Changes:
    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.groups: list[str] = []

    def __call__(self, group: str) -> None:
        with self.condition:
            self.groups.append(group)
            self.condition.notify_all()

    def wait_for(self, count: int) -> bool:
        with self.condition:
            return self.condition.wait_for(lambda: len(self.groups) >= count, WAIT_S)


def test_listeners_hear_other_clients_join_leave_and_expire(open_broker, loopback):
    server = loopback(open_broker(broker=BrokerConfig(consumer_expiry_ms=300)))
    watcher = server.client(heartbeat_interval_ms=100)
    changes = Changes()
    watcher.add_membership_listener(changes)
    watcher.register_consumer("g", "watcher", ["events"])
    assert changes.groups == ["g"]  # its own join, on the caller's thread
    other = server.client()
    other.register_consumer("g", "other", ["events"])
    assert changes.wait_for(2)
    other.unregister_consumer("g", "other")
    assert changes.wait_for(3)
    silent = server.client(heartbeat_interval_ms=60_000)
    silent.register_consumer("g", "silent", ["events"])
    assert changes.wait_for(4)
    assert changes.wait_for(5)  # "silent" sent no heartbeat for 300 ms: expired
    assert watcher.consumer_ids("g") == ["watcher"]  # kept alive by its heartbeats
    assert set(changes.groups) == {"g"}


def test_no_free_wait_slot_means_a_short_back_off(open_broker):
    broker = open_broker()
    starved = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    PostboxService(broker, long_waits_max=0).register(starved)
    port = starved.add_insecure_port("127.0.0.1:0")
    starved.start()
    try:
        with RemoteBroker(f"127.0.0.1:{port}") as client:
            client.create_topic("events", 1)
            started = time.monotonic()
            assert client.wait_for_arrival({("events", 0): 0}, 5_000) is False
            assert 0.1 < time.monotonic() - started < 2  # backed off, did not wait 5 s
            result = client.pull("g", "events", 0, 0, suspend_timeout_ms=5_000)
            assert result.messages == [] and time.monotonic() - started < 3
            client.send(Message("events", b"x"))
    finally:
        starved.stop(None)
