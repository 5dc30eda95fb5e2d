"""Timers through the framework's producer: ``deliver_at`` (aware datetime or epoch ms) and
``delay`` (timedelta) deliver at that moment, never early; the argument rules; and an
``InlineRunner`` with a ``FakeClock`` that jumps to the timer's moment."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from postbox.framework import App, ConsumerOptions
from postbox.framework.testing import InlineRunner
from postbox.storage_engine import InvalidMessageError


def test_deliver_at_and_delay_come_at_their_moment(open_broker, client, store):
    # Apache RocketMQ rounds a deliver time down to its precision (timerPrecisionMs, 1 s):
    # the moments are whole seconds apart, and there a timer may come up to 1 s early
    early_s = 1.0 if store.transport == "rocketmq" else 0.01
    broker = open_broker()
    app = App(broker=client(broker), consumer_options=ConsumerOptions(long_polling_ms=100))
    received: dict[str, float] = {}
    done = threading.Event()

    @app.handler(topic="timed", consumer_group="g")
    def handle(message):
        received[message.text] = time.time()
        if len(received) == 3:
            done.set()

    app.start()
    sent = time.time()
    app.producer.send("timed", "datetime", deliver_at=datetime.now(UTC) + timedelta(seconds=6))
    app.producer.send("timed", "epoch", deliver_at=int((sent + 3.5) * 1000))
    app.producer.send("timed", "delay", delay=timedelta(milliseconds=1200))
    assert done.wait(30)
    app.stop()
    assert sorted(received, key=received.get) == ["delay", "epoch", "datetime"]
    assert received["delay"] - sent >= 1.2 - early_s
    assert received["epoch"] >= sent + 3.5 - early_s
    assert received["datetime"] >= sent + 6 - early_s


def test_send_arguments_are_checked(open_broker, client):
    producer = App(broker=client(open_broker())).producer
    with pytest.raises(InvalidMessageError, match="one of delay_level, deliver_at and delay"):
        producer.send("timed", "x", delay_level=1, delay=timedelta(seconds=1))
    with pytest.raises(InvalidMessageError, match="aware datetime"):
        producer.send("timed", "x", deliver_at=datetime(2030, 1, 1))
    with pytest.raises(InvalidMessageError, match="timedelta"):
        producer.send("timed", "x", delay=timedelta(seconds=-1))
    with pytest.raises(InvalidMessageError, match=r"timerMaxDelaySec|max delay"):  # Postbox|Apache
        producer.send("timed", "x", delay=timedelta(days=4))


@pytest.mark.embedded_only("drives the broker's timer service with a fake clock")
def test_inline_runner_jumps_to_a_timer(open_broker, fake_clock):
    broker = open_broker(clock=fake_clock)
    app = App(broker=broker, clock=fake_clock)
    seen = []

    @app.handler(topic="timed", consumer_group="g")
    def handle(message):
        seen.append((message.text, fake_clock.now_ms()))

    runner = InlineRunner(app, broker=broker)
    due_ms = fake_clock.now_ms() + 3_600_000
    app.producer.send("timed", "in an hour", deliver_at=due_ms)
    runner.run_until_idle(advance_clock=True)
    assert seen == [("in an hour", due_ms)]
    app.stop()


def test_cancel_timer_cancels_a_pending_timer(open_broker, client, store):
    broker = open_broker()
    app = App(broker=client(broker), consumer_options=ConsumerOptions(long_polling_ms=100))
    received: list[str] = []
    kept = threading.Event()

    @app.handler(topic="timed", consumer_group="g")
    def handle(message):
        received.append(message.text)
        if message.text == "kept":
            kept.set()

    app.start()
    moment = datetime.now(UTC) + timedelta(seconds=2)
    doomed = app.producer.send("timed", "cancelled", deliver_at=moment)
    # the marker for the target's own moment: what an Apache RocketMQ broker matches (the
    # rocketmq:// client names the target as Apache does, "topic+UNIQ_KEY")
    app.producer.cancel_timer("timed", doomed.msg_id, deliver_at=moment)
    if store.transport != "rocketmq":  # Postbox also cancels with a marker for any moment
        early = app.producer.send("timed", "early", deliver_at=moment + timedelta(seconds=1))
        app.producer.cancel_timer("timed", early.msg_id)  # the marker's default: 1 s from now
    app.producer.send("timed", "kept", deliver_at=moment + timedelta(seconds=2))
    assert kept.wait(30)
    time.sleep(0.3)
    app.stop()
    assert received == ["kept"]
    with pytest.raises(InvalidMessageError):
        App(broker=client(broker)).producer.cancel_timer("timed", " ")
