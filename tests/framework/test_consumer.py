"""Consumer runner: restarts, rebalancing, consume-from, broadcasting, tags, batches, shutdown."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from postbox.framework import App, BrokerClient, ConsumerOptions
from postbox.framework.testing import InlineRunner
from postbox.storage_engine import Broker
from tests.support.polling import wait_until

FAST = ConsumerOptions(long_polling_ms=200, rebalance_interval_ms=100, persist_interval_ms=100)


class Recorder:
    """A thread-safe handler that records message bodies."""

    def __init__(self) -> None:
        self.bodies: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, message) -> None:
        with self.lock:
            self.bodies[message.text] += 1

    def count(self) -> int:
        with self.lock:
            return sum(self.bodies.values())


def _consumer_app(client: BrokerClient, recorder: Recorder, group: str = "g",
                  **handler) -> App:
    app = App(broker=client, consumer_options=FAST)
    app.handler(topic="events", consumer_group=group, **handler)(recorder)
    return app


def test_restart_resumes_from_committed_offset(open_broker, client):
    broker = open_broker()
    first = Recorder()
    app = _consumer_app(client(broker), first).start()
    for i in range(100):
        app.producer.send("events", f"m{i}")
    wait_until(lambda: first.count() == 100)
    app.stop()  # drains and persists offsets
    producer = App(broker=client(broker)).producer
    for i in range(100, 150):
        producer.send("events", f"m{i}")
    second = Recorder()
    app2 = _consumer_app(client(broker), second).start()
    wait_until(lambda: second.count() == 50)
    app2.stop()
    assert set(second.bodies) == {f"m{i}" for i in range(100, 150)}
    assert max(first.bodies.values()) == 1 and max(second.bodies.values()) == 1


@pytest.mark.embedded_only("closes and reopens the embedded store")
def test_offsets_survive_broker_reopen(open_broker, client, tmp_path):
    broker = open_broker("s1")
    recorder = Recorder()
    app = _consumer_app(client(broker), recorder).start()
    for i in range(40):
        app.producer.send("events", f"m{i}")
    wait_until(lambda: recorder.count() == 40)
    app.stop()
    config = broker.store.config
    broker.close()
    reopened = Broker.open(config)
    try:
        later = Recorder()
        app2 = _consumer_app(client(reopened), later).start()
        app2.producer.send("events", "after")
        wait_until(lambda: later.count() == 1)
        app2.stop()
        assert list(later.bodies) == ["after"]
    finally:
        reopened.close()


def test_rebalancing_one_three_two_consumers_processes_everything(open_broker, client):
    broker = open_broker()
    recorders = [Recorder() for _ in range(3)]
    apps = [_consumer_app(client(broker), recorders[0]).start()]
    producer = App(broker=client(broker)).producer
    sent = 0

    def send(count: int) -> None:
        nonlocal sent
        for _ in range(count):
            producer.send("events", f"m{sent}")
            sent += 1

    def total() -> int:
        return sum(r.count() for r in recorders)

    def assigned() -> int:
        return sum(len(a.consumers[0].assigned_queues()) for a in apps)

    def state() -> str:  # what a timed-out wait reports (short: counts and queue ids)
        queues = [[(q.topic[:1], q.queue_id) for q in a.consumers[0].assigned_queues()]
                  for a in apps]
        return f"sent {sent}, consumed {[r.count() for r in recorders]}, queues {queues}"

    started = list(apps)  # stopped even when a wait fails: threads left running after a
    # failure go on logging tracebacks while pytest reports it (Python 3.11 builds both
    # with ast.parse, whose state is not thread-safe: "AST constructor recursion depth")
    try:
        send(200)
        apps += [_consumer_app(client(broker), recorders[i]).start() for i in (1, 2)]
        started += apps[1:]
        wait_until(lambda: assigned() == 9, what="9 queues among 3 consumers", detail=state)
        send(200)
        wait_until(lambda: all(r.count() for r in recorders) and total() >= 400,
                   what="400 messages consumed by 3 consumers", detail=state)
        assignments = [set(a.consumers[0].assigned_queues()) for a in apps]
        assert not (assignments[0] & assignments[1] or assignments[1] & assignments[2]
                    or assignments[0] & assignments[2])
        apps.pop().stop()  # 3 → 2
        wait_until(lambda: assigned() == 9, what="9 queues among 2 consumers", detail=state)
        send(200)
        wait_until(lambda: len(set().union(*(r.bodies for r in recorders))) == 600,
                   what="600 distinct messages", detail=state)
        for app in apps:
            app.stop()
        seen = Counter()
        for recorder in recorders:
            seen.update(recorder.bodies)
        assert set(seen) == {f"m{i}" for i in range(600)}  # nothing lost
        progress = {(p.topic, p.queue_id): p for p in broker.consumer_progress("g")}
        for queue_id in range(8):
            item = progress[("events", queue_id)]
            assert item.committed_offset == item.max_offset  # every queue fully committed
    finally:
        for app in started:
            app.stop()


def test_consume_from_first_last_and_timestamp(open_broker, client, fake_clock):
    broker = open_broker(clock=fake_clock)
    producer = App(broker=client(broker), clock=fake_clock).producer
    for i in range(5):
        producer.send("events", f"old{i}", queue_id=0)
        fake_clock.advance(1_000)
    middle_ms = fake_clock.now_ms()
    for i in range(5):
        producer.send("events", f"new{i}", queue_id=0)
        fake_clock.advance(1_000)
    results = {}
    for mode, extra in (("first", {}), ("last", {}),
                        ("timestamp", {"consume_timestamp_ms": middle_ms})):
        recorder = Recorder()
        app = App(broker=client(broker), clock=fake_clock)
        app.handler(topic="events", consumer_group=f"g-{mode}", consume_from=mode,
                    **extra)(recorder)
        InlineRunner(app, broker=broker).run_until_idle()
        app.stop()
        results[mode] = sorted(recorder.bodies)
    assert results["first"] == sorted([f"old{i}" for i in range(5)] + [f"new{i}" for i in
                                                                       range(5)])
    assert results["timestamp"] == sorted(f"new{i}" for i in range(5))
    # a young queue (its first message still in memory) starts at 0 even with "last"
    assert results["last"] == results["first"]


def test_broadcast_delivers_every_message_to_every_consumer(open_broker, client, tmp_path):
    broker = open_broker()
    recorders = [Recorder(), Recorder()]
    apps = []
    for index, recorder in enumerate(recorders):
        options = ConsumerOptions(long_polling_ms=200, offset_dir=tmp_path / "offsets")
        app = App(broker=client(broker), consumer_options=options, instance_name=f"node{index}")
        app.handler(topic="events", consumer_group="cache", broadcast=True,
                    consume_from="first")(recorder)
        apps.append(app.start())
    for i in range(50):
        apps[0].producer.send("events", f"m{i}")
    wait_until(lambda: all(r.count() == 50 for r in recorders))
    for app in apps:
        app.stop()
    assert (tmp_path / "offsets" / "node0" / "cache" / "offsets.json").exists()
    assert (tmp_path / "offsets" / "node1" / "cache" / "offsets.json").exists()
    # a restarted broadcast consumer resumes from its own file
    again = Recorder()
    app = App(broker=client(broker), consumer_options=ConsumerOptions(
        long_polling_ms=200, offset_dir=tmp_path / "offsets"), instance_name="node0")
    app.handler(topic="events", consumer_group="cache", broadcast=True,
                consume_from="first")(again)
    app.start()
    app.producer.send("events", "late")
    wait_until(lambda: again.count() == 1)
    app.stop()
    assert list(again.bodies) == ["late"]


def test_tag_filter_and_batches(open_broker, client, fake_clock):
    broker = open_broker(clock=fake_clock)
    app = App(broker=client(broker), clock=fake_clock)
    batches: list[list[str]] = []

    @app.handler(topic="events", consumer_group="g", tags="paid || refund", batch_size=4,
                 consume_from="first")
    def handle(messages):
        batches.append([m.tags for m in messages])

    for i in range(30):
        app.producer.send("events", f"m{i}", tags=("paid", "refund", "other")[i % 3],
                          queue_id=0)
    InlineRunner(app, broker=broker).run_until_idle()
    app.stop()
    tags = [t for batch in batches for t in batch]
    assert len(tags) == 20 and set(tags) == {"paid", "refund"}
    assert max(len(batch) for batch in batches) == 4


def test_graceful_stop_drains_in_flight_work(open_broker, client):
    broker = open_broker()
    started = threading.Event()
    finished: list[str] = []

    app = App(broker=client(broker), consumer_options=FAST)

    @app.handler(topic="events", consumer_group="g", consume_from="first")
    def slow(message):
        started.set()
        time.sleep(0.05)
        finished.append(message.text)

    app.producer.send("events", "a", queue_id=0)
    app.start()
    assert started.wait(10)
    app.stop()
    assert finished == ["a"]
    assert broker.query_offset("g", "events", 0) == 1


def test_nothing_connects_at_import_or_decoration(tmp_path):
    root = tmp_path / "store"
    app = App(store_url=root.as_uri())

    @app.handler(topic="events", consumer_group="g")
    def handle(message):
        return None

    assert handle.__name__ == "handle"  # returned unchanged
    assert not root.exists()
    with app:
        assert root.exists()


def test_conflicting_handlers_are_rejected(tmp_path):
    from postbox.framework import HandlerRegistrationError

    app = App(store_url=tmp_path.as_uri())
    app.handler(topic="a", consumer_group="g")(lambda m: None)
    with pytest.raises(HandlerRegistrationError):
        app.handler(topic="a", consumer_group="g")(lambda m: None)
    with pytest.raises(HandlerRegistrationError):
        app.handler(topic="b", consumer_group="g", orderly=True)(lambda m: None)
