"""The recovery table (``storage_engine/store/recovery.py``): one test per disk state, each
asserting the exact state the store recovers to — which messages survive, where each queue and
the key index stand, where appends continue — and that ``verify_store`` agrees afterwards.

Unclean stops here are made with ``abandon`` (threads stopped, files released, no close); the
same states produced by a real ``kill -9`` are covered in ``test_crash.py``.
"""

from __future__ import annotations

import os
import random

import pytest

from postbox.storage_engine import (
    CorruptionError,
    FakeClock,
    Message,
    MessageStore,
    PutResult,
    StoreConfig,
    verify_store,
)
from postbox.storage_engine.formats import CheckpointState, encode_checkpoint
from tests.storage_engine.conftest import (
    TINY_SEGMENT_SIZE_BYTES,
    abandon,
    put_all,
    read_queue,
)

TOPIC = "orders"
QUEUES = (0, 1)


def _fill(store: MessageStore, count: int = 160, start: int = 0,
          clock: FakeClock | None = None) -> list[PutResult]:
    """``count`` keyed messages over two queues: several segments, queue files and index
    files (tiny config); with ``clock``, 100 ms apart."""
    results = []
    for i in range(start, start + count):
        message = Message(TOPIC, b"m%05d-" % i + bytes(120), keys=[f"k{i}"], tags=f"t{i % 3}")
        results.append(store.put_message(message, QUEUES[i % 2]))
        if clock is not None:
            clock.advance(100)
    assert store.wait_dispatched()
    return results


def _segments(config: StoreConfig) -> list:
    return sorted((config.root_dir / "commitlog").iterdir())


def _assert_holds_exactly(store: MessageStore, results: list[PutResult]) -> None:
    """The store's queues hold exactly ``results`` (in order) and each is findable by key."""
    for queue_id in QUEUES:
        expected = [r for r in results if r.queue_id == queue_id]
        views = read_queue(store, TOPIC, queue_id)
        assert [(v.log_position, v.queue_offset) for v in views] == [
            (r.log_position, r.queue_offset) for r in expected]
        assert store.max_offset(TOPIC, queue_id) == len(expected)
    for result in results[::7] + results[-3:]:
        body_prefix = store.read_message(result.log_position).body[:7]
        (found,) = store.query_by_key(TOPIC, f"k{int(body_prefix[1:6])}")
        assert found.log_position == result.log_position


def _assert_appends_continue(store: MessageStore, results: list[PutResult]) -> None:
    """New messages take the next queue offsets and the next log position."""
    for queue_id in QUEUES:
        (after,) = put_all(store, [Message(TOPIC, b"after", keys=["after"])], queue_id)
        assert after.queue_offset == sum(1 for r in results if r.queue_id == queue_id)
    assert len(store.query_by_key(TOPIC, "after")) == 2


def _reopen(open_store, config, **kwargs) -> MessageStore:
    store = open_store(config, **kwargs)
    report = store.stats()["recovery"]
    assert report is not None
    return store


# ---- which part of the log is scanned --------------------------------------------------------

def test_clean_shutdown_scans_the_last_three_segments_and_rebuilds_nothing(config, open_store):
    store = open_store(config)
    results = _fill(store)
    store.close()
    store = _reopen(open_store, config)
    report = store.stats()["recovery"]
    assert report["clean_shutdown"] is True
    assert report["scan_start"] == int(_segments(config)[-3].name)
    assert report["redispatched_bytes"] == 0
    _assert_holds_exactly(store, results)
    _assert_appends_continue(store, results)


def test_unclean_stop_scans_from_the_segment_the_checkpoint_names(config, open_store, clock):
    """Checkpoint made durable mid-way (flush + checkpoint), then more writes, then a crash:
    the scan starts at the newest segment whose first record is older than the checkpoint's
    min(log, queue) - 3 s, and everything after it is re-dispatched."""
    store = open_store(config, clock=clock)
    early = _fill(store, 100, clock=clock)
    store.log_flusher.flush(0)
    store.queue_flusher.flush(thorough=True)
    checkpoint = store.checkpoint.state
    assert checkpoint.log_flushed_timestamp_ms == early[-1].store_timestamp_ms
    late = _fill(store, 60, start=100, clock=clock)
    abandon(store)

    store = _reopen(open_store, config, clock=clock)
    report = store.stats()["recovery"]
    assert report["clean_shutdown"] is False
    safe_ms = checkpoint.log_flushed_timestamp_ms - 3000
    scan_start = report["scan_start"]
    assert store.read_message(scan_start).store_timestamp_ms <= safe_ms
    next_segment = scan_start + TINY_SEGMENT_SIZE_BYTES
    assert store.read_message(next_segment).store_timestamp_ms > safe_ms
    assert scan_start > 0 and report["dispatch_start"] <= scan_start
    _assert_holds_exactly(store, early + late)
    _assert_appends_continue(store, early + late)


