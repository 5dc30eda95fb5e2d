"""Long polling: ``ArrivalWaiter`` alone, and ``Broker.pull`` / ``wait_for_arrival`` on real
stores with dispatch running on its own thread.

Wake-ups are checked to come well under the timeout; timeouts use short real waits (< 1 s).
"A waiter is now blocked" is observed through the waiter's watch count or the ``cancel`` hook
(called at each check), never by sleeping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from postbox.storage_engine import Broker, GetStatus, Message
from postbox.storage_engine.broker.long_polling import ArrivalWaiter
from postbox.storage_engine.errors import InvalidQueueError
from tests.support.polling import wait_until

TOPIC = "orders"
GROUP = "billing"
LONG_MS = 5_000  # a timeout the tests must never reach
SHORT_MS = 150
BACKGROUND_WAIT_S = 5.0  # generous bound for a background call to finish; tests finish far sooner


@pytest.fixture
def broker_topics() -> dict[str, int]:
    """``broker`` (tests/support/brokers.py) with the test topic on two queues."""
    return {TOPIC: 2}


class Background:
    """Run a callable on a thread; ``result()`` joins and returns (or re-raises)."""

    def __init__(self, target: Callable[[], object]) -> None:
        self._target = target
        self._value: object = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._target()
        except BaseException as error:  # handed to the test thread by result()
            self._error = error

    def result(self, timeout_s: float = BACKGROUND_WAIT_S) -> object:
        """The callable's return value (raises what it raised)."""
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "background call did not finish"
        if self._error is not None:
            raise self._error
        return self._value


def _timed(call):
    started = time.monotonic()
    value = call()
    return value, time.monotonic() - started


def _waiting(broker: Broker, count: int = 1) -> bool:
    return wait_until(lambda: broker._waiter.watched_count() >= count)


# ---- ArrivalWaiter -------------------------------------------------------------------------

class _Offsets:
    def __init__(self) -> None:
        self.max = {}

    def __call__(self, topic: str, queue_id: int) -> int:
        return self.max.get((topic, queue_id), 0)


def test_waiter_returns_at_once_when_the_queue_is_already_ahead():
    offsets = _Offsets()
    offsets.max[("t", 0)] = 3
    waiter = ArrivalWaiter(offsets, 10_000)
    assert waiter.wait({("t", 1): 0, ("t", 0): 2}, LONG_MS)
    assert waiter.watched_count() == 0


def test_waiter_wakes_on_an_arrival_for_a_watched_queue():
    offsets = _Offsets()
    waiter = ArrivalWaiter(offsets, 10_000)
    background = Background(lambda: _timed(lambda: waiter.wait({("t", 0): 0}, LONG_MS)))
    assert wait_until(lambda: waiter.watched_count() == 1)
    waiter.on_arrival("t", 1, 1)  # another queue: nothing to wake
    offsets.max[("t", 0)] = 1
    waiter.on_arrival("t", 0, 1)
    arrived, elapsed_s = background.result()
    assert arrived and elapsed_s < LONG_MS / 1000 / 2
    assert waiter.watched_count() == 0


def test_waiter_times_out_and_caps_the_timeout():
    waiter = ArrivalWaiter(_Offsets(), SHORT_MS)
    arrived, elapsed_s = _timed(lambda: waiter.wait({("t", 0): 0}, 60_000))
    assert not arrived
    assert SHORT_MS / 1000 * 0.9 <= elapsed_s < 1.0


def test_wake_all_and_cancel_end_waits_early():
    waiter = ArrivalWaiter(_Offsets(), 10_000)
    background = Background(lambda: _timed(lambda: waiter.wait({("t", 0): 0}, LONG_MS)))
    assert wait_until(lambda: waiter.watched_count() == 1)
    waiter.wake_all()
    arrived, elapsed_s = background.result()
    assert not arrived and elapsed_s < 1.0

    arrived, elapsed_s = _timed(lambda: waiter.wait({("t", 0): 0}, LONG_MS, lambda: True))
    assert not arrived and elapsed_s < 1.0


def test_cancel_set_while_waiting_is_noticed():
    waiter = ArrivalWaiter(_Offsets(), 10_000)
    checked = threading.Event()
    cancelled = threading.Event()

    def cancel() -> bool:
        checked.set()
        return cancelled.is_set()

    background = Background(lambda: _timed(lambda: waiter.wait({("t", 0): 0}, LONG_MS, cancel)))
    assert checked.wait(5)
    cancelled.set()
    arrived, elapsed_s = background.result()
    assert not arrived and elapsed_s < 1.0


