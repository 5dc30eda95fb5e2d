"""Delayed messages through the framework, and middleware hooks."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from postbox.framework import App, ConsumerOptions, Middleware, SkipMessage
from postbox.framework.testing import InlineRunner
from postbox.storage_engine import Broker
from postbox.storage_engine.config import parse_delay_levels
from tests.support.brokers import MS_LEVELS

ORDER_GAP_MS = 100


def short_levels(levels_ms: tuple[int, ...], most_ms: int = 5_000) -> list[int]:
    """Three levels of the table with distinct delays of at most ``most_ms``: the shortest, a
    middle one and the longest, in that order."""
    by_delay = {levels_ms[level - 1]: level for level in range(len(levels_ms), 0, -1)
                if levels_ms[level - 1] <= most_ms}  # the lowest level of each delay
    delays = sorted(by_delay)
    return [by_delay[delays[0]], by_delay[delays[len(delays) // 2]], by_delay[delays[-1]]]


def test_delayed_message_appears_no_earlier_than_its_level(open_broker, client, store):
    broker = open_broker()
    app = App(broker=client(broker), consumer_options=ConsumerOptions(long_polling_ms=100))
    received: dict[str, float] = {}
    done = threading.Event()

    @app.handler(topic="timers", consumer_group="g")
    def handle(message):
        received[message.text] = time.monotonic()
        if len(received) == 3:
            done.set()

    app.start()
    levels_ms = store.delay_levels_ms  # the broker's table (milliseconds here, seconds in the lab)
    assert levels_ms == parse_delay_levels(MS_LEVELS) or store.remote
    shortest, middle, longest = short_levels(levels_ms)
    sent_at = {}
    for level in (longest, middle, shortest):
        sent_at[f"level{level}"] = (time.monotonic(), level)
        result = app.producer.send("timers", f"level{level}", delay_level=level)
        assert result.delay_level == level and result.topic == "timers"
    assert done.wait(10 + levels_ms[longest - 1] / 1000)
    app.stop()
    for body, (sent, level) in sent_at.items():
        assert (received[body] - sent) * 1000 >= levels_ms[level - 1] - 1, body
    # a shorter level sent later is not held behind a longer one: the messages come in the
    # order they fall due (sent + delay), for those due at least ORDER_GAP_MS apart (on a loaded
    # CI machine the three sends took long enough once for level 10 to fall due before level 1)
    due = {body: sent * 1000 + levels_ms[level - 1] for body, (sent, level) in sent_at.items()}
    by_due = sorted(due, key=due.get)
    assert due[by_due[-1]] - due[by_due[0]] >= ORDER_GAP_MS, ("sends too slow to tell", due)
    for earlier, later in itertools.combinations(by_due, 2):
        if due[later] - due[earlier] >= ORDER_GAP_MS:
            assert received[earlier] < received[later], (earlier, later, due, received)


@pytest.mark.embedded_only("closes and reopens the embedded store")
def test_delayed_messages_survive_a_restart(open_broker, client, tmp_path):
    broker = open_broker("s", levels="1s 2s 3s")
    producer = App(broker=client(broker)).producer
    sent = producer.send("timers", b"later", delay_level=2)
    assert sent.delay_level == 2
    config = broker.store.config
    broker.close()  # before the delay elapses
    reopened = Broker.open(config)
    try:
        app = App(broker=client(reopened), consumer_options=ConsumerOptions(long_polling_ms=100))
        got = threading.Event()
        seen = []

        @app.handler(topic="timers", consumer_group="g", consume_from="first")
        def handle(message):
            seen.append((message.msg_id, message.store_timestamp_ms))
            got.set()

        app.start()
        assert got.wait(10)
        app.stop()
        assert seen[0][0] == sent.msg_id
        assert seen[0][1] >= sent.store_timestamp_ms + 2_000
    finally:
        reopened.close()


class Recording(Middleware):
    def __init__(self, name: str, events: list) -> None:
        self.name = name
        self.events = events

    def before_consume(self, context) -> None:
        self.events.append((self.name, "before", context.message.text))
        if context.message.text == "skip":
            raise SkipMessage

    def after_consume(self, context, outcome) -> None:
        self.events.append((self.name, "after", outcome.kind.value, context.skipped))


def _recorded_app(broker, client, fake_clock, *middlewares) -> tuple[App, list[str]]:
    """An app with ``middlewares`` (outermost first) and a handler of topic ``t`` that records
    the text of every message it handles."""
    app = App(broker=client(broker), clock=fake_clock)
    for middleware in middlewares:
        app.add_middleware(middleware)
    handled: list[str] = []

    @app.handler(topic="t", consumer_group="g", consume_from="first")
    def handle(message):
        handled.append(message.text)

    return app, handled


def test_middleware_hooks_wrap_each_message_in_order(open_broker, client, fake_clock):
    broker = open_broker(clock=fake_clock)
    events: list = []
    app, handled = _recorded_app(broker, client, fake_clock, Recording("outer", events),
                                 Recording("inner", events))
    app.producer.send("t", "run", queue_id=0)
    app.producer.send("t", "skip", queue_id=0)
    InlineRunner(app, broker=broker).run_until_idle()
    app.stop()
    assert handled == ["run"]
    assert events[:4] == [("outer", "before", "run"), ("inner", "before", "run"),
                          ("inner", "after", "success", False),
                          ("outer", "after", "success", False)]
    assert events[4:] == [("outer", "before", "skip"), ("outer", "after", "success", True)]


def test_middleware_can_pass_extra_handler_arguments(open_broker, client, fake_clock):
    broker = open_broker(clock=fake_clock)
    app = App(broker=client(broker), clock=fake_clock)

    class Session(Middleware):
        @classmethod
        def handler_arguments(cls, spec):
            return ("session",)

        def around_consume(self, context, call_next):
            context.handler_args.append("session-object")
            return call_next()

    app.add_middleware(Session())
    got = []

    @app.handler(topic="t", consumer_group="g", consume_from="first")
    def handle(message, session):
        got.append(session)

    app.producer.send("t", "x")
    InlineRunner(app, broker=broker).run_until_idle()
    app.stop()
    assert got == ["session-object"]


class BatchRecording(Middleware):
    """Records the batch hooks and checks that a task's contexts carry state to each call."""

    def __init__(self, name: str, events: list, *, fail: bool = False) -> None:
        self.name = name
        self.events = events
        self.fail = fail

    def before_batch(self, contexts) -> None:
        self.events.append((self.name, "before_batch", [c.message.text for c in contexts]))
        for context in contexts:
            context.state[self.name] = "prepared"
        if self.fail:
            raise RuntimeError("injected batch hook failure")

    def around_consume(self, context, call_next):
        self.events.append((self.name, "consume", context.message.text,
                            context.state.get(self.name)))
        return call_next()

    def after_batch(self, contexts) -> None:
        self.events.append((self.name, "after_batch", [c.message.text for c in contexts]))


