"""Byte compatibility with stores written by Java RocketMQ and rocketmq-rust (the acceptance).

The golden stores in ``shared/vectors`` are copied into ``tmp_path`` and opened with the real
engine; every expected value comes from ``VECTORS.md`` or from the independent decoder in
``tests/support/rmq_decoder.py``, never from ``storage_engine`` itself. The last test turns the
check around: files Postbox writes must decode cleanly with that independent decoder.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from postbox.storage_engine import (
    CommitLogConfig,
    ConsumeQueueConfig,
    FakeClock,
    GetStatus,
    KeyIndexConfig,
    Message,
    MessageView,
    StoreConfig,
)
from postbox.storage_engine.formats import MAGIC_V1, RecordFields, UniqueKeyGenerator, encode_record
from postbox.storage_engine.formats import index_key_hash as engine_index_key_hash
from postbox.storage_engine.store.key_index import KeyIndexFile
from tests.storage_engine.conftest import (
    TINY_SEGMENT_SIZE_BYTES,
    put_all,
    read_queue,
    small_config,
)
from tests.support.rmq_decoder import (
    Record,
    by_position,
    check_consume_queue,
    check_index_chains,
    index_key_hash,
    index_lookup,
    java_hash,
    offset_msg_id,
    read_consume_queue,
    read_index_file,
    scan_commit_log,
)

pytestmark = pytest.mark.vectors

JAVA_SEGMENT_SIZE_BYTES = 8192
JAVA_CQ_FILE_SIZE_BYTES = 200  # 10 units
BODY = b"Once, there was a chance for me!"
TAG1_HASH = 2567159  # VECTORS.md §1: hash("TAG1")

RUST_STORE = "rust-0.9.0-rocketmq-rust/local-file"
RUST_INDEX_NAME = "20260815011551705"
RUST_TOPIC = "V1UpgradeTopic"
RUST_KEY = "v1-upgrade-key"
RUST_STORE_MS = (1786727751703, 1786727751704)  # store times of the two rust messages
RUST_INDEX_SLOTS, RUST_INDEX_ENTRIES = 32, 128


@dataclass(frozen=True)
class JavaStore:
    """One Java-written store of the vectors and what VECTORS.md §3.3 says about it."""

    path: str
    message_count: int
    store_host: str
    first_born_ms: int
    first_store_ms: int
    segment_firsts: tuple[tuple[int, int, str], ...]  # (position, queue offset, offsetMsgId)
    java_units: int  # ConsumeQueue units shipped with the store


ERICPAN = JavaStore(
    "java-4.2.0-ericpan/unit_test_store", 179, "192.168.199.124:8123",
    1532257321553, 1532257321553,
    ((0, 0, "C0A8C77C00001FBB0000000000000000"),
     (8192, 47, "C0A8C77C00001FBB0000000000002000"),
     (16384, 94, "C0A8C77C00001FBB0000000000004000"),
     (24576, 141, "C0A8C77C00001FBB0000000000006000")),
    56)
SHAOXUBAO = JavaStore(
    "java-4.4.0-shaoxubao/unit_test_store", 47, "10.1.30.38:8123",
    1551613204833, 1551613204834,
    ((0, 0, "0A011E2600001FBB0000000000000000"),),
    0)
JAVA_STORES = [pytest.param(ERICPAN, id="java-4.2.0"), pytest.param(SHAOXUBAO, id="java-4.4.0")]


def java_config(root: Path) -> StoreConfig:
    """The configuration the Java ``ConsumeQueueTest`` ran with (index kept tiny)."""
    return StoreConfig(
        root_dir=root,
        commit_log=CommitLogConfig(segment_size_bytes=JAVA_SEGMENT_SIZE_BYTES),
        consume_queue=ConsumeQueueConfig(units_per_file=10),
        key_index=KeyIndexConfig(slot_count_max=32, entry_count_max=128))


def rust_config(root: Path) -> StoreConfig:
    """The geometry of the rocketmq-rust fixture: 4 KiB segments, 10-unit queues, 32/128."""
    return StoreConfig(
        root_dir=root,
        commit_log=CommitLogConfig(segment_size_bytes=4096),
        consume_queue=ConsumeQueueConfig(units_per_file=10),
        key_index=KeyIndexConfig(slot_count_max=RUST_INDEX_SLOTS,
                                 entry_count_max=RUST_INDEX_ENTRIES))


def decode_java_log(root: Path) -> list[Record]:
    """The records of a copied Java store, found by the independent decoder."""
    records, problems = scan_commit_log(str(root / "commitlog"), JAVA_SEGMENT_SIZE_BYTES)
    assert problems == []
    return records


def assert_view_matches_record(view: MessageView, record: Record) -> None:
    """Every field the engine decoded equals what the independent decoder found."""
    assert (view.log_position, view.store_size) == (record.position, record.total_size)
    assert (view.topic, view.queue_id, view.queue_offset) == (
        record.topic, record.queue_id, record.queue_offset)
    assert view.body == record.body
    assert view.body_crc == record.body_crc
    assert view.properties == record.properties
    assert (view.flag, view.sys_flag) == (record.flag, record.sys_flag)
    assert (view.born_timestamp_ms, view.store_timestamp_ms) == (
        record.born_timestamp, record.store_timestamp)
    assert (str(view.born_host), str(view.store_host)) == (record.born_host, record.store_host)
    assert view.reconsume_count == record.reconsume_times
    assert view.prepared_transaction_position == record.prepared_tx_offset
    assert view.msg_id == offset_msg_id(record)


# ---- Java commit logs: every message, every field ------------------------------------------

@pytest.mark.parametrize("java", JAVA_STORES)
def test_every_java_message_reads_back_through_get_message(java, vectors_copy, open_store):
    root = vectors_copy(java.path)
    records = decode_java_log(root)
    assert len(records) == java.message_count

    store = open_store(java_config(root))
    assert (store.min_offset("abc", 0), store.max_offset("abc", 0)) == (0, java.message_count)
    views = read_queue(store, "abc", 0, batch=32)

    assert [v.queue_offset for v in views] == list(range(java.message_count))
    assert [v.log_position for v in views] == [r.position for r in records]
    for view, record in zip(views, records, strict=True):
        assert_view_matches_record(view, record)


@pytest.mark.parametrize("java", JAVA_STORES)
def test_every_java_message_reads_back_by_position(java, vectors_copy, open_store):
    root = vectors_copy(java.path)
    records = decode_java_log(root)
    store = open_store(java_config(root))

    for record in records:
        assert_view_matches_record(store.read_message(record.position), record)
    assert [v.log_position for v in store.iter_messages()] == [r.position for r in records]


@pytest.mark.parametrize("java", JAVA_STORES)
def test_java_record_0_field_by_field(java, vectors_copy, open_store):
    """VECTORS.md §3.1 (4.4.0) and §3.3 (both): the first record of the store."""
    store = open_store(java_config(vectors_copy(java.path)))
    view = store.read_message(0)

    assert view.store_size == 172
    assert view.magic == MAGIC_V1 and not view.is_v2
    assert view.body_crc == 151131488
    assert (view.queue_id, view.flag, view.queue_offset, view.log_position) == (0, 0, 0, 0)
    assert view.sys_flag == 0
    assert view.born_timestamp_ms == java.first_born_ms
    assert view.store_timestamp_ms == java.first_store_ms
    assert str(view.born_host) == "127.0.0.1:0"
    assert str(view.store_host) == java.store_host
    assert (view.reconsume_count, view.prepared_transaction_position) == (0, 0)
    assert view.body == BODY
    assert view.topic == "abc"
    assert len(view.properties_bytes) == 46
    assert view.properties == {"0": "imagoodperson0", "KEYS": str(java.first_born_ms),
                               "TAGS": "TAG1"}
    assert view.tags == "TAG1"
    assert view.keys == [str(java.first_born_ms)]
    assert view.unique_key is None
    assert view.msg_id == java.segment_firsts[0][2]


@pytest.mark.parametrize("java", JAVA_STORES)
def test_first_message_of_every_java_segment_has_the_documented_msg_id(java, vectors_copy,
                                                                       open_store):
    store = open_store(java_config(vectors_copy(java.path)))
    for position, queue_offset, msg_id in java.segment_firsts:
        view = store.read_message(position)
        assert (view.queue_offset, view.msg_id) == (queue_offset, msg_id)
        by_id = store.view_message_by_id(msg_id)
        assert (by_id.log_position, by_id.body) == (position, BODY)
        result = store.get_message("g", "abc", 0, queue_offset, 1)
        assert result.status is GetStatus.FOUND
        assert [m.log_position for m in result.messages] == [position]


@pytest.mark.parametrize("java", JAVA_STORES)
def test_java_records_re_encode_byte_for_byte(java, vectors_copy, open_store):
    """``encode_record`` of the decoded fields gives back the bytes the Java broker wrote."""
    root = vectors_copy(java.path)
    segments = {int(p.name): p.read_bytes() for p in (root / "commitlog").iterdir()}
    store = open_store(java_config(root))

    views = list(store.iter_messages())
    assert len(views) == java.message_count
    for view in views:
        base = view.log_position - view.log_position % JAVA_SEGMENT_SIZE_BYTES
        offset = view.log_position - base
        java_bytes = segments[base][offset:offset + view.store_size]
        encoded = encode_record(RecordFields(
            topic=view.topic, body=view.body, properties=view.properties_bytes,
            queue_id=view.queue_id, queue_offset=view.queue_offset,
            log_position=view.log_position, born_timestamp_ms=view.born_timestamp_ms,
            born_host=view.raw_born_host, store_timestamp_ms=view.store_timestamp_ms,
            store_host=view.raw_store_host, flag=view.flag, sys_flag=view.sys_flag,
            reconsume_count=view.reconsume_count,
            prepared_transaction_position=view.prepared_transaction_position))
        assert encoded == java_bytes, f"record at position={view.log_position}"
    assert views[0].store_size == 172


@pytest.mark.parametrize("java", JAVA_STORES)
def test_every_java_message_is_found_by_its_key(java, vectors_copy, open_store):
    """Opening a Java store must leave every KEYS value queryable (RocketMQ's abnormal recovery
    re-dispatches the whole log when the checkpoint is zero, building the index for it)."""
    root = vectors_copy(java.path)
    records = decode_java_log(root)
    store = open_store(java_config(root))

    unindexed = []
    for record in records:
        key = record.properties["KEYS"]
        found = store.query_by_key("abc", key)
        if record.position not in [v.log_position for v in found]:
            unindexed.append(record.position)
        assert all(key in view.keys for view in found)
    assert unindexed == [], f"{len(unindexed)} of {len(records)} messages not found by key"


# ---- Java consume queues -------------------------------------------------------------------

def test_ericpan_consume_queue_keeps_java_units_and_gets_the_rest_rebuilt(vectors_copy,
                                                                           open_store):
    root = vectors_copy(ERICPAN.path)
    queue_dir = str(root / "consumequeue" / "abc" / "0")
    java_units = read_consume_queue(queue_dir, JAVA_CQ_FILE_SIZE_BYTES)
    records = decode_java_log(root)
    assert len(java_units) == ERICPAN.java_units

    store = open_store(java_config(root))
    assert store.max_offset("abc", 0) == ERICPAN.message_count  # units 56..178 rebuilt
    store.close()

    units = read_consume_queue(queue_dir, JAVA_CQ_FILE_SIZE_BYTES)
    assert units[:ERICPAN.java_units] == java_units  # Java's units untouched (ext addresses)
    assert [(p, s) for p, s, _ in units] == [(r.position, r.total_size) for r in records]
    assert all(code == TAG1_HASH == java_hash("TAG1") for _, _, code in
               units[ERICPAN.java_units:])
    assert check_consume_queue(units, by_position(records)) == []
    assert all(os.path.getsize(os.path.join(queue_dir, name)) == JAVA_CQ_FILE_SIZE_BYTES
               for name in os.listdir(queue_dir))


def test_shaoxubao_consume_queue_is_rebuilt_from_the_java_log(vectors_copy, open_store):
    root = vectors_copy(SHAOXUBAO.path)
    records = decode_java_log(root)
    assert not (root / "consumequeue").exists()

    store = open_store(java_config(root))
    assert store.max_offset("abc", 0) == SHAOXUBAO.message_count
    store.close()

    queue_dir = root / "consumequeue" / "abc" / "0"
    units = read_consume_queue(str(queue_dir), JAVA_CQ_FILE_SIZE_BYTES)
    assert [(p, s) for p, s, _ in units] == [(r.position, r.total_size) for r in records]
    assert {code for _, _, code in units} == {TAG1_HASH}
    assert check_consume_queue(units, by_position(records)) == []
    # VECTORS.md §4.2: the plain unit of messages #0 and #1
    first_file = (queue_dir / f"{0:020d}").read_bytes()
    assert first_file[:40].hex() == ("0000000000000000" "000000ac" "0000000000272bf7"
                                     "00000000000000ac" "000000ac" "0000000000272bf7")


@pytest.mark.parametrize("java", JAVA_STORES)
def test_index_built_over_a_java_log_passes_the_independent_checks(java, vectors_copy,
                                                                   open_store):
    root = vectors_copy(java.path)
    config = java_config(root)
    store = open_store(config)
    store.close()

    records = decode_java_log(root)
    index_paths = sorted((root / "index").iterdir())
    assert index_paths
    for path in index_paths:
        index = read_index_file(str(path), config.key_index.slot_count_max,
                                config.key_index.entry_count_max)
        assert check_index_chains(index, by_position(records),
                                  config.key_index.slot_count_max) == []


# ---- rocketmq-rust IndexFile and store -----------------------------------------------------

def test_rust_index_file_is_read_by_key_index_file(vectors_copy):
    path = vectors_copy(RUST_STORE) / "index" / RUST_INDEX_NAME
    key_hash = engine_index_key_hash(f"{RUST_TOPIC}#{RUST_KEY}")
    assert key_hash == index_key_hash(f"{RUST_TOPIC}#{RUST_KEY}") == 1354830161

    index_file = KeyIndexFile(path, RUST_INDEX_SLOTS, RUST_INDEX_ENTRIES, create=False)
    try:
        found: list[int] = []
        index_file.select_positions(key_hash, 64, 0, 1 << 62, found)
        assert found == [141, 0]
        assert (index_file.begin_timestamp_ms, index_file.end_timestamp_ms) == RUST_STORE_MS
        assert (index_file.begin_position, index_file.end_position) == (0, 141)
        assert (index_file.used_slot_count, index_file.entry_count) == (1, 3)
    finally:
        index_file.close()


def test_index_file_we_write_is_byte_identical_to_rust(vectors_copy, tmp_path):
    rust_bytes = (vectors_copy(RUST_STORE) / "index" / RUST_INDEX_NAME).read_bytes()
    ours = tmp_path / RUST_INDEX_NAME
    key_hash = engine_index_key_hash(f"{RUST_TOPIC}#{RUST_KEY}")

    index_file = KeyIndexFile(ours, RUST_INDEX_SLOTS, RUST_INDEX_ENTRIES, create=True)
    try:
        assert index_file.put_key(key_hash, 0, RUST_STORE_MS[0])
        assert index_file.put_key(key_hash, 141, RUST_STORE_MS[1])
        index_file.flush()
    finally:
        index_file.close()

    assert len(rust_bytes) == 2728
    assert ours.read_bytes() == rust_bytes


def test_rust_store_opens_and_answers_get_and_key_queries(vectors_copy, open_store):
    root = vectors_copy(RUST_STORE)
    index_before = (root / "index" / RUST_INDEX_NAME).read_bytes()
    queue_file = root / "consumequeue" / RUST_TOPIC / "0" / f"{0:020d}"
    queue_before = queue_file.read_bytes()

    store = open_store(rust_config(root))
    result = store.get_message("g", RUST_TOPIC, 0, 0, 32)
    assert result.status is GetStatus.FOUND
    assert [m.body for m in result.messages] == [b"v0.9.0-message-0", b"v0.9.0-message-1"]
    assert [m.log_position for m in result.messages] == [0, 141]
    assert store.max_offset(RUST_TOPIC, 0) == 2
    found = store.query_by_key(RUST_TOPIC, RUST_KEY)
    assert [v.body for v in found] == [b"v0.9.0-message-0", b"v0.9.0-message-1"]
    assert [str(v.store_host) for v in found] == ["127.0.0.1:10911"] * 2
    store.close()

    # nothing was written, so rust's derived files are unchanged by an open/close
    assert (root / "index" / RUST_INDEX_NAME).read_bytes() == index_before
    assert queue_file.read_bytes() == queue_before


def test_appending_to_the_rust_store_extends_its_files_consistently(vectors_copy, open_store):
    root = vectors_copy(RUST_STORE)
    clock = FakeClock(RUST_STORE_MS[1] + 2_500)
    store = open_store(rust_config(root), clock=clock)
    (result,) = put_all(store, [Message(RUST_TOPIC, b"postbox-message-2", keys=[RUST_KEY])])
    assert (result.queue_offset, result.log_position) == (2, 282)
    assert [v.body for v in store.query_by_key(RUST_TOPIC, RUST_KEY)] == [
        b"v0.9.0-message-0", b"v0.9.0-message-1", b"postbox-message-2"]
    store.close()

    records, problems = scan_commit_log(str(root / "commitlog"), 4096)
    assert problems == [] and len(records) == 3
    units = read_consume_queue(str(root / "consumequeue" / RUST_TOPIC / "0"), 200)
    assert check_consume_queue(units, by_position(records)) == []
    index = read_index_file(str(root / "index" / RUST_INDEX_NAME), RUST_INDEX_SLOTS,
                            RUST_INDEX_ENTRIES)
    assert check_index_chains(index, by_position(records), RUST_INDEX_SLOTS) == []
    assert index_lookup(index, f"{RUST_TOPIC}#{RUST_KEY}") == [282, 141, 0]


# ---- files Postbox writes, checked by the independent decoder ------------------------------

TOPICS = ("orders", "payments", "%RETRY%billing", "%RETRY%" + "long" * 40)  # last one is v2
TAGS = ("paid", "new", None, "Aa", "BB", "中文")
QUEUE_COUNT = 3
MESSAGE_COUNT = 360
INDEX_ENTRIES = 64  # 63 keys a file: several index files


def _workload(seed: int) -> list[tuple[Message, int]]:
    rng = random.Random(seed)
    unique_keys = UniqueKeyGenerator(ip="10.0.0.7", pid=4242, class_loader_hash=0x18B4AAC2)
    work = []
    for i in range(MESSAGE_COUNT):
        keys = [f"order-{i}", f"cust-{i % 7}"] if i % 3 else []
        properties = {"seq": str(i), "région": "éà"} if i % 4 == 0 else None
        work.append((Message(
            TOPICS[i % len(TOPICS)], rng.randbytes(rng.randrange(1, 400)),
            tags=TAGS[i % len(TAGS)], keys=keys, properties=properties,
            unique_key=unique_keys.next_key(1_700_000_000_000 + i) if i % 2 else None,
            born_host="[2001:db8::7]:4567" if i % 5 == 0 else "10.0.0.7:4567",
            born_timestamp_ms=1_600_000_000_000 + i), rng.randrange(QUEUE_COUNT)))
    return work


def _expected_properties(message: Message) -> dict[str, str]:
    expected = dict(message.properties or {})
    if message.keys:
        expected["KEYS"] = " ".join(message.keys)
    if message.tags:
        expected["TAGS"] = message.tags
    if message.unique_key:
        expected["UNIQ_KEY"] = message.unique_key
    return expected


def test_files_postbox_writes_decode_with_the_independent_decoder(tmp_path, open_store):
    config = small_config(tmp_path / "store", entry_count_max=INDEX_ENTRIES)
    clock = FakeClock()
    store = open_store(config, clock=clock)
    work = _workload(seed=20260815)
    for message, queue_id in work:
        store.put_message(message, queue_id)
        clock.advance(137)
    assert store.wait_dispatched()
    store.close()
    root = config.root_dir

    records, problems = scan_commit_log(str(root / "commitlog"), TINY_SEGMENT_SIZE_BYTES)
    assert problems == []
    assert len(records) == MESSAGE_COUNT
    assert len(os.listdir(root / "commitlog")) >= 5  # several segment rolls
    next_offset: dict[tuple[str, int], int] = {}
    for (message, queue_id), record in zip(work, records, strict=True):
        key = (message.topic, queue_id)
        assert (record.topic, record.queue_id, record.queue_offset) == (
            message.topic, queue_id, next_offset.get(key, 0))
        next_offset[key] = record.queue_offset + 1
        assert record.body == message.body
        assert record.properties == _expected_properties(message)
        assert record.born_timestamp == message.born_timestamp_ms
        assert record.born_host == message.born_host
        assert record.store_host == config.store_host
        assert record.magic == (0xDAA320AB if len(message.topic) > 127 else 0xDAA320A7)

    positions = by_position(records)
    for topic, queue_id in next_offset:
        units = read_consume_queue(str(root / "consumequeue" / topic / str(queue_id)),
                                   config.consume_queue.file_size_bytes)
        assert len(units) == next_offset[(topic, queue_id)]
        assert check_consume_queue(units, positions) == [], (topic, queue_id)

    index_paths = sorted((root / "index").iterdir())
    assert len(index_paths) >= 3
    indexes = [read_index_file(str(path), config.key_index.slot_count_max, INDEX_ENTRIES)
               for path in index_paths]
    for path, index in zip(index_paths, indexes, strict=True):
        assert check_index_chains(index, positions, config.key_index.slot_count_max) == [], path
    for record in records[::17]:
        for key in record.properties.get("KEYS", "").split():
            found = {p for index in indexes for p in index_lookup(index, f"{record.topic}#{key}")}
            assert record.position in found



def test_store_reads_what_it_wrote_for_the_same_workload(tmp_path, open_store):
    """The engine's own read path agrees with the decoder's view of the same files."""
    config = small_config(tmp_path / "store", entry_count_max=INDEX_ENTRIES)
    store = open_store(config, clock=FakeClock())
    work = _workload(seed=7)
    for message, queue_id in work:
        store.put_message(message, queue_id)
    assert store.wait_dispatched()
    store.close()
    records, problems = scan_commit_log(str(config.root_dir / "commitlog"), TINY_SEGMENT_SIZE_BYTES)
    assert problems == []

    reopened = open_store(config)
    for record in records:
        assert_view_matches_record(reopened.read_message(record.position), record)
    for topic in TOPICS:
        for queue_id in range(QUEUE_COUNT):
            expected = [r for r in records if (r.topic, r.queue_id) == (topic, queue_id)]
            views = read_queue(reopened, topic, queue_id) if expected else []
            assert [v.log_position for v in views] == [r.position for r in expected]
