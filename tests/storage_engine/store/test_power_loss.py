"""Simulated power loss: random operation sequences, crashes that tear every unflushed byte.

What is simulated (``tests/support/torn_files.py``): a power cut while the store is open. The
store is abandoned without close, then every commit-log segment, consume-queue file and the
newest key-index file keeps what the store had flushed and loses or tears the rest, page by page.
A process crash (``kill -9``) is the gentler case, tested with real processes in
``test_crash.py``.

Hypothesis drives sequences of puts (random topic, queue, keys, body sizes up to most of a
segment), explicit flushes of the log and of the consume queues, clock advances (which move the
checkpoint, hence where recovery starts), clean close + reopen, and crash + reopen, in SYNC and in
ASYNC mode, against a model of what was sent and what is known durable: SYNC, every put that
returned PUT_OK; ASYNC, everything appended before the last completed full flush of the log;
both, everything before a clean close. After every reopen: the log is a prefix of the sent
sequence at least as long as the durable part; every message in it is identical by position, by
queue offset (``get_message``) and by key; every queue holds exactly its share of that prefix;
messages lost past the prefix are found by no key; ``verify_store`` is clean after each close.

A second group asks the kernel (``page_cache.py``) whether files the store says are durable
still have dirty pages: a flush that silently does nothing shows up there. A third pins down,
one deterministic scenario each, the damage the sequences found (torn record tails, torn or
garbage consume-queue units, torn index files).
"""

from __future__ import annotations

import random
import shutil
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from postbox.storage_engine import (
    CommitLogConfig,
    ConsumeQueueConfig,
    CorruptionError,
    FakeClock,
    FlushConfig,
    FlushMode,
    KeyIndexConfig,
    Message,
    MessageStore,
    MessageView,
    PutStatus,
    StoreConfig,
    verify_store,
)
from tests.storage_engine.conftest import START_MS, abandon, read_queue
from tests.support import page_cache
from tests.support.torn_files import IndexSnapshot, cut_power, tear

TOPICS = ("orders", "audit")
QUEUE_COUNT = 3
NEVER_MS = 3_600_000  # background flush timers: only the operations flush
GEOMETRIES = {  # segment bytes, consume-queue units per file, index (slots, entries)
    "tiny": (8 * 1024, 8, (8, 32)),  # everything rolls after a few messages
    "paged": (32 * 1024, 512, (64, 256)),  # files span several 4 KiB pages
}


def power_loss_config(root: Path, mode: FlushMode, geometry: str) -> StoreConfig:
    segment_bytes, units, (slots, entries) = GEOMETRIES[geometry]
    return StoreConfig(
        root_dir=root, commit_log=CommitLogConfig(segment_size_bytes=segment_bytes),
        consume_queue=ConsumeQueueConfig(units_per_file=units),
        key_index=KeyIndexConfig(slot_count_max=slots, entry_count_max=entries),
        flush=FlushConfig(mode=mode, interval_ms=NEVER_MS, consume_queue_interval_ms=NEVER_MS))


def open_store(config: StoreConfig, clock: FakeClock) -> MessageStore:
    """Open with retention pinned (disk 10 % used, never a deletion hour)."""
    return MessageStore.open(config, clock=clock, disk_usage=lambda _path: 0.1,
                             hour_of_day=lambda _ms: 12)


# ---- the model ---------------------------------------------------------------------------------

@dataclass
class Sent:
    """One put as the model remembers it."""

    topic: str
    queue_id: int
    key: str
    tags: str | None
    body: bytes
    queue_offset: int
    log_position: int
    durable: bool

    def matches(self, view: MessageView) -> bool:
        return (view.topic, view.queue_id, view.keys[:1], view.tags, view.body,
                view.queue_offset, view.log_position) == (
            self.topic, self.queue_id, [self.key], self.tags, self.body, self.queue_offset,
            self.log_position)


@dataclass
class Model:
    """Every message sent, in put (= log) order, and which are known durable."""

    log: list[Sent] = field(default_factory=list)
    lost: list[Sent] = field(default_factory=list)
    next_key: int = 0

    def durable_count(self) -> int:
        """Length of the log prefix that must survive (the log is flushed front to back)."""
        return max((i + 1 for i, sent in enumerate(self.log) if sent.durable), default=0)

    def all_durable(self) -> None:
        for sent in self.log:
            sent.durable = True

    def survived(self, count: int) -> None:
        """After a crash: the first ``count`` survived (and are durable now), the rest are lost."""
        self.lost.extend(self.log[count:])
        del self.log[count:]
        self.all_durable()