def test_batch_hooks_run_once_around_the_messages_of_a_consume_task(open_broker, client,
                                                                    fake_clock):
    broker = open_broker(clock=fake_clock)
    events: list = []
    app, handled = _recorded_app(broker, client, fake_clock, BatchRecording("outer", events),
                                 BatchRecording("inner", events))
    for text in ("a", "b", "c"):
        app.producer.send("t", text, queue_id=0)
    InlineRunner(app, broker=broker).run_until_idle()
    app.stop()
    assert handled == ["a", "b", "c"]
    assert events == [
        ("outer", "before_batch", ["a", "b", "c"]), ("inner", "before_batch", ["a", "b", "c"]),
        *[(name, "consume", text, "prepared") for text in "abc" for name in ("outer", "inner")],
        ("inner", "after_batch", ["a", "b", "c"]), ("outer", "after_batch", ["a", "b", "c"])]


def test_a_failing_batch_hook_is_logged_and_the_messages_still_run(open_broker, client,
                                                                   fake_clock, caplog):
    broker = open_broker(clock=fake_clock)
    events: list = []
    app, handled = _recorded_app(broker, client, fake_clock,
                                 BatchRecording("failing", events, fail=True))
    app.producer.send("t", "a", queue_id=0)
    InlineRunner(app, broker=broker).run_until_idle()
    app.stop()
    assert handled == ["a"]
    assert [event[1] for event in events] == ["before_batch", "consume", "after_batch"]
    assert "injected batch hook failure" in caplog.text
