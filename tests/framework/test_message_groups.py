"""``Producer.send(..., message_group=...)``: RocketMQ 5's FIFO message group is the
``__SHARDINGKEY`` property and the sharding key, so one group's messages land in one queue in
send order — the queue a gRPC client's ``message_group`` gets (``sharding_queue``) — and the
argument rules."""

from __future__ import annotations

from collections import defaultdict

import pytest

from postbox.framework import App
from postbox.storage_engine import InvalidMessageError
from postbox.storage_engine.contract.rules import sharding_queue
from tests.support.polling import wait_until

QUEUES = 8


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
