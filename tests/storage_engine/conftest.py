"""Shared helpers for the storage-engine tests: small configs, a verified store, vector copies.

Every store here is the real engine on real files under pytest's ``tmp_path``. A store opened
through ``open_store`` is closed at teardown and then checked with ``verify_store`` (the fsck),
so every test also proves that it left a consistent store behind.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from postbox.storage_engine import (
    CommitLogConfig,
    ConsumeQueueConfig,
    FakeClock,
    GetStatus,
    KeyIndexConfig,
    Message,
    MessageStore,
    MessageView,
    PutResult,
    StoreConfig,
    verify_store,
)
from tests.support.rmq_decoder import VECTORS_DIR

TINY_SEGMENT_SIZE_BYTES = 8 * 1024
SMALL_SEGMENT_SIZE_BYTES = 64 * 1024
TINY_UNITS_PER_FILE = 10
SMALL_UNITS_PER_FILE = 1000
TINY_INDEX = (32, 128)  # (slot_count_max, entry_count_max)
SMALL_INDEX = (1024, 4096)
START_MS = 1_700_000_000_000  # FakeClock start: a whole second, so index time diffs are exact


def small_config(root: Path, *, tiny: bool = True, segment_size_bytes: int | None = None,
                 units_per_file: int | None = None, slot_count_max: int | None = None,
                 entry_count_max: int | None = None, max_message_size_bytes: int | None = None,
                 **store_fields) -> StoreConfig:
    """A ``StoreConfig`` with small files: tiny (8 KiB, 10 units, 32/128) or small (64 KiB,
    1000 units, 1024/4096). Keyword arguments override single values."""
    slots, entries = TINY_INDEX if tiny else SMALL_INDEX
    commit_log = CommitLogConfig(
        segment_size_bytes=segment_size_bytes or (
            TINY_SEGMENT_SIZE_BYTES if tiny else SMALL_SEGMENT_SIZE_BYTES),
        **({} if max_message_size_bytes is None else
           {"max_message_size_bytes": max_message_size_bytes}))
    return StoreConfig(
        root_dir=root,
        commit_log=commit_log,
        consume_queue=ConsumeQueueConfig(units_per_file=units_per_file or (
            TINY_UNITS_PER_FILE if tiny else SMALL_UNITS_PER_FILE)),
        key_index=KeyIndexConfig(slot_count_max=slot_count_max or slots,
                                 entry_count_max=entry_count_max or entries),
        **store_fields)


def put_all(store: MessageStore, messages: list[Message], queue_id: int = 0) -> list[PutResult]:
    """Put messages one by one and wait until queues and index cover them."""
    results = [store.put_message(message, queue_id) for message in messages]
    assert store.wait_dispatched(), "dispatch did not catch up"
    return results


def read_queue(store: MessageStore, topic: str, queue_id: int = 0,
               batch: int = 32) -> list[MessageView]:
    """Every message of a queue through ``get_message``, following ``next_offset``."""
    views: list[MessageView] = []
    offset = store.min_offset(topic, queue_id)
    while True:
        result = store.get_message("g", topic, queue_id, offset, batch)
        if result.status is not GetStatus.FOUND:
            assert result.status is GetStatus.OFFSET_OVERFLOW_ONE, result
            return views
        assert len(result.messages) <= batch
        views.extend(result.messages)
        offset = result.next_offset


class DiskProbe:
    """The store's injectable disk-usage probe, set by the test (a fixed ratio instead of a
    real full disk)."""

    def __init__(self, ratio: float = 0.2) -> None:
        self.ratio = ratio

    def __call__(self, path: Path) -> float:
        return self.ratio


@pytest.fixture
def clock(fake_clock: FakeClock) -> FakeClock:
    """A clock that moves only when the test advances it (``fake_clock``,
    tests/support/brokers.py)."""
    return fake_clock


@pytest.fixture
def config(tmp_path: Path) -> StoreConfig:
    """Tiny store configuration rooted at ``tmp_path / "store"``."""
    return small_config(tmp_path / "store")


@pytest.fixture
def open_store() -> Iterator[Callable[..., MessageStore]]:
    """Factory: ``open_store(config, clock=None, verify=True, **open_kwargs)`` (the rest goes
    to ``MessageStore.open``: ``disk_usage``, ``hour_of_day``).

    At teardown every store it opened is closed (in reverse order) and, unless ``verify=False``
    (tests that damage files on purpose), ``verify_store`` must report no problem.
    """
    opened: list[tuple[MessageStore, bool]] = []

    def factory(store_config: StoreConfig, *, clock: FakeClock | None = None,
                verify: bool = True, **open_kwargs) -> MessageStore:
        store = MessageStore.open(store_config, clock=clock, **open_kwargs)
        opened.append((store, verify))
        return store

    yield factory
    for store, _verify in reversed(opened):
        try:
            store.close()
        except Exception:  # close the others too (their threads would keep pytest alive)
            for other, _ in opened:
                other.close()
            raise
    for store, verify in opened:
        if verify:
            assert verify_store(store.root_dir, store.config) == []


@pytest.fixture
def brokers(tmp_path: Path, clock: FakeClock):
    """Factory of brokers on small stores under ``tmp_path``, on the test's fake clock; closed
    and verified at teardown."""
    from tests.support.brokers import BrokerFactory  # it imports this module

    with BrokerFactory(tmp_path, clock) as factory:
        yield factory


@pytest.fixture
def broker_factory(brokers) -> Callable[..., object]:
    """``broker`` (tests/support/brokers.py) here: a broker of ``brokers``, on the fake clock."""
    return brokers.open


@pytest.fixture
def store(open_store, config: StoreConfig, clock: FakeClock) -> MessageStore:
    """An open tiny store on a fake clock; verified clean after the test."""
    return open_store(config, clock=clock)


@pytest.fixture
def vectors_copy(tmp_path: Path) -> Callable[[str], Path]:
    """Factory: copy a folder of ``shared/vectors`` into ``tmp_path`` and return the copy.

    Skips the test when the vectors are not present on this machine.
    """
    def copy(relative: str) -> Path:
        source = VECTORS_DIR / relative
        if not source.is_dir():
            pytest.skip(f"golden vectors not present at {source}")
        target = tmp_path / "vectors" / relative
        # fresh modification times: the originals' (years old) would make every copied segment
        # "expired" to retention whenever the disk is above its 75 % mark
        shutil.copytree(source, target, copy_function=shutil.copy)
        return target

    return copy


def abandon(store: MessageStore) -> None:
    """Leave a store as a killed process would: threads stopped, files unmapped, nothing
    flushed or checkpointed by a close, ``abort`` left in place, the lock released. (The page
    cache keeps what was written, as it does when a process dies; crash tests with a real
    ``kill -9`` are in ``test_crash.py``.)"""
    for service in reversed(store._services):
        service.stop()
    store._closed = True
    store._release_files()
