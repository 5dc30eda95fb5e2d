"""Flush modes and fail-stop: SYNC group flush (durable before return, or an explicit timeout
status), ASYNC periodic flush with the page rule, the checkpoint the flush services keep, and a
store that stops accepting writes — but keeps serving reads — after an I/O error."""

from __future__ import annotations

import errno
import threading
import time

import pytest

from storage_engine import (
    FlushConfig,
    FlushMode,
    GetStatus,
    Message,
    PutStatus,
    StorageIOError,
    StoreNotWritableError,
    verify_store,
)
from storage_engine import segment as segment_module
from tests.storage_engine.conftest import put_all, read_queue, small_config

TOPIC = "orders"


def _sync_config(tmp_path, **flush):
    return small_config(tmp_path / "store", tiny=False,
                        flush=FlushConfig(mode=FlushMode.SYNC, **flush))


def test_sync_put_returns_after_its_bytes_are_flushed(tmp_path, open_store):
    store = open_store(_sync_config(tmp_path))
    results = [store.put_message(Message(TOPIC, b"x" * 500), 0) for _ in range(50)]
    assert {r.status for r in results} == {PutStatus.PUT_OK}
    end = results[-1].log_position + results[-1].store_size
    assert store.log_flusher.flushed_position >= end
    assert store.commit_log.segments.last.flushed_position >= end
    assert store.stats()["flush"]["flush_count"] >= 1


def test_sync_flush_groups_concurrent_appends(tmp_path, open_store):
    """32 threads putting at once share flushes: far fewer fdatasyncs than messages."""
    store = open_store(_sync_config(tmp_path))
    statuses: list[PutStatus] = []
    start = threading.Barrier(32)

    def produce(queue_id: int) -> None:
        start.wait()
        for _ in range(20):
            statuses.append(store.put_message(Message(TOPIC, b"y" * 100), queue_id % 4).status)

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses == [PutStatus.PUT_OK] * 640
    assert store.stats()["flush"]["flush_count"] < 640
    assert store.wait_dispatched()
    assert sum(store.max_offset(TOPIC, q) for q in range(4)) == 640