# ---- operations --------------------------------------------------------------------------------

def _body_size(rng: random.Random, segment_bytes: int) -> int:
    if rng.random() < 0.1:
        return rng.randrange(segment_bytes // 4, segment_bytes * 3 // 4)
    return rng.randrange(1, 600)


def put_some(store: MessageStore, model: Model, count: int, seed: int) -> None:
    rng = random.Random(seed)
    sync = store.config.flush.mode is FlushMode.SYNC
    for _ in range(count):
        topic, queue_id = rng.choice(TOPICS), rng.randrange(QUEUE_COUNT)
        key, tags = f"k{model.next_key}", rng.choice(("paid", "new", None))
        model.next_key += 1
        body = rng.randbytes(_body_size(rng, store.config.commit_log.segment_size_bytes))
        result = store.put_message(
            Message(topic, body, tags=tags, keys=[key, f"shared{rng.randrange(3)}"]), queue_id)
        model.log.append(Sent(topic, queue_id, key, tags, body, result.queue_offset,
                              result.log_position, sync and result.status is PutStatus.PUT_OK))


def check_store(store: MessageStore, model: Model, where: str) -> None:
    """What survived is a durable-covering prefix of what was sent, readable every way."""
    assert store.wait_dispatched(), f"{where}: dispatch did not catch up"
    views = list(store.iter_messages())
    assert model.durable_count() <= len(views) <= len(model.log), (
        f"{where}: {len(views)} records survived; {model.durable_count()} were durable and "
        f"{len(model.log)} sent")
    for index, (sent, view) in enumerate(zip(model.log, views, strict=False)):
        assert sent.matches(view), f"{where}: log record {index} at position " \
            f"{view.log_position} is not the message put there ({sent.key})"
    model.survived(len(views))
    for topic in TOPICS:
        for queue_id in range(QUEUE_COUNT):
            share = [sent for sent in model.log if (sent.topic, sent.queue_id) == (topic, queue_id)]
            pulled = read_queue(store, topic, queue_id) if store.max_offset(topic, queue_id) else []
            assert len(pulled) == len(share) and all(
                sent.matches(view) for sent, view in zip(share, pulled, strict=True)), (
                f"{where}: queue {topic}/{queue_id} holds {[v.keys[:1] for v in pulled]}, "
                f"expected {[sent.key for sent in share]}")
    for sent in model.log:
        assert sent.matches(store.read_message(sent.log_position)), f"{where}: {sent.key}"
        found = [view.log_position for view in store.query_by_key(sent.topic, sent.key)]
        assert found == [sent.log_position], (
            f"{where}: query_by_key({sent.topic!r}, {sent.key!r}) found positions {found}, "
            f"expected [{sent.log_position}]")
    for sent in model.lost:
        found = [view.log_position for view in store.query_by_key(sent.topic, sent.key)]
        assert found == [], f"{where}: lost message {sent.key} found by key at {found}"


@dataclass
class Run:
    """One example: a store directory, the open store and the model."""

    config: StoreConfig
    clock: FakeClock
    store: MessageStore
    snapshot: IndexSnapshot
    model: Model = field(default_factory=Model)

    def reopen(self, where: str, *, clean: bool) -> None:
        self.store = open_store(self.config, self.clock)
        self.snapshot = IndexSnapshot.take(self.store)
        assert self.store.stats()["recovery"]["clean_shutdown"] is clean, where
        check_store(self.store, self.model, where)

    def close(self, where: str) -> None:
        self.store.close()
        assert verify_store(self.config.root_dir, self.config) == [], where


def apply(run: Run, operation: tuple, step: int) -> None:
    where = f"step {step} {operation}"
    kind = operation[0]
    if kind == "put":
        put_some(run.store, run.model, operation[1], operation[2])
    elif kind == "flush_log":
        run.store.log_flusher.flush(0)
        run.model.all_durable()
    elif kind == "flush_queues":
        run.store.queue_flusher.flush(True)
    elif kind == "advance":
        run.clock.advance(operation[1])
    elif kind == "reopen":
        run.close(where)
        run.model.all_durable()
        run.reopen(where, clean=True)
    elif kind == "crash":
        _, tear_seed, dispatched = operation
        if dispatched:
            assert run.store.wait_dispatched(), where
        torn = tear(cut_power(run.store, run.snapshot), random.Random(tear_seed))
        note(f"{where} tore: {torn}")
        run.reopen(where, clean=False)


OPERATIONS = st.one_of(
    st.tuples(st.just("put"), st.integers(1, 12), st.integers(0, 2**32)),
    st.tuples(st.just("put"), st.integers(1, 12), st.integers(0, 2**32)),
    st.tuples(st.just("put"), st.integers(1, 12), st.integers(0, 2**32)),
    st.tuples(st.just("flush_log")),
    st.tuples(st.just("flush_queues")),
    st.tuples(st.just("advance"), st.integers(1, 10_000)),
    st.tuples(st.just("reopen")),
    st.tuples(st.just("crash"), st.integers(0, 2**32), st.booleans()),
    st.tuples(st.just("crash"), st.integers(0, 2**32), st.booleans()),
)


def run_operations(base: Path, mode: FlushMode, geometry: str, operations: list) -> None:
    root = Path(tempfile.mkdtemp(dir=base))
    config = power_loss_config(root / "store", mode, geometry)
    clock = FakeClock(START_MS)
    store = open_store(config, clock)
    run = Run(config, clock, store, IndexSnapshot.take(store))
    try:
        for step, operation in enumerate(operations):
            apply(run, operation, step)
        check_store(run.store, run.model, "at the end")
        run.close("final close")
    finally:
        try:
            run.store.close()  # after a failed assertion: stop its threads
        finally:
            shutil.rmtree(root, ignore_errors=True)


SETTINGS = settings(max_examples=40, deadline=None, print_blob=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@pytest.mark.parametrize("mode", [FlushMode.SYNC, FlushMode.ASYNC])
@SETTINGS
@given(geometry=st.sampled_from(sorted(GEOMETRIES)),
       operations=st.lists(OPERATIONS, min_size=4, max_size=30))
def test_power_loss_keeps_a_durable_prefix(tmp_path, mode, geometry, operations):
    run_operations(tmp_path, mode, geometry, operations)


@pytest.mark.slow  # `make test-slow`, run by CI
@pytest.mark.timeout(1_200)  # about 5 min each on a busy 2-core machine
@pytest.mark.parametrize("mode", [FlushMode.SYNC, FlushMode.ASYNC])
@settings(SETTINGS, max_examples=400)
@given(geometry=st.sampled_from(sorted(GEOMETRIES)),
       operations=st.lists(OPERATIONS, min_size=1, max_size=60))
def test_power_loss_long_sequences(tmp_path, mode, geometry, operations):
    run_operations(tmp_path, mode, geometry, operations)


# ---- what the kernel still holds after the store says "durable" ------------------------------

needs_cachestat = pytest.mark.skipif(not page_cache.available(),
                                     reason="cachestat(2) needs Linux 6.5 or newer")
NOT_CONTENT = frozenset({"abort"})  # only its existence matters (the directory is fsynced)


def _put_keyed(store: MessageStore, first: int, count: int) -> None:
    for number in range(first, first + count):
        store.put_message(Message(TOPICS[number % 2], b"body-%d" % number, tags="paid",
                                  keys=[f"k{number}"]), number % QUEUE_COUNT)
    assert store.wait_dispatched()


@needs_cachestat
def test_clean_close_leaves_no_page_unsynced(tmp_path):
    """After ``close`` returns, a power cut must lose nothing: no page of any store file may
    still be dirty. The second session appends to the index file the first one created."""
    config = power_loss_config(tmp_path / "store", FlushMode.ASYNC, "paged")
    clock = FakeClock(START_MS)
    store = open_store(config, clock)
    _put_keyed(store, 0, 10)
    store.close()
    store = open_store(config, clock)
    _put_keyed(store, 10, 10)
    store.close()
    assert page_cache.unsynced_files(config.root_dir, NOT_CONTENT) == {}


@needs_cachestat
def test_recovery_truncation_is_durable_when_open_returns(tmp_path):
    """Open makes the recovered state durable: when a torn last record takes a queue's only
    unit with it, the zeroed consume-queue file must be on disk too — else a second power cut
    brings the unit back, pointing at whatever record is written there next."""
    config = power_loss_config(tmp_path / "store", FlushMode.SYNC, "paged")
    clock = FakeClock(START_MS)
    store = open_store(config, clock)
    first = store.put_message(Message("orders", b"first", keys=["k0"]), 0)
    last = store.put_message(Message("audit", b"last", keys=["k1"]), 1)
    assert store.wait_dispatched()
    store.queue_flusher.flush(True)  # both units durable: the queue file holds audit/1's unit
    abandon(store)
    segment = config.root_dir / "commitlog" / f"{0:020d}"
    with segment.open("r+b") as handle:  # the last record never reached the disk
        handle.seek(last.log_position)
        handle.write(bytes(last.store_size))
    store = open_store(config, clock)
    assert store.max_offset("audit", 1) == 0 and store.max_offset("orders", 0) == 1
    assert [v.log_position for v in store.iter_messages()] == [first.log_position]
    unsynced = page_cache.unsynced_files(config.root_dir, NOT_CONTENT)
    store.close()
    assert unsynced == {}


# ---- single scenarios the sequences found, pinned down -----------------------------------------

def _overwrite(path: Path, offset: int, data: bytes) -> None:
    with path.open("r+b") as handle:
        handle.seek(offset)
        handle.write(data)


def _queue_file(config: StoreConfig, topic: str, queue_id: int) -> Path:
    return config.root_dir / "consumequeue" / topic / str(queue_id) / f"{0:020d}"


def test_record_whose_last_sector_was_lost_is_truncated(tmp_path):
    """Topic and properties follow the body, outside its CRC: a record whose last sector did
    not reach the disk must still be cut off like any torn record, not served damaged."""
    config = power_loss_config(tmp_path / "store", FlushMode.ASYNC, "paged")
    store = open_store(config, FakeClock(START_MS))
    durable = store.put_message(Message("orders", b"durable", keys=["k0"]), 0)
    store.log_flusher.flush(0)
    torn = store.put_message(Message("orders", b"torn", tags="paid", keys=["k1"],
                                     properties={"note": "n" * 700}), 0)
    cut_power(store, IndexSnapshot.take(store))
    record_end = torn.log_position + torn.store_size
    last_sector = (record_end - 1) // 512 * 512  # inside the 700-byte property: body intact
    _overwrite(config.root_dir / "commitlog" / f"{0:020d}", last_sector,
               bytes(record_end - last_sector))
    store = open_store(config, FakeClock(START_MS))
    try:
        assert [v.log_position for v in store.iter_messages()] == [durable.log_position]
        assert [v.keys for v in read_queue(store, "orders", 0)] == [["k0"]]
        assert store.query_by_key("orders", "k1") == []
    finally:
        store.close()


def test_consume_queue_garbage_after_the_last_valid_unit_is_cleared(tmp_path):
    """A torn queue page: the first unit after the durable ones is invalid, later bytes are
    garbage. Recovery rebuilds the unit from the log and must clear the garbage after it."""
    config = power_loss_config(tmp_path / "store", FlushMode.SYNC, "paged")
    store = open_store(config, FakeClock(START_MS))
    _put_keyed(store, 0, 6)  # one unit in each of the six queues
    store.queue_flusher.flush(True)
    second = store.put_message(Message("audit", b"second", keys=["k6"]), 1)
    assert second.queue_offset == 1 and store.wait_dispatched()
    cut_power(store, IndexSnapshot.take(store))
    garbage = (struct.pack(">qiq", 77, -5, 0)  # offset 1: size < 0, the end of valid data
               + struct.pack(">qiq", 1 << 40, 100, 0) + random.Random(7).randbytes(60))
    _overwrite(_queue_file(config, "audit", 1), 20, garbage)
    store = open_store(config, FakeClock(START_MS))
    assert store.max_offset("audit", 1) == 2
    store.close()
    assert verify_store(config.root_dir, config) == []


def test_queue_unit_torn_at_a_page_boundary_is_rebuilt(tmp_path):
    """Unit 204 of a queue file spans bytes 4080..4100, across the first page boundary. If the
    second page did not reach the disk, the unit keeps its position and size but loses half
    its tag hash; recovery must not keep it as if it were whole."""
    config = power_loss_config(tmp_path / "store", FlushMode.ASYNC, "paged")
    store = open_store(config, FakeClock(START_MS))
    for number in range(205):
        store.put_message(Message("orders", b"m%d" % number, tags="paid"), 0)
        if number == 203:
            store.log_flusher.flush(0)
            assert store.wait_dispatched()
            store.queue_flusher.flush(True)  # units 0..203 durable
    store.log_flusher.flush(0)  # the 205th record is durable, its unit is not
    assert store.wait_dispatched()
    cut_power(store, IndexSnapshot.take(store))
    queue_file = _queue_file(config, "orders", 0)
    _overwrite(queue_file, 4096, bytes(4096))  # the second page never made it
    store = open_store(config, FakeClock(START_MS))
    try:
        result = store.get_message("g", "orders", 0, 200, 32, tags="paid")
        assert [v.queue_offset for v in result.messages] == [200, 201, 202, 203, 204]
    finally:
        store.close()
    assert verify_store(config.root_dir, config) == []


def test_index_page_lost_behind_its_header_is_rebuilt(tmp_path):
    """The newest index file after a reopen: entries 190 and up sit on its second page, the
    header and slots on the first. If only the first page reached the disk, the header counts
    entries that are zeros; every durable key must still be found after recovery."""
    config = power_loss_config(tmp_path / "store", FlushMode.ASYNC, "paged")
    clock = FakeClock(START_MS)
    store = open_store(config, clock)
    results = [store.put_message(Message("orders", b"m%d" % n, keys=[f"k{n}"]), 0)
               for n in range(189)]  # entries 1..189: the first page
    store.close()
    store = open_store(config, clock)
    results += [store.put_message(Message("orders", b"m%d" % n, keys=[f"k{n}"]), 0)
                for n in (189, 190)]  # entries 190, 191: bytes 4096.. of the file
    store.log_flusher.flush(0)
    assert store.wait_dispatched()
    (index_file,) = store.key_index.files
    cut_power(store, IndexSnapshot.take(store))
    _overwrite(index_file.path, 4096, bytes(index_file.file.size_bytes - 4096))
    store = open_store(config, clock)
    try:
        missing = [f"k{n}" for n, result in enumerate(results)
                   if [v.log_position for v in store.query_by_key("orders", f"k{n}")]
                   != [result.log_position]]
        assert missing == []
    finally:
        store.close()


def test_index_entries_past_the_recovered_end_are_dropped(tmp_path):
    """ASYNC: an index file filled and was flushed while the records it points at were not; a
    newer index file was created and never flushed (zeros on disk). After the power cut the
    lost records' keys must find nothing, and the durable ones exactly their record."""
    config = power_loss_config(tmp_path / "store", FlushMode.ASYNC, "tiny")
    store = open_store(config, FakeClock(START_MS))
    results = []
    for number in range(20):  # two keys each: the 31-entry index file fills at number 15
        results.append(store.put_message(
            Message("orders", b"m%d" % number, keys=[f"k{number}", f"x{number}"]), 0))
        if number == 9:
            store.log_flusher.flush(0)  # records 0..9 durable
    assert store.wait_dispatched() and len(store.key_index.files) == 2
    durable_end = results[9].log_position + results[9].store_size
    newest_index = store.key_index.files[-1].path
    cut_power(store, IndexSnapshot.take(store))
    segment = config.root_dir / "commitlog" / f"{0:020d}"
    _overwrite(segment, durable_end, bytes(segment.stat().st_size - durable_end))
    _overwrite(newest_index, 0, bytes(newest_index.stat().st_size))
    store = open_store(config, FakeClock(START_MS))
    try:
        found = {}
        for number in range(20):
            try:
                found[number] = [v.log_position for v in store.query_by_key("orders", f"k{number}")]
            except CorruptionError as error:
                found[number] = f"raised {error}"
        assert found == {n: [r.log_position] if n < 10 else [] for n, r in enumerate(results)}
    finally:
        store.close()