def test_unclean_stop_without_checkpoint_scans_and_redispatches_the_whole_log(config,
                                                                            open_store):
    store = open_store(config)
    results = _fill(store)
    abandon(store)
    (config.root_dir / "checkpoint").unlink()
    store = _reopen(open_store, config)
    report = store.stats()["recovery"]
    assert (report["scan_start"], report["dispatch_start"]) == (0, 0)
    assert report["redispatched_bytes"] == report["log_end"]
    _assert_holds_exactly(store, results)


def test_garbled_checkpoint_is_ignored_and_the_whole_log_is_rebuilt(config, open_store):
    """Random bytes in the checkpoint (timestamps far in the future or negative) must not
    narrow recovery: the page is distrusted and the whole log is re-dispatched."""
    store = open_store(config)
    results = _fill(store)
    abandon(store)
    (config.root_dir / "checkpoint").write_bytes(random.Random(7).randbytes(4096))
    store = _reopen(open_store, config)
    report = store.stats()["recovery"]
    assert report["checkpoint_trusted"] is False
    assert report["dispatch_start"] == 0
    _assert_holds_exactly(store, results)
    _assert_appends_continue(store, results)


def test_short_checkpoint_reads_as_zero(config, open_store):
    store = open_store(config)
    results = _fill(store, 40)
    abandon(store)
    (config.root_dir / "checkpoint").write_bytes(b"\x01\x02")
    store = _reopen(open_store, config)
    assert store.stats()["recovery"]["dispatch_start"] == 0
    _assert_holds_exactly(store, results)


# ---- the commit log's tail --------------------------------------------------------------------

@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_garbage_from_a_random_position_of_the_last_segment_is_truncated(config, open_store,
                                                                          seed):
    """Garbage written from a random position on: exactly the records that end before it
    survive, the rest of the segment is zeroed, appends continue right there.

    The position falls in a record's header or body: the format's CRC covers the body only,
    so garbage that starts inside a record's properties is not detectable (a RocketMQ
    limitation; ``verify_store`` still reports the tag mismatch it causes)."""
    rng = random.Random(seed)
    store = open_store(config)
    results = _fill(store)
    store.close()
    last = _segments(config)[-1]
    base = int(last.name)
    data = bytearray(last.read_bytes())
    written_end = max(r.log_position + r.store_size for r in results) - base
    victim = rng.choice([r for r in results if r.log_position >= base])
    cut = victim.log_position - base + rng.randrange(0, 88 + 7 + 120)
    data[cut:written_end + 64] = rng.randbytes(written_end + 64 - cut)
    last.write_bytes(bytes(data))

    store = _reopen(open_store, config)
    survivors = [r for r in results if r.log_position + r.store_size <= base + cut]
    assert store.stats()["commit_log"]["max_position"] == max(
        (r.log_position + r.store_size for r in survivors if r.log_position >= base),
        default=base)  # nothing left in the last segment: the log ends at its start
    if last.exists():  # an emptied last segment is deleted
        assert last.read_bytes()[store.stats()["commit_log"]["max_position"] - base:].strip(
            b"\0") == b""
    _assert_holds_exactly(store, survivors)
    _assert_appends_continue(store, survivors)


def test_truncated_last_segment_is_extended_and_its_valid_prefix_kept(config, open_store):
    store = open_store(config)
    results = _fill(store)
    store.close()
    last = _segments(config)[-1]
    base = int(last.name)
    cut = 3000
    with last.open("r+b") as handle:
        handle.truncate(cut)
    store = _reopen(open_store, config)
    assert last.stat().st_size == TINY_SEGMENT_SIZE_BYTES
    survivors = [r for r in results if r.log_position + r.store_size <= base + cut]
    _assert_holds_exactly(store, survivors)
    _assert_appends_continue(store, survivors)


def test_truncated_middle_segment_refuses_to_open_and_says_what_to_do(config, open_store):
    store = open_store(config, verify=False)
    _fill(store)
    store.close()
    middle = _segments(config)[1]
    with middle.open("r+b") as handle:
        handle.truncate(100)
    with pytest.raises(CorruptionError, match="restore it from a backup") as caught:
        MessageStore.open(config)
    assert caught.value.path == str(middle)


def test_empty_trailing_segments_are_deleted(config, open_store):
    store = open_store(config)
    results = _fill(store)
    store.close()
    last = _segments(config)[-1]
    for extra in (1, 2):
        path = last.parent / f"{int(last.name) + extra * TINY_SEGMENT_SIZE_BYTES:020d}"
        path.write_bytes(bytes(TINY_SEGMENT_SIZE_BYTES))
    store = _reopen(open_store, config)
    assert _segments(config)[-1] == last
    _assert_holds_exactly(store, results)


