"""Tests for ``framework.process_queue``: the commit rule of §12.4, flow control, orderly mode.

The commit property is checked with hypothesis over random pull batches and completion orders;
hypothesis prints the failing example and its seed on a failure.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postbox.framework.process_queue import (
    PULL_THRESHOLD_COUNT_DEFAULT,
    PULL_THRESHOLD_SIZE_BYTES_DEFAULT,
    ProcessQueue,
)


@dataclass(frozen=True)
class FakeMessage:
    queue_offset: int
    body: bytes = b"x"
    reconsume_count: int = 0


def messages(offsets, body: bytes = b"x") -> list[FakeMessage]:
    return [FakeMessage(offset, body) for offset in offsets]


def offsets_of(batch) -> list[int]:
    return [message.queue_offset for message in batch]


# ---- the commit rule ---------------------------------------------------------------------

@settings(deadline=None, max_examples=200)
@given(data=st.data(), first_offset=st.integers(0, 10**12), count=st.integers(1, 60))
def test_commit_offset_never_passes_an_in_flight_message(data, first_offset, count):
    offsets = list(range(first_offset, first_offset + count))
    add_order = data.draw(st.permutations(offsets), label="add order")
    queue: ProcessQueue[FakeMessage] = ProcessQueue()
    in_flight: set[int] = set()
    added_max = None
    position = 0
    while position < len(add_order) or in_flight:
        if position < len(add_order):
            batch_size = data.draw(st.integers(1, 8), label="pull batch")
            batch = add_order[position:position + batch_size]
            position += len(batch)
            queue.add(messages(batch))
            in_flight.update(batch)
            added_max = max([*batch, added_max if added_max is not None else batch[0]])
        finish_count = data.draw(st.integers(0, len(in_flight)), label="finished")
        finished = data.draw(st.permutations(sorted(in_flight)), label="completion order")
        finished = finished[:finish_count] if position < len(add_order) else finished
        for done in finished:
            committed = queue.remove([FakeMessage(done)])
            in_flight.discard(done)
            assert committed is not None
            assert all(committed <= offset for offset in in_flight)
            assert committed == (min(in_flight) if in_flight else added_max + 1)
        assert queue.count == len(in_flight)
    assert queue.remove([]) == first_offset + count
    assert queue.count == 0
    assert queue.size_bytes == 0


def test_a_slow_message_holds_the_commit_offset_back():
    queue: ProcessQueue[FakeMessage] = ProcessQueue()
    queue.add(messages(range(100, 110)))
    assert queue.remove(messages(range(101, 110))) == 100
    assert queue.remove(messages([100])) == 110


def test_remove_before_anything_was_added_returns_none():
    queue: ProcessQueue[FakeMessage] = ProcessQueue()
    assert queue.remove([]) is None
    assert queue.remove(messages([3])) is None


def test_removing_an_absent_offset_is_harmless():
    queue: ProcessQueue[FakeMessage] = ProcessQueue()
    queue.add(messages([5, 6], body=b"abc"))
    assert queue.remove(messages([42, 5, 5])) == 6
    assert (queue.count, queue.size_bytes) == (1, 3)
    assert queue.remove(messages([6])) == 7
    assert queue.remove(messages([6])) == 7


# ---- counts, sizes, span -----------------------------------------------------------------

def test_counts_sizes_span_and_duplicates():
    queue: ProcessQueue[FakeMessage] = ProcessQueue()
    assert (queue.count, queue.size_bytes, queue.span, queue.max_offset_seen) == (0, 0, 0, None)
    queue.add([FakeMessage(10, b"a" * 10), FakeMessage(12, b"b" * 5)])
    queue.add([FakeMessage(12, b"ignored" * 100), FakeMessage(11, b"")])
    assert (queue.count, queue.size_bytes, queue.span, queue.max_offset_seen) == (3, 15, 2, 12)
    queue.remove([FakeMessage(10)])
    assert (queue.count, queue.size_bytes, queue.span) == (2, 5, 1)
    queue.remove([FakeMessage(11), FakeMessage(12)])
    assert (queue.count, queue.size_bytes, queue.span, queue.max_offset_seen) == (0, 0, 0, 12)


def test_is_full_triggers_only_when_a_threshold_is_exceeded():
    assert PULL_THRESHOLD_COUNT_DEFAULT == 1000
    assert PULL_THRESHOLD_SIZE_BYTES_DEFAULT == 100 * 1024 * 1024
    queue: ProcessQueue[FakeMessage] = ProcessQueue()
    queue.add(messages(range(1000)))
    assert not queue.is_full()
    queue.add(messages([1000]))
    assert queue.is_full()
    assert not queue.is_full(max_count=1001)

    sized: ProcessQueue[FakeMessage] = ProcessQueue()
    sized.add([FakeMessage(0, b"x" * 100)])
    assert not sized.is_full(max_size_bytes=100)
    sized.add([FakeMessage(1, b"y")])
    assert sized.is_full(max_size_bytes=100)


def test_plain_attributes_start_at_zero_and_drop_is_sticky():
    queue: ProcessQueue[FakeMessage] = ProcessQueue()
    assert (queue.last_pull_ms, queue.last_consume_ms, queue.lock_renewed_ms,
            queue.suspended_until_ms) == (0, 0, 0, 0)
    assert queue.locked is False
    assert queue.dropped is False
    queue.add(messages([0, 1]))
    queue.drop()
    assert queue.dropped is True
    assert queue.remove(messages([0])) == 1  # still works; the caller must not commit it


# ---- orderly mode ------------------------------------------------------------------------

def shuffled_queue(offsets) -> ProcessQueue[FakeMessage]:
    queue: ProcessQueue[FakeMessage] = ProcessQueue()
    batch = messages(offsets, body=b"12")
    random.Random(3).shuffle(batch)
    queue.add(batch)
    return queue


def test_take_and_commit_walk_the_queue_in_offset_order():
    queue = shuffled_queue(range(10))
    assert offsets_of(queue.take(3)) == [0, 1, 2]
    assert (queue.count, queue.size_bytes) == (10, 20)  # taken messages are still in flight
    assert queue.commit() == 3
    assert (queue.count, queue.size_bytes) == (7, 14)
    assert offsets_of(queue.take(100)) == list(range(3, 10))
    assert queue.take(1) == []
    assert queue.commit() == 10
    assert queue.commit() is None
    assert (queue.count, queue.size_bytes) == (0, 0)


def test_rollback_returns_the_same_batch_next_time():
    queue = shuffled_queue(range(5))
    first = queue.take(3)
    queue.rollback()
    assert queue.take(3) == first
    assert queue.count == 5


def test_reconsume_later_retries_in_place_before_newer_messages():
    queue = shuffled_queue(range(6))
    batch = queue.take(3)
    retry = [FakeMessage(m.queue_offset, m.body, m.reconsume_count + 1) for m in batch]
    queue.make_reconsume_later(retry)
    again = queue.take(3)
    assert again == retry
    assert queue.commit() == 3
    assert offsets_of(queue.take(10)) == [3, 4, 5]


def test_commit_never_skips_a_message_put_back_below_it():
    queue = shuffled_queue(range(5))
    batch = queue.take(3)
    queue.make_reconsume_later(batch[:1])
    assert queue.commit() == 0
    assert queue.count == 3
    assert offsets_of(queue.take(10)) == [0, 3, 4]


def test_reconsume_later_ignores_messages_that_are_not_taken():
    queue = shuffled_queue(range(3))
    queue.make_reconsume_later(messages([1, 99]))
    assert queue.count == 3
    assert offsets_of(queue.take(10)) == [0, 1, 2]


def test_span_and_commit_offset_include_taken_messages():
    queue = shuffled_queue(range(4))
    queue.take(2)
    assert queue.span == 3
    assert queue.remove(messages([2, 3])) == 0


def test_take_rejects_a_batch_size_below_one():
    with pytest.raises(ValueError, match="batch_size"):
        ProcessQueue().take(0)


# ---- threads -------------------------------------------------------------------------------

def test_concurrent_adds_removes_and_reads_stay_consistent():
    queue: ProcessQueue[FakeMessage] = ProcessQueue()
    thread_count, per_thread = 6, 2_000
    start = threading.Barrier(thread_count + 1)
    stop_reading = threading.Event()
    failures: list[str] = []

    def work(index: int) -> None:
        rng = random.Random(index)
        own = messages(range(index * per_thread, (index + 1) * per_thread), body=b"abcd")
        start.wait()
        for low in range(0, per_thread, 50):
            batch = own[low:low + 50]
            queue.add(batch)
            rng.shuffle(batch)
            committed = queue.remove(batch[:25])
            if committed is None:
                failures.append("remove returned None after an add")
            queue.remove(batch[25:])

    def read() -> None:
        start.wait()
        while not stop_reading.is_set():
            if queue.size_bytes < 0 or queue.span < 0:
                failures.append("negative size or span")
            queue.is_full()

    workers = [threading.Thread(target=work, args=(i,)) for i in range(thread_count)]
    reader = threading.Thread(target=read)
    for thread in [*workers, reader]:
        thread.start()
    for thread in workers:
        thread.join()
    stop_reading.set()
    reader.join()

    assert failures == []
    assert (queue.count, queue.size_bytes, queue.span) == (0, 0, 0)
    assert queue.remove([]) == thread_count * per_thread
