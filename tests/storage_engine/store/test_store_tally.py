"""The store's monitoring tallies (``store/store_tally.py``) on a real store: puts per topic
counted by dispatch from the log end found at open (a reopen's re-dispatch is not counted
again), bytes equal to the records written, flush durations tallied per flush that made bytes
durable, and the latency buckets themselves."""

from __future__ import annotations

from pathlib import Path

import pytest

from postbox.storage_engine import FlushMode, LatencyTally, Message, MessageStore
from tests.support.small_store import small_store_config


def test_puts_are_counted_per_topic_from_the_open_position(tmp_path: Path) -> None:
    config = small_store_config(tmp_path / "store")
    with MessageStore.open(config) as store:
        for number in range(3):
            store.put_message(Message(topic="orders", body=b"x" * (10 + number)), queue_id=0)
        store.put_message(Message(topic="audit", body=b"y"), queue_id=1)
        assert store.wait_dispatched()
        puts = store.put_tally.snapshot()
        assert {topic: counts.messages for topic, counts in puts.items()} == {
            "orders": 3, "audit": 1}
        assert sum(counts.bytes for counts in puts.values()) == store.commit_log.max_position
        end = store.commit_log.max_position
    # an unclean reopen re-dispatches from the checkpoint: those records are not new puts
    (config.root_dir / "abort").write_bytes(b"")
    with MessageStore.open(config) as store:
        assert store.put_tally.start_position == end
        store.put_message(Message(topic="orders", body=b"z"), queue_id=0)
        assert store.wait_dispatched()
        assert store.put_tally.snapshot()["orders"].messages == 1
        assert "audit" not in store.put_tally.snapshot()


def test_sync_flushes_are_tallied(tmp_path: Path) -> None:
    config = small_store_config(tmp_path / "store")
    config = config.replace(flush=config.flush.__class__(mode=FlushMode.SYNC))
    with MessageStore.open(config) as store:
        for _ in range(5):  # one sync each: every put waits until it is durable
            store.put_message(Message(topic="orders", body=b"x"), queue_id=0)
        snapshot = store.log_flusher.flush_latency.snapshot()
        assert snapshot.observations == store.log_flusher.flush_count >= 5
        assert snapshot.sum_s > 0
        assert sum(snapshot.bucket_counts) == snapshot.observations


def test_latency_buckets() -> None:
    tally = LatencyTally((0.01, 0.1))
    for seconds in (0.005, 0.01, 0.05, 3.0, -1.0):
        tally.observe(seconds)
    snapshot = tally.snapshot()
    assert snapshot.bucket_counts == (3, 1, 1)  # <= 0.01 (a clock step counts as 0), <= 0.1, +Inf
    assert snapshot.observations == 5
    assert snapshot.sum_s == pytest.approx(3.065)
    with pytest.raises(ValueError, match="increasing"):
        LatencyTally((0.1, 0.01))
