"""Consume-queue files open on demand (``OpenFiles``): a store keeps at most
``consume_queue.open_files_max`` of them open, whatever the number of queues and files, with
every message readable before and after a reopen and after an unclean stop; the setting is
validated and read from broker.conf; a file retention detached reads as deleted once closed.
The process-level proof (a broker under ``RLIMIT_NOFILE`` 256, kill -9, restart) is
``tests/broker_node/server/test_broker_open_files.py``."""

from __future__ import annotations

import os

import pytest

from postbox.storage_engine import ConfigError, ConsumeQueueConfig, Message, StoreConfig
from postbox.storage_engine.store.open_files import OpenFiles
from postbox.storage_engine.store.segment import Allocation
from postbox.storage_engine.store.segment_set import SegmentSet
from tests.storage_engine.conftest import abandon, read_queue, small_config

OPEN_FILES_MAX = 8
TOPICS = 10
QUEUES_PER_TOPIC = 4  # 40 queues
MESSAGES_PER_QUEUE = 25  # 10 units a file: 3 files a queue, 120 files in all


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def fill(store) -> None:
    for round_number in range(MESSAGES_PER_QUEUE):
        for topic in range(TOPICS):
            for queue_id in range(QUEUES_PER_TOPIC):
                store.put_message(Message(topic=f"T{topic}",
                                          body=f"{topic}/{queue_id}/{round_number}".encode()),
                                  queue_id)
    assert store.wait_dispatched()


def assert_all_readable(store) -> None:
    for topic in range(TOPICS):
        for queue_id in range(QUEUES_PER_TOPIC):
            assert [view.body for view in read_queue(store, f"T{topic}", queue_id)] == [
                f"{topic}/{queue_id}/{n}".encode() for n in range(MESSAGES_PER_QUEUE)]


def queue_file_count(store) -> int:
    return sum(len(queue.segments.segments) for queue in store.queues.queues.values())


def test_a_store_keeps_at_most_open_files_max_queue_files_open(tmp_path, open_store, clock):
    config = small_config(tmp_path / "store").replace(consume_queue=ConsumeQueueConfig(
        units_per_file=10, open_files_max=OPEN_FILES_MAX))
    before = open_descriptors()
    store = open_store(config, clock=clock)
    fill(store)
    assert queue_file_count(store) == TOPICS * QUEUES_PER_TOPIC * 3
    assert store.open_files.open_count <= OPEN_FILES_MAX
    assert_all_readable(store)
    assert store.open_files.open_count <= OPEN_FILES_MAX
    assert store.stats()["open_queue_files"]["evicted"] > 0
    # two descriptors per open file (queue files, log segments, index files); lock, checkpoint
    other_files = len(store.commit_log.segments.segments) + len(store.key_index.files)
    assert open_descriptors() - before <= 2 * (OPEN_FILES_MAX + other_files) + 8
    abandon(store)  # an unclean stop: the next open recovers every queue

    store = open_store(config, clock=clock)
    assert store.open_files.open_count <= OPEN_FILES_MAX
    assert_all_readable(store)
    store.close()
    store = open_store(config, clock=clock)
    assert_all_readable(store)


def test_open_files_max_is_validated_and_read_from_broker_conf(tmp_path):
    with pytest.raises(ConfigError, match=r"consume_queue\.open_files_max"):
        ConsumeQueueConfig(open_files_max=7)
    config = StoreConfig.from_broker_conf({"storePathRootDir": str(tmp_path),
                                           "consumeQueueOpenFilesMax": "64"})
    assert config.consume_queue.open_files_max == 64
    assert config.unknown_broker_keys == ()


def test_a_retired_file_reads_as_deleted_once_closed_and_stays_open_if_open(tmp_path):
    files = OpenFiles(1)
    segments = SegmentSet(tmp_path / "q", 40, Allocation.SPARSE, files)
    for number in range(3):
        segment = segments.create_next()
        segment.write(bytes([number + 1]) * 40)
    first, second, last = segments.segments
    assert [first.is_open, second.is_open, last.is_open] == [False, False, True]
    assert second.read(0, 4) == b"\x02" * 4  # reopened, and the last one closed for it
    assert [second.is_open, last.is_open] == [True, False]

    removed = segments.remove_front(2)  # retention: first closed, second open
    assert removed == [first, second] and not first.path.exists()
    assert first.read(0, 4) == bytes(4)  # not reopened: its messages are deleted
    assert last.read(0, 4) == b"\x03" * 4  # the open retired file is not evicted for it
    assert second.is_open and second.read(0, 4) == b"\x02" * 4
    for segment in removed:
        segment.close()
    assert not second.is_open and files.open_count == 1
    segments.close()
    assert files.open_count == 0


def test_a_file_in_use_is_never_closed_and_the_set_shrinks_back_after(tmp_path):
    files = OpenFiles(1)
    segments = SegmentSet(tmp_path / "q", 40, Allocation.SPARSE, files)
    first = segments.create_next()
    first.write(b"\x01" * 40)
    second = segments.create_next()
    second.write(b"\x02" * 40)
    assert files.acquire(first) is not None  # a flush or scan holds it
    try:
        assert second.read(0, 4) == b"\x02" * 4  # opened beside it, over the cap for now
        assert first.is_open and second.is_open and files.open_count == 2
    finally:
        files.release(first)
    assert first.read(0, 4) == b"\x01" * 4  # room made: the least recently used one closed
    assert first.is_open and not second.is_open and files.open_count == 1
    segments.close()
