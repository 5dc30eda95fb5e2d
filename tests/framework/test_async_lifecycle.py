"""Async handlers at the edges of a consumer's life: graceful drain on stop (finish, or cancel
past the drain timeout and redeliver), ``async with app`` with ``send_async``, and the loop
never blocked by the framework's own blocking work."""

from __future__ import annotations

import asyncio
import threading

import pytest

from postbox.framework import App, ConsumerOptions, InvalidMessageError, Middleware, RetryLater
from postbox.storage_engine import Broker

WAIT_S = 20


def options(**fields) -> ConsumerOptions:
    return ConsumerOptions(long_polling_ms=100, rebalance_interval_ms=200, **fields)


def test_coroutine_in_flight_at_stop_finishes_and_is_committed(open_broker, client):
    broker = open_broker()
    app = App(broker=client(broker), consumer_options=options())
    started = threading.Event()
    release = threading.Event()
    finished: list[str] = []

    @app.handler(topic="events", consumer_group="g", consume_from="first")
    async def slow(message):
        started.set()
        await asyncio.to_thread(release.wait, WAIT_S)  # in flight while stop() begins
        finished.append(message.text)

    app.producer.send("events", "a", queue_id=0)
    app.start()
    assert started.wait(WAIT_S)
    stopper = threading.Thread(target=app.stop)
    stopper.start()
    stopper.join(0.2)
    assert stopper.is_alive()  # stop() drains: it waits for the coroutine
    release.set()
    stopper.join(WAIT_S)
    assert not stopper.is_alive()
    assert finished == ["a"]
    assert broker.query_offset("g", "events", 0) == 1


@pytest.mark.embedded_only("closes and reopens the embedded store")
def test_coroutine_past_the_drain_timeout_is_cancelled_and_redelivered(open_broker, client):
    broker = open_broker("s")
    app = App(broker=client(broker), consumer_options=options(drain_timeout_ms=200))
    started = threading.Event()
    cancelled = threading.Event()

    @app.handler(topic="events", consumer_group="g", consume_from="first")
    async def stuck(message):
        started.set()
        try:
            await asyncio.Event().wait()  # never set
        except asyncio.CancelledError:
            cancelled.set()
            raise

    sent = app.producer.send("events", "a", queue_id=0)
    app.start()
    assert started.wait(WAIT_S)
    app.stop()
    assert cancelled.is_set()
    assert app.consumers == []
    assert broker.query_offset("g", "events", 0) == 0  # not committed
    assert broker.dead_letters("g") == []
    assert broker.store.max_offset("%RETRY%g", 0) in (0, None)  # not sent back either
    config = broker.store.config
    broker.close()

    reopened = Broker.open(config)
    try:
        again = App(broker=client(reopened), consumer_options=options())
        redelivered: list[tuple[str, int]] = []
        done = threading.Event()

        @again.handler(topic="events", consumer_group="g", consume_from="first")
        async def handle(message):
            redelivered.append((message.msg_id, message.reconsume_count))
            done.set()

        with again:
            assert done.wait(WAIT_S)
        assert redelivered == [(sent.msg_id, 0)]
        assert reopened.query_offset("g", "events", 0) == 1
    finally:
        reopened.close()


def test_async_with_app_and_send_async(open_broker, client):
    broker = open_broker()
    app = App(broker=client(broker), consumer_options=options())
    received: list[str] = []

    @app.handler(topic="orders", consumer_group="shipping", consume_from="first")
    async def ship(message):
        received.append(message.text)

    async def serve() -> tuple[list[str], list[int]]:
        ticks: list[int] = []

        async def ticker() -> None:
            while True:
                ticks.append(len(ticks))
                await asyncio.sleep(0)

        ticking = asyncio.create_task(ticker())
        async with app as running:
            assert running is app and app.consumers
            results = [await app.producer.send_async("orders", f"o-{index}", tags="new")
                       for index in range(3)]
            with pytest.raises(InvalidMessageError, match="UNIQ_KEY"):
                await app.producer.send_async("orders", "x", properties={"UNIQ_KEY": "k"})
            while len(received) < 3:
                await asyncio.sleep(0.01)
        ticking.cancel()
        return [result.msg_id for result in results], ticks

    msg_ids, ticks = asyncio.run(serve())
    assert sorted(received) == ["o-0", "o-1", "o-2"]
    assert len(set(msg_ids)) == 3
    assert len(ticks) > 3  # the caller's loop ran while the app started, sent and stopped
    assert not app.running or app.consumers == []