# ---- Broker.pull with suspend --------------------------------------------------------------

def test_pull_wakes_when_a_message_is_dispatched(broker: Broker):
    background = Background(lambda: _timed(
        lambda: broker.pull(GROUP, TOPIC, 1, 0, suspend_timeout_ms=LONG_MS)))
    assert _waiting(broker)
    broker.send(Message(TOPIC, b"hello"), queue_id=1)
    result, elapsed_s = background.result()
    assert result.status is GetStatus.FOUND and [m.body for m in result.messages] == [b"hello"]
    assert elapsed_s < LONG_MS / 1000 / 2


def test_pull_wakes_for_a_queue_created_by_its_first_message(broker: Broker):
    topic = "brand-new"
    assert broker.pull(GROUP, topic, 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    background = Background(lambda: broker.pull(GROUP, topic, 0, 0,
                                                suspend_timeout_ms=LONG_MS))
    assert _waiting(broker)
    broker.send(Message(topic, b"first"), queue_id=0)
    result = background.result()
    assert result.status is GetStatus.FOUND and result.messages[0].body == b"first"


def test_pull_times_out_with_nothing_new(broker: Broker):
    broker.send(Message(TOPIC, b"old"), queue_id=0)
    assert broker.store.wait_dispatched()
    result, elapsed_s = _timed(lambda: broker.pull(GROUP, TOPIC, 0, 1,
                                                   suspend_timeout_ms=SHORT_MS))
    assert result.status is GetStatus.OFFSET_OVERFLOW_ONE
    assert SHORT_MS / 1000 * 0.9 <= elapsed_s < 1.0


def test_pull_timeout_is_capped_by_long_polling_max(brokers):
    broker = brokers.open(long_polling_max_ms=SHORT_MS)
    result, elapsed_s = _timed(lambda: broker.pull(GROUP, TOPIC, 0, 0,
                                                   suspend_timeout_ms=60_000))
    assert result.status is GetStatus.NO_MATCHED_LOGIC_QUEUE and elapsed_s < 1.0


def test_pull_keeps_waiting_past_messages_the_filter_rejects(broker: Broker):
    background = Background(lambda: broker.pull(GROUP, TOPIC, 0, 0, tags="a",
                                                suspend_timeout_ms=LONG_MS))
    assert _waiting(broker)
    broker.send(Message(TOPIC, b"b1", tags="b"), queue_id=0)
    broker.send(Message(TOPIC, b"a1", tags="a"), queue_id=0)
    result = background.result()
    assert [m.body for m in result.messages] == [b"a1"] and result.next_offset == 2

    broker.send(Message(TOPIC, b"b2", tags="b"), queue_id=0)
    assert broker.store.wait_dispatched()
    assert broker.pull(GROUP, TOPIC, 0, 2, tags="a").status is GetStatus.NO_MATCHED_MESSAGE
    waited = broker.pull(GROUP, TOPIC, 0, 2, tags="a", suspend_timeout_ms=SHORT_MS)
    # the wait started past b2, so the last read says "nothing new at 3"
    assert (waited.status, waited.next_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, 3)


def test_wake_waiters_and_close_end_pulls_early(brokers):
    broker = brokers.open()
    background = Background(lambda: _timed(
        lambda: broker.pull(GROUP, TOPIC, 0, 0, suspend_timeout_ms=LONG_MS)))
    assert _waiting(broker)
    broker.wake_waiters()
    result, elapsed_s = background.result()
    assert result.status is GetStatus.NO_MATCHED_LOGIC_QUEUE and elapsed_s < 1.0

    background = Background(lambda: _timed(
        lambda: broker.wait_for_arrival({(TOPIC, 0): 0}, LONG_MS)))
    assert _waiting(broker)
    broker.close()
    arrived, elapsed_s = background.result()
    assert not arrived and elapsed_s < 1.0


def test_wait_for_arrival_watches_several_queues(broker: Broker):
    checked = threading.Event()

    def cancel() -> bool:
        checked.set()
        return False

    background = Background(lambda: broker.wait_for_arrival(
        {(TOPIC, 0): 0, (TOPIC, 1): 0, ("other", 0): 0}, LONG_MS, cancel))
    assert checked.wait(5)
    broker.send(Message("other", b"x"), queue_id=0)
    assert background.result() is True
    assert broker.wait_for_arrival({("other", 0): 0}, 0) is True
    assert broker.wait_for_arrival({("other", 0): 1}, 0) is False
    with pytest.raises(InvalidQueueError, match="pair"):
        broker.wait_for_arrival({"other": 0}, 0)
