"""Dispatch in runs: records from the append feed and from the log reach every queue and the
key index exactly once, in order, whatever mix of the two a run takes.

A feed that holds 4 records (instead of 65 536) overflows at once, so dispatch keeps switching
between records appended just now and records it decodes from the log, and drops feed records
it has already decoded; ``_take_from_feed`` is checked on its own too.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

import pytest

from postbox.storage_engine import Message, MessageStore
from postbox.storage_engine.formats import DispatchRecord
from postbox.storage_engine.store import commit_log
from postbox.storage_engine.store.dispatch import _take_from_feed
from tests.support.small_store import small_store_config

QUEUES = 8


def feed_record(position: int, size: int = 10) -> DispatchRecord:
    return DispatchRecord("T", 0, position // size, position, size, 0, 1, None, None, None, {})


@pytest.mark.parametrize(("positions", "position", "end", "count", "taken", "left"), [
    ([0, 10, 20], 0, 100, 10, [0, 10, 20], []),
    ([0, 10, 20], 10, 100, 10, [10, 20], []),  # 0 was dispatched from the log: dropped
    ([0, 10, 20], 30, 100, 10, [], []),  # all dispatched already
    ([0, 30], 0, 100, 10, [0], [30]),  # a gap: the log has what lies between
    ([0, 10, 20], 0, 100, 2, [0, 10], [20]),  # the run is full
    ([0, 10, 20], 0, 15, 10, [0, 10], [20]),  # 20 is past where dispatch may go
    ([20], 10, 100, 10, [], [20]),  # the feed starts later: nothing taken
])
def test_take_from_feed(positions, position, end, count, taken, left) -> None:
    feed = deque(feed_record(p) for p in positions)
    records = _take_from_feed(feed, position, end, count)
    assert [r.log_position for r in records] == taken
    assert [r.log_position for r in feed] == left


def test_a_feed_that_overflows_still_dispatches_every_record_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commit_log, "DISPATCH_FEED_MAX", 4)
    grown: dict[int, list[int]] = {q: [] for q in range(QUEUES)}
    with MessageStore.open(small_store_config(tmp_path)) as store:
        store.add_arrival_listener(lambda _topic, queue_id, offset: grown[queue_id].append(offset))
        assert store.commit_log.dispatch_feed.maxlen == 4
        for batch in range(60):
            messages = [Message("Runs", f"{batch}-{i}".encode(), keys=[f"k{batch}-{i}"])
                        for i in range(1 + batch % 7)]
            if batch % 2:
                store.put_messages(messages, queue_id=batch % QUEUES)
            else:
                for message in messages:
                    store.put_message(message, queue_id=batch % QUEUES)
        assert store.wait_dispatched(timeout_ms=30_000)
        for queue_id in range(QUEUES):
            expected = [f"{b}-{i}".encode() for b in range(60) if b % QUEUES == queue_id
                        for i in range(1 + b % 7)]
            got = store.get_message("g", "Runs", queue_id, 0, max_count=1000).messages
            assert [view.body for view in got] == expected
            assert [view.queue_offset for view in got] == list(range(len(expected)))
            assert grown[queue_id] == sorted(grown[queue_id])
            assert grown[queue_id][-1] == len(expected)
        for batch in (0, 31, 59):
            assert [view.body for view in store.query_by_key("Runs", f"k{batch}-0")] == [
                f"{batch}-0".encode()]
