"""``Producer.send(..., message_group=...)``: RocketMQ 5's FIFO message group is the
``__SHARDINGKEY`` property and the sharding key, so one group's messages land in one queue in
send order — the queue a gRPC client's ``message_group`` gets (``sharding_queue``) — and the
argument rules; an orderly handler keeps each group in send order end to end."""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict

import pytest

from postbox.framework import App, ConsumerOptions
from postbox.storage_engine import InvalidMessageError
from postbox.storage_engine.contract.rules import sharding_queue
from tests.support.polling import wait_until

QUEUES = 8
STEPS = 10


def test_one_group_lands_in_one_queue_in_send_order(open_broker, client):
    broker = open_broker()
    broker.create_topic("fifo", QUEUES)
    producer = App(broker=client(broker)).producer
    placed: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for step in range(10):
        for group in ("order-42", "order-7", "order-1000"):
            result = producer.send("fifo", f"{group}:{step}", message_group=group)
            placed[group].append((result.queue_id, result.queue_offset, result.msg_id))
    for group, results in placed.items():
        assert {queue_id for queue_id, _, _ in results} == {sharding_queue(group, QUEUES)}
        offsets = [offset for _, offset, _ in results]
        assert offsets == sorted(offsets)  # send order
        def group_messages(queue_id=results[0][0], group=group):
            views = broker.pull("inspector", "fifo", queue_id, 0, 64).messages
            mine = [view for view in views if view.properties.get("__SHARDINGKEY") == group]
            return len(mine) >= 10 and mine

        mine = wait_until(group_messages, what="the group's queue")
        assert [view.body.decode() for view in mine] == [f"{group}:{n}" for n in range(10)]


def test_message_group_arguments_are_checked(open_broker, client):
    producer = App(broker=client(open_broker())).producer
    for bad in ("", " ", "a\x01b", "g" * 129):
        with pytest.raises(InvalidMessageError, match="message_group"):
            producer.send("fifo", "x", message_group=bad)
    with pytest.raises(InvalidMessageError, match="one of the two"):
        producer.send("fifo", "x", message_group="a", sharding_key="b")
    producer.send("fifo", "x", message_group="a", sharding_key="a")


def test_orderly_handler_keeps_each_group_in_send_order_and_a_failure_blocks_its_own(
        open_broker, client):
    """Interleaved messages of four groups, one per queue; the orderly handler fails one
    message of one group until every other group is done (at least three times): its group's
    successors wait behind it, the other groups go on, and each group is handled in send
    order."""
    broker = open_broker()
    broker.create_topic("fifo-orders", 4)
    groups: dict[int, str] = {}
    for number in itertools.count():  # one group per queue: a queue is what orderly locks
        groups.setdefault(sharding_queue(f"order-{number}", 4), f"order-{number}")
        if len(groups) == 4:
            break
    blocked, *others = sorted(groups.values())
    app = App(broker=client(broker),
              consumer_options=ConsumerOptions(orderly_suspend_ms=30, long_polling_ms=200))
    handled: dict[str, list[int]] = defaultdict(list)
    failures: list[int] = []
    lock = threading.Lock()
    others_done = threading.Event()
    blocked_done_after_others: list[bool] = []

    @app.handler(topic="fifo-orders", consumer_group="fifo-orders-posting", orderly=True,
                 reconsume_count_max=1_000)
    def post(message):
        group, step = message.text.split(":")
        assert message.message_group == group
        if group == blocked and step == "3":
            if len(failures) < 3 or not others_done.is_set():
                failures.append(message.reconsume_count)
                raise RuntimeError("not yet")
            blocked_done_after_others.append(others_done.is_set())
        with lock:
            handled[group].append(int(step))
            if all(len(set(handled[other])) == STEPS for other in others):
                others_done.set()

    app.start()
    try:
        for step in range(STEPS):
            for group in groups.values():
                app.producer.send("fifo-orders", f"{group}:{step}", message_group=group)
        wait_until(lambda: all(len(set(handled[group])) == STEPS for group in groups.values()),
                   30, "every message of every group", detail=lambda: dict(handled))
    finally:
        app.stop()
    for group in groups.values():
        assert list(dict.fromkeys(handled[group])) == list(range(STEPS)), group
        assert handled[group] == sorted(handled[group]), group  # never a step back
    assert len(failures) >= 3 and blocked_done_after_others == [True]
    assert failures == sorted(failures)  # redelivered in place, its count growing
