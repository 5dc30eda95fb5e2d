"""``async def`` handlers: run on the consumer's event loop with the threaded engine's rules
(retries, DLQ, orderly, batches, middleware), concurrently up to ``max_concurrency``."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading

import pytest

from postbox.framework import (
    App,
    ConfigurationError,
    ConsumerOptions,
    DeadLetter,
    Middleware,
    RetryLater,
)
from postbox.framework.event_loop import EventLoopError, EventLoopThread, is_coroutine_callable
from postbox.framework.testing import InlineRunner
from tests.support.brokers import DEFAULT_LEVELS
from tests.support.polling import wait_until

WAIT_S = 20
FAST = ConsumerOptions(long_polling_ms=100, rebalance_interval_ms=200)


def threaded_app(broker, **options) -> App:
    return App(broker=broker, consumer_options=ConsumerOptions(
        long_polling_ms=100, rebalance_interval_ms=200, **options))


def test_async_handler_consumes_on_the_loop_and_commits(open_broker, client):
    broker = open_broker()
    app = threaded_app(client(broker))
    seen: list[tuple[str, str]] = []
    done = threading.Event()

    @app.handler(topic="orders", consumer_group="billing", consume_from="first")
    async def bill(message):
        await asyncio.sleep(0)
        seen.append((message.text, threading.current_thread().name))
        if len(seen) == 3:
            done.set()

    for text in ("a", "b", "c"):
        app.producer.send("orders", text, queue_id=0)
    with app:
        assert done.wait(WAIT_S)
        consumer = app.consumer("billing")
        assert consumer.event_loop.running
    assert sorted(text for text, _ in seen) == ["a", "b", "c"]
    assert {name for _, name in seen} == {"postbox-loop-billing"}
    assert broker.query_offset("billing", "orders", 0) == 3
    assert not consumer.event_loop.running  # closed with the consumer


def test_coroutines_run_concurrently_up_to_the_consume_threads(open_broker, client):
    """Four messages, four consume threads: all four coroutines wait at one barrier, which
    only opens when all four are in flight at once (sequential handling would never open)."""
    broker = open_broker()
    app = threaded_app(client(broker), consume_thread_count=4, messages_per_task=1)
    arrived: list[str] = []
    barrier = asyncio.Event()  # used on the consumer's loop only
    done = threading.Event()

    @app.handler(topic="jobs", consumer_group="workers", consume_from="first")
    async def work(message):
        arrived.append(message.text)
        if len(arrived) == 4:
            barrier.set()
        await asyncio.wait_for(barrier.wait(), WAIT_S)
        if len(arrived) == 4:
            done.set()

    for index in range(4):
        app.producer.send("jobs", f"job-{index}", queue_id=0)
    with app:
        assert done.wait(WAIT_S)
    assert sorted(arrived) == [f"job-{index}" for index in range(4)]
    assert broker.query_offset("workers", "jobs", 0) == 4


def test_max_concurrency_bounds_coroutines_in_flight(open_broker, client):
    """Four coroutines are on the loop at once (the loop's task count says so), yet only
    ``max_concurrency=2`` of them are inside the handler at any moment."""
    broker = open_broker()
    app = threaded_app(client(broker), consume_thread_count=4, messages_per_task=1)
    inside = 0
    most_inside: list[int] = []
    finished = threading.Event()
    handled: list[str] = []

    @app.handler(topic="jobs", consumer_group="workers", consume_from="first",
                 max_concurrency=2)
    async def work(message):
        nonlocal inside
        inside += 1
        loop_thread = app.consumer("workers").event_loop
        while (loop_thread.in_flight() < 4 or inside < 2) and len(handled) < 2:
            await asyncio.sleep(0.001)  # until all four are tasks on the loop
        for _ in range(3):  # every task on the loop takes a step: unbounded, all enter
            await asyncio.sleep(0)
        most_inside.append(inside)
        await asyncio.sleep(0)
        inside -= 1
        handled.append(message.text)
        if len(handled) == 4:
            finished.set()

    for index in range(4):
        app.producer.send("jobs", f"job-{index}", queue_id=0)
    with app:
        assert finished.wait(WAIT_S)
    assert max(most_inside) == 2
    assert most_inside[0] == 2  # two inside while all four were tasks on the loop


def test_failure_retries_then_succeeds_with_reconsume_counts(open_broker, client):
    broker = open_broker()
    app = threaded_app(client(broker))
    counts: list[int] = []
    done = threading.Event()

    @app.handler(topic="payments", consumer_group="ledger", consume_from="first")
    async def settle(message):
        counts.append(message.reconsume_count)
        await asyncio.sleep(0)
        if message.reconsume_count == 0:
            raise RuntimeError("provider down")  # raised on the loop, after an await
        if message.reconsume_count == 1:
            raise RetryLater(delay_level=1, reason="not yet")
        done.set()

    app.producer.send("payments", "p-1")
    with app:
        assert done.wait(WAIT_S)
        consume = app.consumer("ledger").consume
    assert (consume.stats.consumed, consume.stats.retried, consume.stats.dead_lettered) == (
        3, 2, 0)
    assert counts == [0, 1, 2]


def test_dead_letter_and_exhausted_retries_reach_the_dlq_inline(open_broker, client,
                                                                 fake_clock):
    """``framework.testing`` drives async handlers too (no consume threads; the coroutines
    still run on the consumer's loop)."""
    broker = open_broker(clock=fake_clock, levels=DEFAULT_LEVELS)
    app = App(broker=client(broker), clock=fake_clock)
    attempts: list[tuple[str, int]] = []

    @app.handler(topic="jobs", consumer_group="workers", reconsume_count_max=2)
    async def handle(message):
        attempts.append((message.text, message.reconsume_count))
        if message.text == "poison":
            raise DeadLetter("cannot parse")
        raise RuntimeError("always fails")

    app.producer.send("jobs", "poison")
    app.producer.send("jobs", "flaky")
    InlineRunner(app, broker=broker).run_until_idle(advance_clock=True)
    app.stop()
    assert [count for text, count in attempts if text == "poison"] == [0]
    assert [count for text, count in attempts if text == "flaky"] == [0, 1, 2]
    dead = {view.body: view for view in broker.dead_letters("workers")}
    assert sorted(dead) == [b"flaky", b"poison"]
    assert dead[b"poison"].properties.get("DLQ_REASON") == "cannot parse"


def test_orderly_async_handler_keeps_order_through_a_retry(open_broker, client):
    broker = open_broker()
    app = threaded_app(client(broker), orderly_suspend_ms=20)
    seen: list[str] = []
    done = threading.Event()
    failed_once = False

    @app.handler(topic="ledger", consumer_group="books", consume_from="first", orderly=True)
    async def book(message):
        nonlocal failed_once
        await asyncio.sleep(0)
        if message.text == "e-3" and not failed_once:
            failed_once = True
            raise RuntimeError("retry in place")
        seen.append(message.text)
        if len(seen) == 6:
            done.set()

    for index in range(6):
        app.producer.send("ledger", f"e-{index}", sharding_key="account-1")
    with app:
        assert done.wait(WAIT_S)
    assert seen == [f"e-{index}" for index in range(6)]
    assert failed_once


def test_broadcast_async_handler_reaches_every_consumer_and_drops_failures(open_broker, client,
                                                                           tmp_path):
    broker = open_broker()
    seen: dict[str, list[str]] = {"node0": [], "node1": []}
    done = threading.Event()
    apps = []
    for name in seen:
        app = App(broker=client(broker), instance_name=name, consumer_options=ConsumerOptions(
            long_polling_ms=100, offset_dir=tmp_path / "offsets"))

        async def record(message, name=name):
            seen[name].append(message.text)
            if all(len(texts) == 3 for texts in seen.values()):
                done.set()
            if message.text == "bad":
                raise RuntimeError("broadcast failures are logged and dropped")

        app.handler(topic="events", consumer_group="cache", broadcast=True,
                    consume_from="first")(record)
        apps.append(app.start())
    for text in ("a", "bad", "c"):
        apps[0].producer.send("events", text, queue_id=0)
    assert done.wait(WAIT_S)
    consumers = [app.consumer("cache") for app in apps]
    for app in apps:
        app.stop()
    assert {name: sorted(texts) for name, texts in seen.items()} == {
        "node0": ["a", "bad", "c"], "node1": ["a", "bad", "c"]}
    assert [consumer.consume.stats.dropped for consumer in consumers] == [1, 1]


def test_batch_async_handler_gets_lists(open_broker, client):
    broker = open_broker()
    app = threaded_app(client(broker), messages_per_task=6)
    batches: list[list[str]] = []
    done = threading.Event()

    @app.handler(topic="rows", consumer_group="loader", consume_from="first", batch_size=3)
    async def load(messages):
        batches.append([message.text for message in messages])
        if sum(map(len, batches)) == 6:
            done.set()

    for index in range(6):
        app.producer.send("rows", f"r-{index}", queue_id=0)
    wait_until(lambda: len(broker.pull("probe", "rows", 0, 0, 32).messages) == 6,
               what="all six rows consumable, so the first pull can fill a batch of 3")
    with app:
        assert done.wait(WAIT_S)
    assert sorted(text for batch in batches for text in batch) == [f"r-{i}" for i in range(6)]
    assert all(1 <= len(batch) <= 3 for batch in batches) and any(len(b) == 3 for b in batches)
    assert broker.query_offset("loader", "rows", 0) == 6


def test_sync_and_async_handlers_share_one_group(open_broker, client):
    broker = open_broker()
    app = threaded_app(client(broker))
    threads: dict[str, str] = {}
    done = threading.Event()

    def record(kind: str) -> None:
        threads[kind] = threading.current_thread().name
        if len(threads) == 2:
            done.set()

    @app.handler(topic="sync-topic", consumer_group="mixed", consume_from="first")
    def sync_handler(message):
        record("sync")

    @app.handler(topic="async-topic", consumer_group="mixed", consume_from="first")
    async def async_handler(message):
        record("async")

    app.producer.send("sync-topic", "s")
    app.producer.send("async-topic", "a")
    with app:
        assert done.wait(WAIT_S)
    assert threads["async"] == "postbox-loop-mixed"
    assert threads["sync"].startswith("postbox-consume-mixed")


REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


class RequestIdMiddleware(Middleware):
    """Sets a contextvar in the consume thread (as a tracing middleware sets its span) and
    gives async handlers an extra argument from its async hook."""

    def __init__(self) -> None:
        self.hook_threads: list[str] = []
        self.async_results: list[object] = []

    def around_consume(self, context, call_next):
        token = REQUEST_ID.set(f"req-{context.message.text}")
        try:
            self.hook_threads.append(threading.current_thread().name)
            return call_next()
        finally:
            REQUEST_ID.reset(token)

    @classmethod
    def handler_arguments(cls, spec):
        return ("extra",)

    async def around_consume_async(self, context, call_next):
        assert context.is_async
        context.handler_args.append(f"arg-{REQUEST_ID.get()}")
        result = await call_next()
        self.async_results.append(result)
        return result


def test_contextvars_and_async_hooks_reach_the_coroutine(open_broker, client):
    broker = open_broker()
    app = threaded_app(client(broker))
    middleware = RequestIdMiddleware()
    app.add_middleware(middleware)
    seen: list[tuple[str, str, str]] = []
    done = threading.Event()

    @app.handler(topic="calls", consumer_group="api", consume_from="first")
    async def call(message, extra):
        seen.append((message.text, REQUEST_ID.get(), extra))
        REQUEST_ID.set("changed inside")  # stays in the coroutine's copy
        done.set()
        return "handler result"

    app.producer.send("calls", "m1")
    with app:
        assert done.wait(WAIT_S)
    assert seen == [("m1", "req-m1", "arg-req-m1")]
    assert middleware.async_results == ["handler result"]
    assert middleware.hook_threads[0].startswith("postbox-consume-api")


def test_handler_options_are_checked():
    app = App(store_url="file:///tmp/never-opened")

    async def handler(message):
        return None

    for bad in (0, -1, "2", 1.5, True):
        with pytest.raises(ConfigurationError, match="max_concurrency"):
            app.handler(topic="t", consumer_group="g", max_concurrency=bad)(handler)
    with pytest.raises(ConfigurationError, match="max_concurrency=2 is for async handlers"):
        app.handler(topic="t", consumer_group="g", max_concurrency=2)(lambda message: None)

    class AsyncCallable:
        async def __call__(self, message):
            return None

    assert is_coroutine_callable(handler)
    assert is_coroutine_callable(functools.partial(handler))
    assert is_coroutine_callable(AsyncCallable())
    assert not is_coroutine_callable(lambda message: None)
    assert not is_coroutine_callable(AsyncCallable)  # the class makes an object, not a coroutine
    app.handler(topic="t", consumer_group="g", max_concurrency=3)(AsyncCallable())
    assert app.handlers[-1].is_async and app.handlers[-1].max_concurrency == 3


def test_run_from_the_loop_thread_is_refused():
    loop_thread = EventLoopThread("test")
    try:
        async def inner():
            return "never"

        async def outer():
            return loop_thread.run(inner)

        with pytest.raises(EventLoopError, match="from the event loop thread"):
            loop_thread.run(outer)
        assert loop_thread.run(inner) == "never"  # the loop still serves
    finally:
        loop_thread.stop()
    with pytest.raises(EventLoopError, match="stopped"):
        loop_thread.run(inner)


class LoaderMiddleware(Middleware):
    """A sync hook doing one-off async work with ``context.run_coroutine``; its async hook
    tries the same from the loop, which must be refused."""

    def __init__(self) -> None:
        self.loaded: list[str] = []

    def before_consume(self, context):
        async def load():
            await asyncio.sleep(0)
            return f"{context.message.text} loaded in {REQUEST_ID.get()}"

        token = REQUEST_ID.set("the consume thread's context")
        try:
            self.loaded.append(context.run_coroutine(load))
        finally:
            REQUEST_ID.reset(token)

    async def around_consume_async(self, context, call_next):
        context.run_coroutine(asyncio.sleep)  # refused: it would wait for itself
        return await call_next()


def test_run_coroutine_from_sync_hooks_and_refused_on_the_loop(open_broker, client, store):
    broker = open_broker()
    app = threaded_app(client(broker))
    middleware = LoaderMiddleware()
    app.add_middleware(middleware)
    seen: list[str] = []

    @app.handler(topic="sync-topic", consumer_group="tools", consume_from="first")
    def sync_handler(message):
        seen.append(message.text)

    @app.handler(topic="async-topic", consumer_group="tools", consume_from="first",
                 reconsume_count_max=0)
    async def async_handler(message):
        seen.append(message.text)

    app.producer.send("sync-topic", "s")
    app.producer.send("async-topic", "a")
    with app:
        dead = wait_until(lambda: broker.dead_letters("tools"), what="the DLQ")
        wait_until(lambda: len(middleware.loaded) == 2, what="both messages")
    assert seen == ["s"]  # the async handler's chain failed before it
    assert sorted(middleware.loaded) == ["a loaded in the consume thread's context",
                                         "s loaded in the consume thread's context"]
    assert [view.body for view in dead] == [b"a"]
    if store.transport != "rocketmq":  # Apache's send-back carries no reason
        assert "from the event loop thread" in dead[0].properties["DLQ_REASON"]


def test_max_concurrency_above_the_consume_threads_is_reported(open_broker, client, caplog):
    app = threaded_app(client(open_broker()), consume_thread_count=2)

    @app.handler(topic="jobs", consumer_group="wide", max_concurrency=50)
    async def work(message):
        return None

    with caplog.at_level("WARNING", logger="postbox.framework.consumer"), app:
        pass
    assert "max_concurrency=50 but group wide has 2 consume threads" in caplog.text
