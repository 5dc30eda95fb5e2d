"""Flush modes and fail-stop: SYNC group flush (durable before return, or an explicit timeout
status), ASYNC periodic flush with the page rule, the checkpoint the flush services keep, and a
store that stops accepting writes — but keeps serving reads — after an I/O error."""

from __future__ import annotations

import errno
import threading

import pytest

from postbox.storage_engine import (
    FlushConfig,
    FlushMode,
    GetStatus,
    Message,
    PutStatus,
    StorageIOError,
    verify_store,
)
from postbox.storage_engine.errors import StoreNotWritableError
from postbox.storage_engine.store import segment as segment_module
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


def test_a_lone_producer_syncs_its_own_puts(tmp_path, open_store):
    """A put that finds no sync running leads one itself, on its own thread: with the
    service's thread stopped, single puts still return durable, one sync each."""
    store = open_store(_sync_config(tmp_path, sync_timeout_ms=10_000))
    store.log_flusher.stop()
    syncs = store.stats()["flush"]["flush_count"]
    results = [store.put_message(Message(TOPIC, b"own"), 0) for _ in range(5)]
    assert [r.status for r in results] == [PutStatus.PUT_OK] * 5
    assert store.log_flusher.flushed_position == results[-1].log_position + results[-1].store_size
    assert store.stats()["flush"]["flush_count"] == syncs + 5
    store.log_flusher.start()


def test_producers_hand_the_sync_on_without_the_service_thread(tmp_path, open_store):
    """Leadership passes from one waiting producer to the next: 8 threads finish 400 puts
    with the service's thread stopped, sharing syncs."""
    store = open_store(_sync_config(tmp_path, sync_timeout_ms=10_000))
    store.log_flusher.stop()
    assert _produce_in_threads(store, 8, 50) == [PutStatus.PUT_OK] * 400
    assert store.stats()["flush"]["flush_count"] < 400
    store.log_flusher.start()
    assert store.wait_dispatched()
    assert sum(store.max_offset(TOPIC, q) for q in range(4)) == 400


class SlowDisk:
    """Stand-in for ``os.fdatasync`` on a disk that hangs: the first call blocks until
    ``release`` (a stalled device cannot be produced on demand), later calls sync for real."""

    def __init__(self, real) -> None:
        self._real = real
        self.entered = threading.Event()
        self._release = threading.Event()
        self._first = True

    def __call__(self, fd: int) -> None:
        if self._first:
            self._first = False
            self.entered.set()
            assert self._release.wait(10)
        self._real(fd)

    def release(self) -> None:
        self._release.set()


def test_sync_timeout_reports_stored_but_not_durable(tmp_path, open_store, monkeypatch):
    """While a sync hangs, a put waiting behind it returns after ``sync_timeout_ms`` with
    FLUSH_DISK_TIMEOUT — never PUT_OK — and consumers do not see it; once the disk answers,
    the leader's put is PUT_OK and the late record is synced and delivered too."""
    store = open_store(_sync_config(tmp_path, sync_timeout_ms=200))
    (before,) = put_all(store, [Message(TOPIC, b"durable")])
    disk = SlowDisk(segment_module.os.fdatasync)
    monkeypatch.setattr(segment_module.os, "fdatasync", disk)
    leader: list = []
    hung = threading.Thread(target=lambda: leader.append(
        store.put_message(Message(TOPIC, b"leader"), 0)))
    hung.start()
    assert disk.entered.wait(10)  # the leader's sync hangs in the disk
    late = store.put_message(Message(TOPIC, b"late"), 0)
    assert late.status is PutStatus.FLUSH_DISK_TIMEOUT
    assert not late.is_durable_confirmed
    assert store.log_flusher.flushed_position <= late.log_position
    assert store.get_message("g", TOPIC, 0, 1).status is GetStatus.OFFSET_OVERFLOW_ONE
    assert store.read_message(late.log_position).body == b"late"  # stored, readable
    disk.release()
    hung.join(10)
    assert leader[0].status is PutStatus.PUT_OK  # the leader waited for the disk itself
    assert store.wait_dispatched()
    assert [v.body for v in read_queue(store, TOPIC)] == [b"durable", b"leader", b"late"]
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