def test_queue_units_pointing_past_the_recovered_end_are_truncated(config, open_store):
    store = open_store(config)
    results = _fill(store)
    abandon(store)
    lost = results[-3]
    last = _segments(config)[-1]
    with last.open("r+b") as handle:  # zero the record's header: the log ends before it
        handle.seek(lost.log_position - int(last.name))
        handle.write(bytes(16))
    store = _reopen(open_store, config)
    assert store.stats()["commit_log"]["max_position"] == lost.log_position
    _assert_holds_exactly(store, results[:-3])
    _assert_appends_continue(store, results[:-3])


# ---- consume queues ---------------------------------------------------------------------------

def _queue_files(config: StoreConfig, queue_id: int) -> list:
    return sorted((config.root_dir / "consumequeue" / TOPIC / str(queue_id)).iterdir())


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_damaged_consume_queue_units_are_rebuilt_from_the_log(config, open_store, clean):
    store = open_store(config)
    results = _fill(store)
    if clean:
        store.close()
    else:
        abandon(store)
    target = _queue_files(config, 1)[-2]  # a full file before the last
    data = bytearray(target.read_bytes())
    data[60:100] = random.Random(3).randbytes(40)  # garbage over units 3 and 4
    target.write_bytes(bytes(data))
    store = _reopen(open_store, config)
    assert any("consume queue orders/1 damaged" in action
               for action in store.stats()["recovery"]["actions"])
    _assert_holds_exactly(store, results)


def test_store_without_commit_log_empties_the_queues(config, open_store):
    store = open_store(config)
    _fill(store, 20)
    store.close()
    for segment in _segments(config):
        segment.unlink()
    store = _reopen(open_store, config)
    assert [store.max_offset(TOPIC, q) for q in QUEUES] == [0, 0]
    assert store.query_by_key(TOPIC, "k3") == []


# ---- key index --------------------------------------------------------------------------------

def _index_files(config: StoreConfig) -> list:
    return sorted((config.root_dir / "index").iterdir())


@pytest.mark.parametrize("damage", ["truncated", "garbled-header", "deleted-all"])
def test_damaged_or_deleted_index_files_are_rebuilt(config, open_store, damage):
    store = open_store(config)
    results = _fill(store)
    store.close()
    files = _index_files(config)
    assert len(files) >= 2
    if damage == "truncated":
        with files[0].open("r+b") as handle:
            handle.truncate(1000)
    elif damage == "garbled-header":
        with files[0].open("r+b") as handle:
            handle.write(random.Random(5).randbytes(40))
    else:
        for path in files:
            path.unlink()
    store = _reopen(open_store, config)
    assert store.stats()["recovery"]["redispatched_bytes"] > 0
    _assert_holds_exactly(store, results)


def test_unclean_stop_rebuilds_the_index_file_the_checkpoint_does_not_cover(config,
                                                                            open_store):
    store = open_store(config)
    results = _fill(store)
    durable_ms = store.key_index.durable_timestamp_ms
    newest = _index_files(config)[-1]
    abandon(store)
    store = _reopen(open_store, config)
    report = store.stats()["recovery"]
    assert any("not known durable" in action for action in report["actions"])
    assert not newest.exists() or store.key_index.files[-1].end_timestamp_ms >= durable_ms
    _assert_holds_exactly(store, results)


# ---- per-queue next offsets after stacked crashes --------------------------------------------

def test_queue_offsets_continue_across_repeated_unclean_stops(config, open_store):
    store = open_store(config)
    results = _fill(store, 30)
    for round_number in range(3):
        abandon(store)
        store = _reopen(open_store, config)
        results += _fill(store, 30, start=30 * (round_number + 1))
    _assert_holds_exactly(store, results)


def test_checkpoint_page_layout_after_a_clean_close(config, open_store):
    store = open_store(config)
    results = _fill(store, 20)
    store.close()
    page = (config.root_dir / "checkpoint").read_bytes()
    assert len(page) == 4096 and page[48:] == bytes(4048)
    last_ms = max(r.store_timestamp_ms for r in results)
    end = max(r.log_position + r.store_size for r in results)
    index_ms, index_entries = store.key_index.durable_state
    assert index_entries == 21  # 20 keys + the reserved entry 0
    assert page == encode_checkpoint(CheckpointState(
        last_ms, last_ms, index_ms, 0, end, index_entries))
    assert verify_store(config.root_dir, config) == []
    assert os.path.exists(config.root_dir / "lock")
    assert not os.path.exists(config.root_dir / "abort")
