"""The public API of ``MessageStore`` (DESIGN §3.3), on real files.

Put and get, pull statuses, message ids, key and unique-key queries (with hash collisions and
time ranges), offsets by time, reopening, the ``abort``/``lock`` files and ``broker.conf``.
Every store is verified with ``verify_store`` after the test (``open_store`` fixture).
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from postbox.storage_engine import (
    BrokerRole,
    ConfigError,
    FakeClock,
    FlushMode,
    GetStatus,
    Message,
    PutResult,
    StoreConfig,
)
from postbox.storage_engine.formats import HostAddress, UniqueKeyGenerator
from tests.storage_engine.conftest import START_MS, put_all, read_queue, small_config
from tests.support.rmq_decoder import index_key_hash, java_hash

TOPIC = "orders"


def _bodies(store, results: list[PutResult]) -> list[bytes]:
    return [store.read_message(r.log_position).body for r in results]


# ---- put and get ---------------------------------------------------------------------------

def test_put_get_round_trip_over_queues_and_segment_rolls(store, clock):
    rng = random.Random(1234)
    unique_keys = UniqueKeyGenerator(ip="192.168.1.20", pid=777, class_loader_hash=0x18B4AAC2)
    sent: dict[tuple[str, int], list[Message]] = {}
    results: list[PutResult] = []
    for i in range(240):
        topic, queue_id = ("orders", "audit")[i % 2], rng.randrange(4)
        message = Message(
            topic, rng.randbytes(rng.randrange(1, 600)), tags=("paid", "new", None)[i % 3],
            keys=[f"order-{i}", f"customer-{i % 11}"] if i % 4 else None,
            properties={"seq": str(i), "näme": "välue ✓"} if i % 5 == 0 else None,
            unique_key=unique_keys.next_key(clock.now_ms()) if i % 2 else None,
            born_host="[::1]:1234" if i % 6 == 0 else "10.1.2.3:5555",
            born_timestamp_ms=START_MS - 1000 + i, flag=i % 3, reconsume_count=i % 2)
        results.append(store.put_message(message, queue_id))
        sent.setdefault((topic, queue_id), []).append(message)
        clock.advance(3)
    assert store.wait_dispatched()

    assert store.stats()["commit_log"]["segment_count"] >= 5
    positions = [r.log_position for r in results]
    assert positions == sorted(positions)
    for (topic, queue_id), messages in sent.items():
        views = read_queue(store, topic, queue_id, batch=7)
        assert [v.queue_offset for v in views] == list(range(len(messages)))
        assert (store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)) == (
            0, len(messages))
        for view, message in zip(views, messages, strict=True):
            assert (view.topic, view.queue_id, view.body) == (topic, queue_id, message.body)
            assert view.tags == message.tags
            assert view.keys == (message.keys or [])
            assert view.unique_key == message.unique_key
            for name, value in (message.properties or {}).items():
                assert view.properties[name] == value
            assert (view.flag, view.reconsume_count) == (message.flag, message.reconsume_count)
            assert view.born_timestamp_ms == message.born_timestamp_ms
            assert str(view.born_host) == message.born_host
            assert str(view.store_host) == store.config.store_host
            assert view.body_crc_ok()
    for result in results[::13]:
        view = store.read_message(result.log_position)
        assert (view.store_size, view.store_timestamp_ms, view.queue_offset) == (
            result.store_size, result.store_timestamp_ms, result.queue_offset)


def test_ipv6_born_host_sets_sys_flag_and_reads_back(store):
    v4, v6 = put_all(store, [Message(TOPIC, b"x", born_host="10.0.0.1:1234"),
                             Message(TOPIC, b"x", born_host="[::1]:1234")])
    view = store.read_message(v6.log_position)
    assert view.sys_flag & 0x10 and not view.sys_flag & 0x20
    assert view.born_host == HostAddress("::1", 1234)
    assert str(view.born_host) == "[::1]:1234"
    assert len(view.raw_born_host) == 20
    assert v6.store_size == v4.store_size + 12
    assert store.read_message(v4.log_position).sys_flag == 0


def test_ipv6_store_host_gives_56_character_msg_ids(tmp_path, open_store):
    store = open_store(small_config(tmp_path / "store", store_host="[::1]:10911"))
    results = [store.put_message(Message(TOPIC, b"x%d" % i)) for i in range(3)]
    # v1 overhead + body + topic + 12 + 12 (the born host defaults to the IPv6 store host)
    # + 20 bytes of record-CRC property
    record_size = 91 + 2 + len(TOPIC) + 24 + 20
    assert [store.read_message(r.log_position).store_size for r in results] == [record_size] * 3
    assert [r.log_position for r in results] == [0, record_size, 2 * record_size]
    assert [r.store_size for r in results] == [record_size] * 3
    assert store.wait_dispatched(), "dispatch stopped"
    for result in results:
        view = store.read_message(result.log_position)
        assert view.sys_flag & 0x30 == 0x30
        assert view.store_size == result.store_size
        assert view.store_host == HostAddress("::1", 10911)
        assert len(result.msg_id) == 56 and result.msg_id == view.msg_id
        assert result.msg_id == "0" * 30 + "01" + "00002A9F" + f"{result.log_position:016X}"
        assert store.view_message_by_id(result.msg_id).log_position == result.log_position
    batch = store.put_messages([Message(TOPIC, b"y%d" % i) for i in range(3)])
    assert [r.log_position for r in batch] == [3 * record_size, 4 * record_size,
                                               5 * record_size]
    assert store.wait_dispatched(), "dispatch stopped"
    assert [m.body for m in store.get_message("g", TOPIC, 0, 0).messages] == [
        b"x0", b"x1", b"x2", b"y0", b"y1", b"y2"]


def test_put_messages_is_one_batch_with_one_store_time(store, clock):
    results = store.put_messages([Message(TOPIC, b"%d" % i) for i in range(5)], 2)
    assert store.wait_dispatched()
    assert [r.queue_offset for r in results] == list(range(5))
    assert {r.store_timestamp_ms for r in results} == {clock.now_ms()}
    assert [m.body for m in store.get_message("g", TOPIC, 2, 0).messages] == [
        b"%d" % i for i in range(5)]


def test_store_time_comes_from_the_clock_and_born_time_defaults_to_it(store, clock):
    clock.advance(12_345)
    (result,) = put_all(store, [Message(TOPIC, b"x")])
    view = store.read_message(result.log_position)
    assert view.store_timestamp_ms == view.born_timestamp_ms == START_MS + 12_345
    assert str(view.born_host) == store.config.store_host


# ---- get_message statuses ------------------------------------------------------------------

def test_get_message_statuses(store):
    put_all(store, [Message(TOPIC, b"m%d" % i) for i in range(5)])

    unknown = store.get_message("g", "nosuchtopic", 0, 0)
    assert (unknown.status, unknown.messages) == (GetStatus.NO_MATCHED_LOGIC_QUEUE, [])
    assert store.get_message("g", TOPIC, 3, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE

    found = store.get_message("g", TOPIC, 0, 1, 2)
    assert found.status is GetStatus.FOUND
    assert [m.body for m in found.messages] == [b"m1", b"m2"]
    assert (found.next_offset, found.min_offset, found.max_offset) == (3, 0, 5)

    one = store.get_message("g", TOPIC, 0, 5)
    assert (one.status, one.next_offset, one.messages) == (GetStatus.OFFSET_OVERFLOW_ONE, 5, [])

    badly = store.get_message("g", TOPIC, 0, 9)
    assert badly.status is GetStatus.OFFSET_OVERFLOW_BADLY
    assert badly.next_offset == 0  # RocketMQ: min offset when it is 0, else max offset


def test_offset_too_small_after_the_oldest_segment_is_gone(config, open_store):
    """A queue whose min offset is above 0 cannot be made through the API (there is no retention
    call yet), so delete the oldest segment and the derived files as retention would."""
    store = open_store(config)
    results = put_all(store, [Message(TOPIC, bytes(300), keys=[f"k{i}"]) for i in range(60)])
    store.close()
    first_kept = next(r for r in results if r.log_position >= 8192)
    os.remove(config.root_dir / "commitlog" / f"{0:020d}")
    shutil.rmtree(config.root_dir / "consumequeue")
    shutil.rmtree(config.root_dir / "index")

    store = open_store(config)
    assert store.min_offset(TOPIC, 0) == first_kept.queue_offset > 0
    small = store.get_message("g", TOPIC, 0, 0)
    assert small.status is GetStatus.OFFSET_TOO_SMALL
    assert (small.next_offset, small.min_offset, small.max_offset) == (
        first_kept.queue_offset, first_kept.queue_offset, 60)
    found = store.get_message("g", TOPIC, 0, small.next_offset, 1)
    assert found.messages[0].log_position == first_kept.log_position
    badly = store.get_message("g", TOPIC, 0, 61)
    assert (badly.status, badly.next_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 60)
    assert store.offset_by_time(TOPIC, 0, 0) == first_kept.queue_offset
    assert [v.queue_offset for v in store.query_by_key(TOPIC, "k59")] == [59]
    assert store.query_by_key(TOPIC, "k0") == []


def test_no_message_in_queue_after_its_only_record_is_truncated(config, open_store):
    store = open_store(config)
    put_all(store, [Message(TOPIC, b"kept")])
    (lost,) = put_all(store, [Message("lonely", b"lost")], 4)
    store.close()
    segment = config.root_dir / "commitlog" / f"{0:020d}"
    data = bytearray(segment.read_bytes())
    data[lost.log_position + 88] ^= 0xFF  # body byte: CRC mismatch at the tail
    segment.write_bytes(bytes(data))

    store = open_store(config)
    assert store.max_offset("lonely", 4) == 0
    empty = store.get_message("g", "lonely", 4, 0)
    assert (empty.status, empty.messages, empty.next_offset) == (
        GetStatus.NO_MESSAGE_IN_QUEUE, [], 0)
    assert store.get_message("g", TOPIC, 0, 0).messages[0].body == b"kept"


def test_tag_filter(store):
    tags = ["a", "b", "c", "Aa", "BB", None, "a"]
    put_all(store, [Message(TOPIC, b"%d" % i, tags=tag) for i, tag in enumerate(tags)])
    assert java_hash("Aa") == java_hash("BB")

    def pulled(expression, offset=0, max_count=32):
        result = store.get_message("g", TOPIC, 0, offset, max_count, tags=expression)
        return result.status, [m.body for m in result.messages], result.next_offset

    assert pulled("a || b") == (GetStatus.FOUND, [b"0", b"1", b"6"], 7)
    assert pulled(" b||c ") == (GetStatus.FOUND, [b"1", b"2"], 7)
    assert pulled("Aa") == (GetStatus.FOUND, [b"3"], 7)  # same hash as BB: exact check
    assert pulled("BB") == (GetStatus.FOUND, [b"4"], 7)
    assert pulled("*")[1] == pulled(None)[1] == [b"%d" % i for i in range(7)]
    assert pulled("x || y") == (GetStatus.NO_MATCHED_MESSAGE, [], 7)
    # like RocketMQ, filtered-out units do not count against max_count: the scan goes on
    assert pulled("a || b", offset=2, max_count=1) == (GetStatus.FOUND, [b"6"], 7)


def test_max_count_is_honoured_across_consume_queue_files(store):
    put_all(store, [Message(TOPIC, b"%d" % i) for i in range(25)])  # 10 units a file

    batch = store.get_message("g", TOPIC, 0, 5, 12)
    assert [m.queue_offset for m in batch.messages] == list(range(5, 17))
    assert batch.next_offset == 17
    everything = store.get_message("g", TOPIC, 0, 0, 32)
    assert [m.queue_offset for m in everything.messages] == list(range(25))
    assert everything.next_offset == 25
    assert [m.queue_offset for m in store.get_message("g", TOPIC, 0, 9, 1).messages] == [9]
    assert [m.queue_offset for m in store.get_message("g", TOPIC, 0, 9, 2).messages] == [9, 10]
    assert [m.queue_offset for m in store.get_message("g", TOPIC, 0, 20, 100).messages] == list(
        range(20, 25))


# ---- ids and queries -----------------------------------------------------------------------

def test_msg_id_is_32_uppercase_hex_and_finds_the_message(store):
    results = put_all(store, [Message(TOPIC, b"body-%d" % i) for i in range(30)])
    for result in results:
        assert len(result.msg_id) == 32
        assert result.msg_id == result.msg_id.upper()
        int(result.msg_id, 16)
        assert result.msg_id == "7F00000100002A9F" + f"{result.log_position:016X}"
        view = store.view_message_by_id(result.msg_id)
        assert (view.log_position, view.body, view.msg_id) == (
            result.log_position, b"body-%d" % result.queue_offset, result.msg_id)


def test_query_by_key_filters_hash_collisions_by_the_real_key(store):
    assert index_key_hash(f"{TOPIC}#Aa") == index_key_hash(f"{TOPIC}#BB")
    put_all(store, [Message(TOPIC, b"Aa-1", keys=["Aa"]), Message(TOPIC, b"BB-1", keys=["BB"]),
                    Message(TOPIC, b"Aa-2", keys="x Aa")])

    assert [v.body for v in store.query_by_key(TOPIC, "Aa")] == [b"Aa-1", b"Aa-2"]
    assert [v.body for v in store.query_by_key(TOPIC, "BB")] == [b"BB-1"]
    assert [v.body for v in store.query_by_key(TOPIC, "x")] == [b"Aa-2"]
    assert store.query_by_key(TOPIC, "Ab") == []


def test_query_by_key_filters_by_topic(store):
    put_all(store, [Message("alpha", b"a", keys=["shared"]), Message("beta", b"b", keys=["shared"]),
                    Message("alpha", b"a2", keys=["shared"])])
    assert [v.body for v in store.query_by_key("alpha", "shared")] == [b"a", b"a2"]
    assert [v.body for v in store.query_by_key("beta", "shared")] == [b"b"]
    assert store.query_by_key("gamma", "shared") == []


def test_query_by_key_returns_at_most_64_newest_oldest_first(tmp_path, open_store):
    store = open_store(small_config(tmp_path / "store", tiny=False))
    results = put_all(store, [Message(TOPIC, b"%d" % i, keys=["hot"]) for i in range(70)])

    found = store.query_by_key(TOPIC, "hot")
    assert [v.log_position for v in found] == [r.log_position for r in results[-64:]]
    assert [v.log_position for v in store.query_by_key(TOPIC, "hot", max_count=10)] == [
        r.log_position for r in results[-10:]]
    assert len(store.query_by_key(TOPIC, "hot", max_count=500)) == 64


def test_query_by_key_with_a_time_range(store, clock):
    stored = []
    for i in range(3):
        stored += put_all(store, [Message(TOPIC, b"t%d" % i, keys=["timed"])])
        clock.advance(5_000)

    def bodies(begin_ms, end_ms=None):
        return [v.body for v in store.query_by_key(TOPIC, "timed", begin_ms=begin_ms,
                                                   end_ms=end_ms)]

    assert bodies(0) == [b"t0", b"t1", b"t2"]
    assert bodies(START_MS + 4_000, START_MS + 6_000) == [b"t1"]
    assert bodies(START_MS + 5_000) == [b"t1", b"t2"]
    assert bodies(0, START_MS + 999) == [b"t0"]
    assert bodies(START_MS + 11_000) == []
    assert [r.store_timestamp_ms for r in stored] == [START_MS, START_MS + 5_000,
                                                      START_MS + 10_000]


def test_query_by_unique_key(store, clock):
    generator = UniqueKeyGenerator(ip="10.0.0.9", pid=31337, class_loader_hash=0x18B4AAC2)
    keys = [generator.next_key(clock.now_ms()) for _ in range(20)]
    put_all(store, [Message(TOPIC, b"u%d" % i, unique_key=key) for i, key in enumerate(keys)])
    put_all(store, [Message("other", b"elsewhere", unique_key=keys[3])])

    for i, key in enumerate(keys):
        assert [v.body for v in store.query_by_unique_key(TOPIC, key)] == [b"u%d" % i]
    assert [v.body for v in store.query_by_unique_key("other", keys[3])] == [b"elsewhere"]
    assert store.query_by_unique_key(TOPIC, "0" * 32) == []


# ---- offsets -------------------------------------------------------------------------------

def test_offset_by_time(store, clock):
    results = []
    for i in range(10):
        results += put_all(store, [Message(TOPIC, b"%d" % i)])
        clock.advance(10)

    for result in results:
        ts = result.store_timestamp_ms
        assert store.offset_by_time(TOPIC, 0, ts) == result.queue_offset
        assert store.offset_by_time(TOPIC, 0, ts - 2) == result.queue_offset
    assert store.offset_by_time(TOPIC, 0, results[0].store_timestamp_ms - 20_000) == 0
    assert store.offset_by_time(TOPIC, 0, results[-1].store_timestamp_ms + 1) == 10
    assert store.offset_by_time(TOPIC, 7, START_MS) == 0
    assert store.offset_by_time("unknown", 0, START_MS) == 0


def test_min_and_max_offsets(store):
    assert (store.min_offset(TOPIC, 0), store.max_offset(TOPIC, 0)) == (0, 0)
    put_all(store, [Message(TOPIC, b"x")] * 13, 1)
    assert (store.min_offset(TOPIC, 1), store.max_offset(TOPIC, 1)) == (0, 13)
    assert (store.min_offset(TOPIC, 0), store.max_offset(TOPIC, 0)) == (0, 0)
    assert store.topics() == {TOPIC: [1]}


# ---- lifecycle -----------------------------------------------------------------------------

def test_close_and_reopen_keeps_everything_and_appends_after_it(config, open_store):
    clock = FakeClock(START_MS)
    store = open_store(config, clock=clock)
    first = []
    for i in range(45):
        first.append(store.put_message(Message(TOPIC, b"first-%d" % i, keys=[f"k{i % 5}"],
                                               tags="t"), i % 3))
        clock.advance(100)
    assert store.wait_dispatched()
    end_position = store.stats()["commit_log"]["max_position"]
    store.close()

    reopened = open_store(config, clock=FakeClock(START_MS + 60_000))
    assert [reopened.max_offset(TOPIC, q) for q in range(3)] == [15, 15, 15]
    assert [v.body for v in reopened.query_by_key(TOPIC, "k2")] == [
        b"first-%d" % i for i in range(2, 45, 5)]
    assert [m.body for m in read_queue(reopened, TOPIC, 1)] == [
        b"first-%d" % i for i in range(1, 45, 3)]

    second = put_all(reopened, [Message(TOPIC, b"second", keys=["k2"])], 1)
    assert second[0].queue_offset == 15
    assert second[0].log_position >= end_position
    assert reopened.query_by_key(TOPIC, "k2")[-1].body == b"second"
    assert reopened.view_message_by_id(first[7].msg_id).body == b"first-7"


def test_abort_marker_and_lock_file(config, open_store):
    root = config.root_dir
    store = open_store(config)
    assert (root / "abort").exists()
    assert (root / "lock").read_bytes() == b"lock"
    put_all(store, [Message(TOPIC, b"x")])
    store.close()
    assert not (root / "abort").exists()
    assert (root / "lock").read_bytes() == b"lock"
    assert (root / "checkpoint").stat().st_size == 4096


# ---- broker.conf ---------------------------------------------------------------------------

BROKER_CONF = """\
# a broker.conf as RocketMQ ships it
brokerClusterName = DefaultCluster
brokerName = broker-a
brokerId = 0
deleteWhen = 04
fileReservedTime = 48
brokerRole = SYNC_MASTER
flushDiskType = SYNC_FLUSH
storePathRootDir = {root}
mappedFileSizeCommitLog = 65536
mappedFileSizeConsumeQueue = 6000
maxHashSlotNum = 1024
maxIndexNum = 4096
maxMessageSize = 65536
messageDelayLevel = 1s 5s 10s 30s 1m 2h
diskMaxUsedSpaceRatio = 88
postboxSomethingUnknown = 1
"""


def test_store_config_from_broker_conf(tmp_path, open_store):
    conf = tmp_path / "broker.conf"
    conf.write_text(BROKER_CONF.format(root=tmp_path / "store"), encoding="utf-8")

    config = StoreConfig.from_broker_conf(conf)
    assert config.root_dir == tmp_path / "store"
    assert config.commit_log.segment_size_bytes == 65536
    assert config.commit_log.max_message_size_bytes == 65536
    assert config.consume_queue.units_per_file == 300
    assert (config.key_index.slot_count_max, config.key_index.entry_count_max) == (1024, 4096)
    assert config.flush.mode is FlushMode.SYNC
    assert config.delay.levels_ms == (1000, 5000, 10000, 30000, 60000, 7200000)
    assert config.retention.file_reserved_hours == 48
    assert config.retention.delete_when == "04"
    assert config.retention.disk_max_used_space_ratio == 88
    assert config.broker_role is BrokerRole.SYNC_MASTER
    assert config.unknown_broker_keys == ("postboxSomethingUnknown",)

    with pytest.raises(ConfigError, match="postboxSomethingUnknown"):
        StoreConfig.from_broker_conf(conf, strict=True)

    store = open_store(config)
    (result,) = put_all(store, [Message(TOPIC, b"from broker.conf")])
    assert store.read_message(result.log_position).body == b"from broker.conf"
    assert (config.root_dir / "commitlog" / f"{0:020d}").stat().st_size == 65536


def test_store_config_from_a_broker_conf_mapping_with_overrides(tmp_path):
    config = StoreConfig.from_broker_conf(
        {"mappedFileSizeConsumeQueue": "6000", "brokerName": "b"}, strict=True,
        root_dir=Path(tmp_path))
    assert config.consume_queue.units_per_file == 300
    assert config.unknown_broker_keys == ()
    with pytest.raises(ConfigError, match="flushDiskType"):
        StoreConfig.from_broker_conf({"flushDiskType": "SOMETIMES"}, root_dir=tmp_path)
    with pytest.raises(ConfigError, match="storePathRootDir"):
        StoreConfig.from_broker_conf({"brokerName": "b"})