def _produce_in_threads(store, thread_count: int, puts_each) -> list[PutStatus]:
    """``thread_count`` threads, released together, each putting ``puts_each(index)`` messages
    (an int, the same for all, or a callable); returns every status."""
    statuses: list[PutStatus] = []
    start = threading.Barrier(thread_count)
    counts = puts_each if callable(puts_each) else (lambda _index: puts_each)

    def produce(index: int) -> None:
        start.wait()
        for _ in range(counts(index)):
            statuses.append(store.put_message(Message(TOPIC, b"g" * 100), index % 4).status)

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(thread_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def test_sync_flush_gathers_the_whole_group_before_each_sync(tmp_path, open_store):
    """With a generous gather time every sync waits until the threads the last one released
    wait again: 3 threads x 30 puts take about 30 syncs, not the 45-60 of alternating cohorts.
    (If the first group formed in parts, one thread ends a round early and the last gather
    times out once.)"""
    store = open_store(_sync_config(tmp_path, group_gather_us=1_000_000))
    assert _produce_in_threads(store, 3, 30) == [PutStatus.PUT_OK] * 90
    assert store.stats()["flush"]["flush_count"] <= 32
    assert store.log_flusher.gather_timeouts <= 1


def test_sync_flush_gather_gives_up_once_when_the_group_shrinks(tmp_path, open_store):
    """A thread that stops putting costs the others one gather timeout, not one per sync."""
    store = open_store(_sync_config(tmp_path, group_gather_us=100_000))
    statuses = _produce_in_threads(store, 2, lambda index: 40 if index == 0 else 3)
    assert statuses == [PutStatus.PUT_OK] * 43
    assert store.log_flusher.gather_timeouts <= 2  # per sync, it would be about 37


def test_sync_flush_never_gathers_for_a_lone_or_late_put(tmp_path, open_store):
    """Gathering waits only until group_gather_us after the last sync: a put arriving later
    (or with gathering off) is synced at once."""
    store = open_store(_sync_config(tmp_path, group_gather_us=200_000))
    assert _produce_in_threads(store, 4, 10) == [PutStatus.PUT_OK] * 40
    time.sleep(0.3)  # past the gather window of the last sync
    timeouts = store.log_flusher.gather_timeouts  # a gather for it would time out: +1
    assert store.put_message(Message(TOPIC, b"late"), 0).status is PutStatus.PUT_OK
    assert store.log_flusher.gather_timeouts == timeouts
    off = open_store(_sync_config(tmp_path / "off", group_gather_us=0))
    assert _produce_in_threads(off, 4, 10) == [PutStatus.PUT_OK] * 40
    assert off.log_flusher.gather_timeouts == 0


def test_sync_timeout_reports_stored_but_not_durable(tmp_path, open_store):
    """With the flusher stopped, a put waits ``sync_timeout_ms`` and says FLUSH_DISK_TIMEOUT —
    never PUT_OK. Consumers do not see the unflushed record; once the flusher runs again they
    do."""
    store = open_store(_sync_config(tmp_path, sync_timeout_ms=200))
    (before,) = put_all(store, [Message(TOPIC, b"durable")])
    store.log_flusher.stop()
    late = store.put_message(Message(TOPIC, b"late"), 0)
    assert late.status is PutStatus.FLUSH_DISK_TIMEOUT
    assert not late.is_durable_confirmed
    assert store.log_flusher.flushed_position <= late.log_position
    result = store.get_message("g", TOPIC, 0, 1)
    assert result.status is GetStatus.OFFSET_OVERFLOW_ONE  # dispatch stops at the flushed end
    assert store.read_message(late.log_position).body == b"late"  # stored, readable by position
    store.log_flusher.start()
    assert store.wait_dispatched()
    assert [v.body for v in read_queue(store, TOPIC)] == [b"durable", b"late"]
    assert before.status is PutStatus.PUT_OK


def test_wait_false_property_does_not_wait_for_the_flush(tmp_path, open_store):
    store = open_store(_sync_config(tmp_path, sync_timeout_ms=5000))
    store.log_flusher.stop()
    result = store.put_message(Message(TOPIC, b"fire", properties={"WAIT": "false"}), 0)
    assert result.status is PutStatus.PUT_OK
    assert store.log_flusher.flushed_position <= result.log_position
    store.log_flusher.start()


def test_async_flush_follows_the_page_rule_and_the_thorough_interval(tmp_path, open_store,
                                                                     clock):
    config = small_config(tmp_path / "store", tiny=False, flush=FlushConfig(
        mode=FlushMode.ASYNC, interval_ms=3_600_000, least_pages=4,
        thorough_interval_ms=10_000))
    store = open_store(config, clock=clock)
    flusher = store.log_flusher
    put_all(store, [Message(TOPIC, b"z" * 1000) for _ in range(8)])  # ~2 pages dirty
    flushed = flusher.flushed_position
    flusher.run_once(clock.now_ms())
    assert flusher.flushed_position == flushed  # fewer than 4 dirty pages: no flush
    put_all(store, [Message(TOPIC, b"z" * 1000) for _ in range(12)])  # now > 4 pages
    flusher.run_once(clock.now_ms())
    assert flusher.flushed_position == store.commit_log.max_position
    (last,) = put_all(store, [Message(TOPIC, b"tail")])
    clock.advance(10_000)
    flusher.run_once(clock.now_ms())  # thorough: regardless of pages
    assert flusher.flushed_position == last.log_position + last.store_size
    assert flusher.flushed_timestamp_ms == last.store_timestamp_ms


def test_queue_flush_persists_the_checkpoint(tmp_path, open_store, clock):
    config = small_config(tmp_path / "store", tiny=False)
    store = open_store(config, clock=clock)
    (first,) = put_all(store, [Message(TOPIC, b"a")])
    store.log_flusher.flush(0)
    store.queue_flusher.flush(thorough=True)
    state = store.checkpoint.load()  # re-read from disk
    assert state.log_flushed_timestamp_ms == first.store_timestamp_ms
    assert state.queue_flushed_timestamp_ms == first.store_timestamp_ms
    assert state.confirm_position == first.log_position + first.store_size


# ---- fail-stop ------------------------------------------------------------------------------
# A failing fdatasync cannot be produced on a healthy disk, so these tests replace it with a
# named fake that raises EIO: the one fault the standards allow to be simulated.

class FailingFdatasync:
    """Stand-in for ``os.fdatasync`` that raises EIO and counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, fd: int) -> None:
        self.calls += 1
        raise OSError(errno.EIO, "Input/output error (simulated)")


@pytest.fixture
def failing_fdatasync(monkeypatch) -> FailingFdatasync:
    fake = FailingFdatasync()
    monkeypatch.setattr(segment_module.os, "fdatasync", fake)
    return fake


def test_sync_flush_error_stops_writes_keeps_reads_and_is_not_retried(tmp_path, open_store,
                                                                      monkeypatch):
    store = open_store(_sync_config(tmp_path), verify=False)
    (kept,) = put_all(store, [Message(TOPIC, b"before")])
    fake = FailingFdatasync()
    monkeypatch.setattr(segment_module.os, "fdatasync", fake)
    with pytest.raises(StorageIOError, match="flush failed"):
        store.put_message(Message(TOPIC, b"during"), 0)
    calls = fake.calls
    with pytest.raises(StoreNotWritableError, match="I/O error"):
        store.put_message(Message(TOPIC, b"after"), 0)
    assert store.read_message(kept.log_position).body == b"before"
    assert read_queue(store, TOPIC)[0].body == b"before"
    assert store.stats()["failure"] is not None
    store.close()  # no flush attempted: the failure stands
    assert fake.calls == calls == 1
    assert (store.root_dir / "abort").exists()

    monkeypatch.undo()
    reopened = open_store(store.config)
    assert reopened.stats()["recovery"]["clean_shutdown"] is False
    assert [v.body for v in read_queue(reopened, TOPIC)][:1] == [b"before"]
    reopened.close()
    assert verify_store(store.root_dir, store.config) == []


def test_async_flush_error_puts_the_store_in_fail_stop(tmp_path, open_store, monkeypatch):
    config = small_config(tmp_path / "store", tiny=False, flush=FlushConfig(
        interval_ms=5, least_pages=0))
    store = open_store(config, verify=False)
    put_all(store, [Message(TOPIC, b"x")])
    fake = FailingFdatasync()
    monkeypatch.setattr(segment_module.os, "fdatasync", fake)
    put_all(store, [Message(TOPIC, b"y")])
    store.log_flusher._thread.join(5)  # the service loop ends on the error
    assert store.log_flusher.failure is not None
    with pytest.raises(StoreNotWritableError):
        store.put_message(Message(TOPIC, b"z"), 0)
    assert [v.body for v in read_queue(store, TOPIC)] == [b"x", b"y"]
    assert fake.calls == 1


def test_consume_queue_flush_error_puts_the_store_in_fail_stop(tmp_path, open_store,
                                                               monkeypatch):
    config = small_config(tmp_path / "store", tiny=False, flush=FlushConfig(
        interval_ms=3_600_000, consume_queue_interval_ms=5, consume_queue_least_pages=0))
    store = open_store(config, verify=False)
    monkeypatch.setattr(segment_module.os, "fdatasync", FailingFdatasync())
    put_all(store, [Message(TOPIC, b"x")])
    store.queue_flusher._thread.join(5)
    assert store.queue_flusher.failure is not None
    with pytest.raises(StoreNotWritableError):
        store.put_message(Message(TOPIC, b"y"), 0)
    assert read_queue(store, TOPIC)[0].body == b"x"