class ThreadRecordingClient:
    """The app's real broker client, recording which thread makes each blocking call."""

    RECORDED = ("send", "send_back", "pull", "commit_offset", "wait_for_arrival")

    def __init__(self, client) -> None:
        self._client = client
        self.threads: dict[str, set[str]] = {name: set() for name in self.RECORDED}

    def __getattr__(self, name):
        attribute = getattr(self._client, name)
        if name not in self.RECORDED:
            return attribute

        def recorded(*args, **kwargs):
            self.threads[name].add(threading.current_thread().name)
            return attribute(*args, **kwargs)

        return recorded


class BlockingAfterConsume(Middleware):
    """A sync hook that blocks its consume thread until a coroutine on the consumer's loop
    releases it: were sync hooks run on the loop, the release could never happen."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release
        self.threads: list[str] = []

    def after_consume(self, context, outcome):
        self.threads.append(threading.current_thread().name)
        if not outcome.succeeded:
            assert self.release.wait(WAIT_S), "the event loop was blocked"


def test_blocking_framework_work_never_runs_on_the_loop(open_broker, client):
    broker = open_broker()
    release = threading.Event()
    middleware = BlockingAfterConsume(release)
    recording = ThreadRecordingClient(client(broker))
    app = App(broker=recording, consumer_options=options(consume_thread_count=2,
                                                         messages_per_task=1))
    app.add_middleware(middleware)
    ticks: list[int] = []
    done = threading.Event()

    @app.handler(topic="work", consumer_group="g", consume_from="first")
    async def handle(message):
        if message.text == "fail" and message.reconsume_count == 0:
            raise RetryLater(delay_level=1)
        if message.text == "ticker":  # ticks while the other thread blocks after the failure
            while not middleware.threads:
                await asyncio.sleep(0.001)
            for _ in range(5):
                ticks.append(1)
                await asyncio.sleep(0)
            release.set()
            await app.producer.send_async("side-effects", "from the ticker")  # off the loop
        if message.text == "fail":
            done.set()

    app.producer.send("work", "fail", queue_id=0)
    app.producer.send("work", "ticker", queue_id=0)
    with app:
        assert done.wait(WAIT_S)  # the failure was sent back and retried
    assert len(ticks) == 5
    assert all(name.startswith("postbox-consume-g") for name in middleware.threads)
    assert recording.threads["send_back"] and recording.threads["pull"]
    assert len(recording.threads["send"]) == 2  # the test's thread and an executor thread
    loop_calls = {call: names for call, names in recording.threads.items()
                  if any(name.startswith("postbox-loop") for name in names)}
    assert loop_calls == {}  # no blocking broker call ever ran on the loop


def test_coroutine_ignoring_cancellation_cannot_hang_stop(open_broker, client):
    broker = open_broker()
    app = App(broker=client(broker), consumer_options=options(drain_timeout_ms=100))
    started = threading.Event()
    refusals: list[int] = []

    @app.handler(topic="events", consumer_group="g", consume_from="first")
    async def stubborn(message):
        started.set()
        while True:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                refusals.append(1)  # swallowed: keeps running

    app.producer.send("events", "a", queue_id=0)
    app.start()
    assert started.wait(WAIT_S)
    app.stop()  # returns: the loop's stop releases the waiting consume thread
    assert refusals  # it was cancelled and refused
    assert broker.query_offset("g", "events", 0) == 0  # not committed, consumed again later
    assert broker.dead_letters("g") == []
