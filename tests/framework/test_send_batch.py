"""``Producer.send_batch``: messages of one topic in one call, one queue, consecutive offsets,
each with its own id and properties; checked as ``send`` checks a message, whole or nothing."""

from __future__ import annotations

import asyncio

import pytest

from postbox.framework import App, BatchMessage, ConsumedMessage, InvalidMessageError
from postbox.framework.testing import InlineRunner
from tests.framework.test_send_rules import written


def test_a_batch_lands_in_one_queue_at_consecutive_offsets(open_broker, client):
    broker = open_broker()
    app = App(broker=client(broker))
    results = app.producer.send_batch("orders", [
        BatchMessage(b"first", tags="created", keys=["order-1", "customer-7"],
                     properties={"source": "shop"}, unique_key="order-1:created"),
        b"second",
        "third",
    ])

    assert len(results) == 3
    assert len({result.queue_id for result in results}) == 1
    first = results[0].queue_offset
    assert [result.queue_offset for result in results] == [first, first + 1, first + 2]
    assert results[0].msg_id == "order-1:created"
    assert len({result.msg_id for result in results}) == 3
    assert len({result.log_position for result in results}) == 3

    seen: list[ConsumedMessage] = []
    consumer = App(broker=broker)
    consumer.handler(topic="orders", consumer_group="billing", consume_from="first")(
        seen.append)
    InlineRunner(consumer).run_until_idle()
    assert [bytes(message.body) for message in seen] == [b"first", b"second", b"third"]
    assert [message.msg_id for message in seen] == [result.msg_id for result in results]
    assert (seen[0].tags, sorted(seen[0].keys)) == ("created", ["customer-7", "order-1"])
    assert seen[0].properties["source"] == "shop"
    assert seen[1].tags is None and "source" not in seen[1].properties


@pytest.mark.parametrize(("bad", "error"), [
    (BatchMessage(b""), "body is empty"),
    (BatchMessage(b"x", properties={"UNIQ_KEY": "k"}), "unique_key="),
    (BatchMessage(b"x", properties={"DELAY": "2"}), "delay_level="),
    (BatchMessage(b"x", unique_key="a\x01b"), "unique_key"),
])
def test_one_bad_message_refuses_the_batch_and_nothing_is_sent(open_broker, bad, error):
    broker = open_broker()
    app = App(broker=broker)
    with pytest.raises(InvalidMessageError, match=error):
        app.producer.send_batch("orders", [b"fine", bad, b"fine too"])
    assert written(broker) == (0, {})


@pytest.mark.parametrize("body", [5, [104, 105], None])
def test_a_body_that_is_not_bytes_refuses_the_batch(open_broker, client, body):
    """As ``send`` refuses it: never turned into bytes (``bytes(5)`` is five NULs)."""
    broker = open_broker()
    app = App(broker=client(broker))
    with pytest.raises(InvalidMessageError,
                       match=f"body must be bytes, got {type(body).__name__}"):
        app.producer.send_batch("orders", [b"fine", BatchMessage(body)])
    assert written(broker) == (0, {})


def test_an_empty_batch_is_refused(open_broker):
    broker = open_broker()
    with pytest.raises(InvalidMessageError, match="at least one message"):
        App(broker=broker).producer.send_batch("orders", [])
    assert written(broker) == (0, {})


def test_a_batch_over_the_size_of_one_send_is_refused(open_broker):
    """Each body fits a message; together they are over the 4 MiB one send carries (a remote
    client counts the encoded batch, properties included, as RocketMQ brokers do)."""
    broker = open_broker()
    with pytest.raises(InvalidMessageError, match="over the 4,194,304-byte limit of one send"):
        App(broker=broker).producer.send_batch("orders", [b"x" * (3 << 20), b"y" * (2 << 20)])
    assert written(broker) == (0, {})


def test_send_batch_async_sends_off_the_callers_loop(open_broker, client):
    broker = open_broker()
    app = App(broker=client(broker))

    async def produce() -> tuple[list, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticking = asyncio.create_task(ticker())
        results = await app.producer.send_batch_async("orders", [b"a", "b", b"c"])
        with pytest.raises(InvalidMessageError, match="unique_key="):
            await app.producer.send_batch_async("orders", [BatchMessage(
                b"x", properties={"UNIQ_KEY": "k"})])
        ticking.cancel()
        return results, ticks

    results, ticks = asyncio.run(produce())
    assert len({result.queue_id for result in results}) == 1
    first = results[0].queue_offset
    assert [result.queue_offset for result in results] == [first, first + 1, first + 2]
    assert ticks > 0  # the loop ran while the batch was sent
