"""Send-back through ``%RETRY%group`` with the delay levels, and the dead-letter queue."""

from __future__ import annotations

import itertools
import threading

from postbox.framework import App, ConsumerOptions, DeadLetter, RetryLater
from postbox.framework.testing import InlineRunner
from postbox.storage_engine.config import parse_delay_levels
from tests.support.brokers import DEFAULT_LEVELS


def test_failing_handler_sees_delays_in_level_order_then_lands_in_dlq(open_broker, client,
                                                                     fake_clock):
    broker = open_broker(clock=fake_clock, levels=DEFAULT_LEVELS)
    app = App(broker=client(broker), clock=fake_clock)
    attempts: list[tuple[int, int, str]] = []

    @app.handler(topic="orders", consumer_group="billing")
    def always_fails(message):
        attempts.append((fake_clock.now_ms(), message.reconsume_count, message.topic))
        raise RuntimeError("payment provider down")

    sent = app.producer.send("orders", b"order-1", tags="paid", keys=["o-1"])
    InlineRunner(app, broker=broker).run_until_idle(advance_clock=True)
    app.stop()

    assert [count for _, count, _ in attempts] == list(range(17))  # first try + 16 retries
    assert {topic for _, _, topic in attempts} == {"orders"}  # original topic restored
    gaps = [later[0] - earlier[0] for earlier, later in itertools.pairwise(attempts)]
    levels = parse_delay_levels(DEFAULT_LEVELS)
    assert gaps == list(levels[2:18])  # level 3 + reconsume count: 10 s, 30 s, 1 m … 2 h
    dead = broker.dead_letters("billing")
    assert len(dead) == 1
    assert dead[0].body == b"order-1" and dead[0].unique_key == sent.msg_id
    assert dead[0].properties["RETRY_TOPIC"] == "orders"
    assert dead[0].reconsume_count == 17
    assert broker.store.max_offset("orders", sent.queue_id) == 1  # never copied back to the topic


def test_retry_later_with_explicit_level_and_dead_letter_request(open_broker, client, fake_clock):
    broker = open_broker(clock=fake_clock, levels=DEFAULT_LEVELS)
    app = App(broker=client(broker), clock=fake_clock)
    seen: list[tuple[str, int, int]] = []

    @app.handler(topic="jobs", consumer_group="workers")
    def handle(message):
        seen.append((message.text, message.reconsume_count, fake_clock.now_ms()))
        if message.text == "later" and message.reconsume_count == 0:
            raise RetryLater(delay_level=1)
        if message.text == "poison":
            raise DeadLetter("cannot parse")

    app.producer.send("jobs", "later")
    app.producer.send("jobs", "poison")
    start_ms = fake_clock.now_ms()
    InlineRunner(app, broker=broker).run_until_idle(advance_clock=True)
    app.stop()

    later = [entry for entry in seen if entry[0] == "later"]
    assert [count for _, count, _ in later] == [0, 1]
    assert later[1][2] - start_ms == 1_000  # level 1 = 1 s
    assert [entry[1] for entry in seen if entry[0] == "poison"] == [0]  # no retry
    dead = broker.dead_letters("workers")
    assert [view.body for view in dead] == [b"poison"]
    assert dead[0].properties.get("DLQ_REASON") == "cannot parse"


def test_reconsume_count_max_per_handler(open_broker, client, fake_clock):
    broker = open_broker(clock=fake_clock, levels=DEFAULT_LEVELS)
    app = App(broker=client(broker), clock=fake_clock)
    counts: list[int] = []

    @app.handler(topic="jobs", consumer_group="workers", reconsume_count_max=2)
    def handle(message):
        counts.append(message.reconsume_count)
        raise RuntimeError("no")

    app.producer.send("jobs", b"x")
    InlineRunner(app, broker=broker).run_until_idle(advance_clock=True)
    app.stop()
    assert counts == [0, 1, 2]
    assert len(broker.dead_letters("workers")) == 1


def test_dead_letter_resend_reaches_the_dead_lettering_group_only(open_broker, client,
                                                                   fake_clock):
    broker = open_broker(clock=fake_clock, levels=DEFAULT_LEVELS)
    app = App(broker=client(broker), clock=fake_clock)
    fixed = threading.Event()
    delivered: list[tuple[str, str, int]] = []
    audited: list[str] = []

    @app.handler(topic="jobs", consumer_group="workers")
    def handle(message):
        if not fixed.is_set():
            raise DeadLetter("bug")
        delivered.append((message.msg_id, message.topic, message.reconsume_count))

    @app.handler(topic="jobs", consumer_group="auditors")
    def audit(message):
        audited.append(message.msg_id)

    sent = app.producer.send("jobs", b"x")
    runner = InlineRunner(app, broker=broker)
    runner.run_until_idle(advance_clock=True)
    fixed.set()
    broker.resend_dead_letter("workers", 0)
    runner.run_until_idle(advance_clock=True)
    app.stop()
    assert delivered == [(sent.msg_id, "jobs", 0)]  # same id, under its original topic
    assert audited == [sent.msg_id]  # the other group handled it once and never sees it again
    assert broker.dlq_resends.marks("workers")[0].count == 1


def test_real_threads_retry_with_millisecond_levels(open_broker, client):
    broker = open_broker()
    app = App(broker=client(broker), consumer_options=ConsumerOptions(long_polling_ms=200))
    done = threading.Event()
    counts: list[int] = []

    @app.handler(topic="jobs", consumer_group="workers", reconsume_count_max=3)
    def handle(message):
        counts.append(message.reconsume_count)
        if message.reconsume_count < 3:
            raise RuntimeError("not yet")
        done.set()

    app.start()
    app.producer.send("jobs", b"x")
    assert done.wait(10)
    app.stop()
    assert counts == [0, 1, 2, 3]
    assert broker.dead_letters("workers") == []
