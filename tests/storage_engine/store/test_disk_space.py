"""Disk space on a real file system (issue 19, items 2 and 3; DESIGN §9).

* Files follow data: consume-queue and key-index files are sparse, so a new topic takes a page on
  disk, not its 6 MB queue file; the files still have their full size and decode, holes as
  zeros, with the independent RocketMQ decoder.
* A full disk: the store still opens (read-only), says why, serves reads, and becomes writable
  once space is freed.
* Back-pressure: a real small disk filled by puts refuses writes *before* it passes the warning
  level, keeps every unconsumed message, and deletes only what the consumer floor allows.

Every test mounts a real tmpfs (``tmpfs`` fixture; the suite runs as root).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from postbox.storage_engine import (
    ConsumeQueueConfig,
    DiskFullError,
    KeyIndexConfig,
    Message,
    MessageStore,
    StoreConfig,
    verify_store,
)
from postbox.storage_engine.store.retention import disk_used_ratio
from tests.storage_engine.conftest import read_queue, small_config
from tests.support import rmq_decoder

PAGE_BYTES = 4096
CQ_FILE_BYTES = 300_000 * 20  # RocketMQ's default consume-queue file


def _disk_bytes(directory: Path) -> int:
    """Bytes the files under ``directory`` take on disk (``st_blocks``)."""
    return sum(path.stat().st_blocks * 512 for path in directory.rglob("*") if path.is_file())


def _fill_disk(mount_point: Path) -> Path:
    """Write a file until the file system says ENOSPC; returns it (delete it to free space)."""
    filler = mount_point / "filler"
    with filler.open("wb", buffering=0) as handle:
        chunk = bytes(64 * 1024)
        while True:
            try:
                handle.write(chunk)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                break
    return filler


def test_fifty_new_topics_take_a_page_each_not_their_files(tmpfs):
    """Default-sized files (6 MB queues, 420 MB index): on 40 MiB, 50 one-message topics fit
    (preallocated, the 7th did not) and each takes about one page of queue on disk."""
    root = tmpfs("40m") / "store"
    config = small_config(root, segment_size_bytes=4 << 20, units_per_file=300_000,
                          slot_count_max=5_000_000, entry_count_max=20_000_000)
    with MessageStore.open(config) as store:
        for number in range(50):
            store.put_message(Message(f"topic-{number}", b"x", keys=[f"k{number}"]), 0)
        assert store.wait_dispatched()
    queue_bytes = _disk_bytes(root / "consumequeue")
    index_bytes = _disk_bytes(root / "index")
    print(f"disk per new topic: queue {queue_bytes / 50:.0f} B, index {index_bytes / 50:.0f} B")
    assert queue_bytes <= 50 * PAGE_BYTES
    assert index_bytes <= (50 + 4) * PAGE_BYTES  # a slot page per key, header, entries
    queue_file = root / "consumequeue" / "topic-7" / "0" / f"{0:020d}"
    assert queue_file.stat().st_size == CQ_FILE_BYTES  # the RocketMQ file size is kept
    with MessageStore.open(config) as store:  # load scans the sparse files
        for number in range(50):
            (view,) = store.get_message("g", f"topic-{number}", 0, 0).messages
            assert view.body == b"x"
            assert [v.keys for v in store.query_by_key(f"topic-{number}", f"k{number}")] == [
                [f"k{number}"]]
    assert _disk_bytes(root / "consumequeue") == queue_bytes  # reopening took no more


def test_sparse_files_decode_with_rocketmq_formats_holes_as_zeros(tmpfs):
    root = tmpfs("40m") / "store"
    config = small_config(root, segment_size_bytes=1 << 20, units_per_file=10_000,
                          slot_count_max=4096, entry_count_max=20_000)
    with MessageStore.open(config) as store:
        for number in range(300):
            store.put_message(Message(f"t{number % 3}", b"m%d" % number, keys=[f"k{number}"]),
                              number % 2)
        assert store.wait_dispatched()
    records, problems = rmq_decoder.scan_commit_log(str(root / "commitlog"), 1 << 20)
    assert problems == [] and len(records) == 300
    by_position = rmq_decoder.by_position(records)
    for topic_dir in sorted((root / "consumequeue").iterdir()):
        for queue_dir in sorted(topic_dir.iterdir()):
            units = rmq_decoder.read_consume_queue(str(queue_dir), 10_000 * 20)
            assert len(units) == 50
            assert rmq_decoder.check_consume_queue(units, by_position) == []
            data = (queue_dir / f"{0:020d}").read_bytes()
            assert data[len(units) * 20:] == bytes(len(data) - len(units) * 20)
    (index_path,) = (root / "index").iterdir()
    assert index_path.stat().st_blocks * 512 < index_path.stat().st_size // 4
    index = rmq_decoder.read_index_file(str(index_path), 4096, 20_000)
    assert rmq_decoder.check_index_chains(index, by_position, 4096) == []
    assert verify_store(root, config) == []


def test_a_full_disk_still_opens_read_only_says_why_and_serves_reads(tmpfs):
    mount_point = tmpfs("16m")
    config = small_config(mount_point / "store", segment_size_bytes=1 << 20,
                          units_per_file=300_000)
    with MessageStore.open(config) as store:
        stored = [store.put_message(Message("orders", b"o%d" % n, keys=[f"k{n}"]), 0)
                  for n in range(100)]
    filler = _fill_disk(mount_point)
    with MessageStore.open(config) as store:  # before: ENOSPC writing the abort marker
        assert store.get_message("g", "orders", 0, 99).messages[0].body == b"o99"
    # closed on the full disk without error: unchanged config files are not rewritten
    store = MessageStore.open(config)
    try:
        why = store.stats()["retention"]["read_only_reason"]
        assert "disk is full" in why and "read-only" in why
        assert [v.log_position for v in read_queue(store, "orders")] == [
            r.log_position for r in stored]
        assert store.query_by_key("orders", "k42")[0].body == b"o42"
        with pytest.raises(DiskFullError, match="disk is full"):
            store.put_message(Message("orders", b"refused"), 0)
        filler.unlink()  # space freed: the next put writes the marker and goes through
        accepted = store.put_message(Message("orders", b"accepted"), 0)
        assert accepted.queue_offset == 100
        assert store.stats()["retention"]["read_only_reason"] is None
    finally:
        store.close()
    assert verify_store(config.root_dir, config) == []


def test_a_real_disk_refuses_writes_before_the_warning_level(tmpfs):
    """Puts fill a real 16 MiB disk: they are refused while ``df`` still shows at most 90 %,
    nothing unconsumed is deleted, and writes resume once consumed segments are deleted."""
    mount_point = tmpfs("16m")
    config = StoreConfig(
        root_dir=mount_point / "store",
        commit_log=small_config(mount_point, segment_size_bytes=256 * 1024).commit_log,
        consume_queue=ConsumeQueueConfig(units_per_file=300_000),
        key_index=KeyIndexConfig(slot_count_max=50_000, entry_count_max=200_000))
    store = MessageStore.open(config, hour_of_day=lambda _now_ms: 12)
    try:
        stored = []
        with pytest.raises(DiskFullError, match="disk_space_warning_level_ratio") as refused:
            for _ in range(100_000):
                stored.append(store.put_message(Message("orders", bytes(8000)), 0))
        used = disk_used_ratio(mount_point)
        print(f"refused after {len(stored)} puts at {used:.0%} used (warning level 90%)")
        assert used <= 0.90 and refused.value.setting.endswith("warning_level_ratio")
        store.log_flusher.flush(0)
        assert store.wait_dispatched()
        store.retention.run_once(store.clock.now_ms())
        assert store.retention.deleted_segment_count == 0  # nobody consumed anything
        assert store.retention.kept_unconsumed
        assert len(read_queue(store, "orders")) == len(stored)
        store.set_consumption_floor(lambda: stored[len(stored) // 2].log_position)
        store.retention.run_once(store.clock.now_ms())
        assert store.retention.deleted_segment_count > 0
        store.retention.run_once(store.clock.now_ms())  # closes the mappings: space is free
        assert store.put_message(Message("orders", b"accepted"), 0).queue_offset == len(stored)
        assert store.commit_log.min_position <= stored[len(stored) // 2].log_position
    finally:
        store.close()
    assert verify_store(config.root_dir, config) == []
    assert os.path.exists(config.root_dir / "commitlog")
