"""Bad input and damaged files: the right error, with context, and nothing already stored harmed.

Every test first stores a few messages, then does something wrong and checks the error type and
message, that the earlier messages still read back, and (through the ``open_store`` fixture)
that ``verify_store`` finds the files consistent afterwards. Tests that damage files on purpose
assert what ``verify_store`` reports instead.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from postbox.storage_engine import (
    CorruptionError,
    GetStatus,
    InvalidMessageError,
    Message,
    MessageNotFoundError,
    MessageStore,
    PutResult,
    StoreClosedError,
    StoreLockedError,
    verify_store,
)
from postbox.storage_engine.errors import (
    InvalidMessageIdError,
    InvalidQueueError,
    InvalidTopicError,
    MessageTooLargeError,
    PropertiesTooLargeError,
)
from tests.storage_engine.conftest import TINY_SEGMENT_SIZE_BYTES, put_all, small_config
from tests.support.paths import REPO_ROOT

TOPIC = "orders"


def _seed(store: MessageStore) -> list[PutResult]:
    messages = [Message(TOPIC, b"order-%d" % i, tags="paid", keys=[f"o-{i}"]) for i in range(5)]
    return put_all(store, messages, 0) + put_all(store, messages[:2], 1)


def assert_intact(store: MessageStore, results: list[PutResult]) -> None:
    """The seeded messages are all still there, by position and through their queue."""
    for result in results:
        view = store.read_message(result.log_position)
        assert (view.topic, view.queue_id, view.queue_offset) == (
            result.topic, result.queue_id, result.queue_offset)
        got = store.get_message("g", result.topic, result.queue_id, result.queue_offset, 1)
        assert got.status is GetStatus.FOUND
        assert got.messages[0].body == view.body
    assert store.max_offset(TOPIC, 0) >= 5
    assert store.max_offset(TOPIC, 1) >= 2


@pytest.fixture
def seeded(store):
    """The store fixture holding 7 messages of ``orders`` (queues 0 and 1)."""
    return store, _seed(store)


def _tree(root: Path) -> set[Path]:
    return set(root.rglob("*"))


# ---- topics --------------------------------------------------------------------------------

BAD_TOPICS = [
    pytest.param("a/b", id="slash"),
    pytest.param("../escape", id="parent-path"),
    pytest.param("..", id="dot-dot"),
    pytest.param(".", id="dot"),
    pytest.param("with space", id="space"),
    pytest.param("", id="empty"),
    pytest.param("tópico", id="non-ascii"),
    pytest.param("x" * 128, id="128-chars"),
    pytest.param("%RETRY%" + "x" * 249, id="retry-256-chars"),
    pytest.param("a\x00b", id="nul"),
    pytest.param(None, id="none"),
    pytest.param(b"orders", id="bytes"),
]


@pytest.mark.parametrize("topic", BAD_TOPICS)
def test_bad_topic_is_rejected_and_touches_no_file(seeded, tmp_path, topic):
    store, results = seeded
    before = _tree(tmp_path)

    with pytest.raises(InvalidTopicError, match="topic") as caught:
        store.put_message(Message(topic, b"x"))
    with pytest.raises(InvalidTopicError):
        store.put_messages([Message(TOPIC, b"fine"), Message(topic, b"x")])
    assert store.wait_dispatched()

    assert isinstance(caught.value, InvalidMessageError)
    assert _tree(tmp_path) == before  # no directory or file created, inside or outside
    assert store.topics() == {TOPIC: [0, 1]}
    assert_intact(store, results)


def test_longest_topics_are_accepted(seeded):
    store, results = seeded
    normal, system = "n" * 127, "%RETRY%" + "x" * 248
    stored = put_all(store, [Message(normal, b"a"), Message(system, b"b")])

    assert not store.read_message(stored[0].log_position).is_v2
    view = store.read_message(stored[1].log_position)
    assert view.is_v2 and view.topic == system and len(system) == 255
    assert store.get_message("g", system, 0, 0).messages[0].body == b"b"
    assert_intact(store, results)


# ---- sizes ---------------------------------------------------------------------------------

def test_body_over_max_message_size_is_rejected(tmp_path, open_store):
    store = open_store(small_config(tmp_path / "store", max_message_size_bytes=1024))
    results = _seed(store)

    with pytest.raises(MessageTooLargeError) as caught:
        store.put_message(Message(TOPIC, bytes(1025)))
    assert "max_message_size_bytes" in str(caught.value)
    assert caught.value.setting == "commit_log.max_message_size_bytes"
    assert caught.value.topic == TOPIC
    (at_limit,) = put_all(store, [Message(TOPIC, bytes(1024))])
    assert at_limit.queue_offset == 5
    assert store.read_message(at_limit.log_position).body == bytes(1024)
    assert store.max_offset(TOPIC, 0) == 6
    assert all(store.read_message(r.log_position) for r in results)


@pytest.mark.parametrize("property_crc", [False, True], ids=["no-crc", "record-crc"])
def test_properties_over_32767_bytes_are_rejected(tmp_path, open_store, property_crc):
    """32 767 bytes is the format's limit; with the record CRC property 20 of them are taken."""
    config = small_config(tmp_path / "store", tiny=False)
    config = config.replace(commit_log=config.commit_log.__class__(
        segment_size_bytes=config.commit_log.segment_size_bytes,
        append_property_crc=property_crc))
    store = open_store(config)
    results = _seed(store)
    reserved = 20 if property_crc else 0
    fits = "v" * (32767 - reserved - len("big\x01\x02"))

    for properties in ({"big": fits + "v"}, {"big": "é" * 16382}):  # bytes count, not chars
        with pytest.raises(PropertiesTooLargeError, match=f"{32767 - reserved:,}"):
            store.put_message(Message(TOPIC, b"x", properties=properties))
    with pytest.raises(PropertiesTooLargeError):
        store.put_message(Message(TOPIC, b"x", keys=["k" * 20000, "k" * 20000]))
    (stored,) = put_all(store, [Message(TOPIC, b"x", properties={"big": fits})])
    view = store.read_message(stored.log_position)
    assert len(view.properties_bytes) == 32767
    assert view.properties["big"] == fits
    assert store.max_offset(TOPIC, 0) == 6
    assert all(store.read_message(r.log_position) for r in results)


def test_message_that_can_never_fit_a_segment_is_rejected(seeded):
    store, results = seeded
    with pytest.raises(InvalidMessageError, match="segment_size_bytes") as caught:
        store.put_message(Message(TOPIC, bytes(TINY_SEGMENT_SIZE_BYTES)))
    assert not isinstance(caught.value, MessageTooLargeError)
    assert store.wait_dispatched()
    assert_intact(store, results)
    (after,) = put_all(store, [Message(TOPIC, b"after")])
    assert after.queue_offset == 5


def test_batch_with_a_message_that_can_never_fit_stores_nothing(seeded):
    """``put_messages`` validates all messages first: a rejected batch writes none of them."""
    store, results = seeded
    max_position = store.stats()["commit_log"]["max_position"]
    with pytest.raises(InvalidMessageError, match="segment_size_bytes"):
        store.put_messages([Message(TOPIC, b"first"), Message(TOPIC, bytes(9000))])
    assert store.wait_dispatched()

    assert store.max_offset(TOPIC, 0) == 5
    assert store.stats()["commit_log"]["max_position"] == max_position
    (after,) = put_all(store, [Message(TOPIC, b"after")])
    assert after.queue_offset == 5
    assert_intact(store, results)


# ---- framing characters ---------------------------------------------------------------------

def _with_separator(where: str, char: str) -> Message:
    bad = f"a{char}b"
    fields = {
        "property-name": {"properties": {bad: "v"}},
        "property-value": {"properties": {"name": bad}},
        "tags": {"tags": bad},
        "key": {"keys": ["fine", bad]},
        "unique-key": {"unique_key": bad},
    }[where]
    return Message(TOPIC, b"x", **fields)


@pytest.mark.parametrize("char", ["\x01", "\x02"], ids=["U+0001", "U+0002"])
@pytest.mark.parametrize("where", ["property-name", "property-value", "tags", "key",
                                   "unique-key"])
def test_separator_characters_are_rejected(seeded, where, char):
    store, results = seeded
    with pytest.raises(InvalidMessageError, match="U\\+0001 or U\\+0002") as caught:
        store.put_message(_with_separator(where, char))
    assert caught.value.topic == TOPIC
    assert store.wait_dispatched()
    assert_intact(store, results)


def test_empty_property_name_is_rejected(seeded):
    store, results = seeded
    with pytest.raises(InvalidMessageError, match="property names"):
        store.put_message(Message(TOPIC, b"x", properties={"": "v"}))
    assert_intact(store, results)


@pytest.mark.parametrize("body", ["text", 42, None], ids=["str", "int", "none"])
def test_body_that_is_not_bytes_is_rejected(seeded, body):
    store, results = seeded
    with pytest.raises(InvalidMessageError, match="body must be bytes"):
        store.put_message(Message(TOPIC, body))
    assert_intact(store, results)


@pytest.mark.parametrize("where", ["property-name", "property-value", "tags", "key",
                                   "unique-key"])
def test_text_that_is_not_encodable_as_utf8_is_rejected(seeded, where):
    """A lone surrogate cannot be written as UTF-8: the store's own error, not a codec error."""
    store, results = seeded
    with pytest.raises(InvalidMessageError):
        store.put_message(_with_separator(where, "\ud800"))
    assert store.wait_dispatched()
    assert_intact(store, results)


OUT_OF_RANGE_FIELDS = {
    "flag-2**31": {"flag": 2**31},
    "flag-below-int32": {"flag": -(2**31) - 1},
    "reconsume-2**31": {"reconsume_count": 2**31},
    "reconsume-str": {"reconsume_count": "1"},
    "sys-flag-2**31": {"sys_flag": 2**31},
    "born-ms-2**63": {"born_timestamp_ms": 2**63},
    "born-port-2**31": {"born_host": "10.0.0.1:2147483648"},
}


@pytest.mark.parametrize("fields", list(OUT_OF_RANGE_FIELDS.values()),
                         ids=list(OUT_OF_RANGE_FIELDS))
def test_field_that_does_not_fit_the_record_is_rejected(seeded, fields):
    store, results = seeded
    with pytest.raises(InvalidMessageError):
        store.put_message(Message(TOPIC, b"x", **fields))
    assert store.wait_dispatched()
    assert_intact(store, results)


def test_a_put_that_fails_while_encoding_takes_no_queue_offset(seeded):
    """Whatever the error, a message that was not stored must not use up a queue offset:
    the next message gets the next offset and the queue has no gap (no filler units)."""
    store, results = seeded
    try:
        store.put_message(Message(TOPIC, b"x", flag=2**31))
    except Exception:  # the error type is checked above; this test is about the aftermath
        pass
    (after,) = put_all(store, [Message(TOPIC, b"after")])
    assert after.queue_offset == 5
    got = store.get_message("g", TOPIC, 0, 5)
    assert (got.status, [m.body for m in got.messages]) == (GetStatus.FOUND, [b"after"])
    assert_intact(store, results)


# ---- queue ids -----------------------------------------------------------------------------

@pytest.mark.parametrize("queue_id", [-1, -(2**31), "0", 1.0, True, None, 1024, 2**31],
                         ids=["minus-1", "int-min", "str", "float", "bool", "none", "1024",
                              "2**31"])
def test_bad_queue_id_is_rejected(seeded, queue_id):
    store, results = seeded
    with pytest.raises(InvalidQueueError, match="queue id") as caught:
        store.put_message(Message(TOPIC, b"x"), queue_id)
    assert caught.value.topic == TOPIC
    assert store.wait_dispatched()
    assert store.topics() == {TOPIC: [0, 1]}
    assert_intact(store, results)


def test_largest_queue_id_is_accepted(seeded):
    store, results = seeded
    (stored,) = put_all(store, [Message(TOPIC, b"x")], queue_id=1023)
    assert (stored.queue_id, stored.queue_offset) == (1023, 0)
    assert_intact(store, results)


# ---- damaged records -----------------------------------------------------------------------

def _fill_segments(store: MessageStore, count: int = 300) -> list[PutResult]:
    messages = [Message(TOPIC, b"body-%05d-" % i + bytes(100), keys=[f"k{i}"])
                for i in range(count)]
    return put_all(store, messages)


def _flip_byte(config, log_position: int, offset_in_record: int) -> None:
    segment_size = config.commit_log.segment_size_bytes
    base = log_position - log_position % segment_size
    path = config.root_dir / "commitlog" / f"{base:020d}"
    data = bytearray(path.read_bytes())
    data[log_position - base + offset_in_record] ^= 0x01
    path.write_bytes(bytes(data))


def _zero_from(config, log_position: int) -> None:
    """Zero every log byte from ``log_position`` on: writes that never reached the disk."""
    segment_size = config.commit_log.segment_size_bytes
    for path in sorted((config.root_dir / "commitlog").iterdir()):
        start = max(0, log_position - int(path.name))
        if start < segment_size:
            data = bytearray(path.read_bytes())
            data[start:] = bytes(segment_size - start)
            path.write_bytes(bytes(data))


BODY_OFFSET = 88  # v1 record, IPv4 hosts: the body starts at byte 88
MAGIC_OFFSET = 4


@pytest.mark.parametrize(("offset_in_record", "reason"),
                         [(BODY_OFFSET, "body CRC mismatch"), (MAGIC_OFFSET, "bad magic")],
                         ids=["body-crc", "magic"])
def test_damage_in_an_old_segment_is_reported_with_its_position(config, open_store,
                                                                offset_in_record, reason):
    """Recovery scans only the last 3 segments, so damage in segment 0 survives the reopen and
    surfaces on read by position as ``CorruptionError`` naming the position; a pull skips that
    offset (with an alert) so a consumer is not stuck there."""
    store = open_store(config, verify=False)
    results = _fill_segments(store)
    store.close()
    assert len(list((config.root_dir / "commitlog").iterdir())) >= 5
    damaged = results[10]
    assert damaged.log_position + damaged.store_size < TINY_SEGMENT_SIZE_BYTES
    _flip_byte(config, damaged.log_position, offset_in_record)

    store = open_store(config, verify=False)
    assert store.max_offset(TOPIC, 0) == len(results)  # recovery did not see it
    with pytest.raises(CorruptionError, match=reason) as caught:
        store.read_message(damaged.log_position)
    assert caught.value.log_position == damaged.log_position
    assert caught.value.path.endswith(f"{0:020d}")
    pulled = store.get_message("g", TOPIC, 0, damaged.queue_offset, 3)
    assert [m.queue_offset for m in pulled.messages] == [
        damaged.queue_offset + 1, damaged.queue_offset + 2, damaged.queue_offset + 3]
    assert pulled.next_offset == damaged.queue_offset + 4
    assert store.stats()["commit_log"]["damaged_units_skipped"] == 1

    for neighbour in (results[9], results[11], results[-1]):
        assert store.read_message(neighbour.log_position).queue_offset == neighbour.queue_offset
    assert [m.queue_offset for m in store.get_message("g", TOPIC, 0, 11, 3).messages] == [
        11, 12, 13]
    store.close()
    problems = verify_store(config.root_dir, config)
    assert any(f"position={damaged.log_position}" in p and reason in p for p in problems)


def test_damage_in_the_tail_is_truncated_by_recovery(config, open_store):
    """A bad CRC with nothing valid after it is a torn tail: recovery truncates there, the
    damaged record and the partial writes after it are gone, and appends continue at that
    point. (Damage that valid records follow is refused instead: ``test_corruption.py``.)"""
    store = open_store(config, verify=False)
    results = _fill_segments(store)
    store.close()
    damaged = results[-5]
    _zero_from(config, results[-4].log_position)
    _flip_byte(config, damaged.log_position, BODY_OFFSET)

    store = open_store(config, verify=False)
    assert store.stats()["commit_log"]["max_position"] == damaged.log_position
    assert store.max_offset(TOPIC, 0) == damaged.queue_offset
    with pytest.raises(MessageNotFoundError):
        store.read_message(damaged.log_position)
    for earlier in results[:-5:37]:
        assert store.read_message(earlier.log_position).body[:10] == b"body-%05d" % (
            earlier.queue_offset)
    (after,) = put_all(store, [Message(TOPIC, b"after")])
    assert (after.queue_offset, after.log_position) == (damaged.queue_offset,
                                                       damaged.log_position)
    assert [m.body for m in store.get_message("g", TOPIC, 0, after.queue_offset).messages] == [
        b"after"]


def _truncated_tail(config, open_store) -> tuple[MessageStore, list[PutResult]]:
    """A store whose last 5 records were cut off by recovery (a torn tail: a bad CRC, then
    zeros)."""
    store = open_store(config, verify=False)
    results = _fill_segments(store)
    store.close()
    _zero_from(config, results[-4].log_position)
    _flip_byte(config, results[-5].log_position, BODY_OFFSET)
    store = open_store(config, verify=False)
    assert store.max_offset(TOPIC, 0) == results[-5].queue_offset
    return store, results


def test_query_for_keys_of_records_lost_to_tail_truncation_finds_nothing(config, open_store):
    """Index entries may still name positions past the recovered end; a key query must skip
    them (as it skips positions below the log start) rather than raise."""
    store, results = _truncated_tail(config, open_store)
    for lost in results[-5:]:
        assert store.query_by_key(TOPIC, f"k{lost.queue_offset}") == []
    kept = results[-6]
    assert [v.log_position for v in store.query_by_key(TOPIC, f"k{kept.queue_offset}")] == [
        kept.log_position]


def test_recovery_drops_index_entries_past_the_truncated_end(config, open_store):
    """After recovery truncates the log, the key index must not point past the new end, so the
    fsck finds the store consistent (the consume queues are truncated the same way)."""
    store, _results = _truncated_tail(config, open_store)
    store.close()
    assert verify_store(config.root_dir, config) == []


# ---- message ids ---------------------------------------------------------------------------

BAD_MSG_IDS = [
    pytest.param("", id="empty"),
    pytest.param("7F000001", id="short"),
    pytest.param("7F00000100002A9F000000000000000", id="31-chars"),
    pytest.param("7F00000100002A9F00000000000000000", id="33-chars"),
    pytest.param("7F00000100002A9F000000000000000G", id="non-hex"),
    pytest.param("7F00000100002A9F-000000000000000", id="dash"),
    pytest.param("7F00000100002A9F8000000000000000", id="negative-position"),
    pytest.param("7F00000100002A9FFFFFFFFFFFFFFFFF", id="minus-one"),
    pytest.param("0" * 55, id="55-chars"),
    pytest.param(None, id="none"),
]


@pytest.mark.parametrize("msg_id", BAD_MSG_IDS)
def test_malformed_msg_id_is_rejected(seeded, msg_id):
    store, results = seeded
    with pytest.raises(InvalidMessageIdError, match="offsetMsgId"):
        store.view_message_by_id(msg_id)
    assert_intact(store, results)


def test_msg_id_of_another_store_or_beyond_the_log_is_not_found(seeded):
    store, results = seeded
    other_host = "0A0000010000A4D5" + results[0].msg_id[16:]
    with pytest.raises(MessageNotFoundError):
        store.view_message_by_id(other_host)
    beyond = results[0].msg_id[:16] + f"{10**9:016X}"
    with pytest.raises(MessageNotFoundError):
        store.view_message_by_id(beyond)
    assert store.view_message_by_id(results[0].msg_id.lower()).log_position == 0
    assert_intact(store, results)


# ---- lock and lifecycle --------------------------------------------------------------------

def test_second_open_in_the_same_process_is_refused(seeded, config):
    store, results = seeded
    with pytest.raises(StoreLockedError, match="already open") as caught:
        MessageStore.open(config)
    assert caught.value.path == str(config.root_dir / "lock")
    (after,) = put_all(store, [Message(TOPIC, b"after")])
    assert after.queue_offset == 5
    assert_intact(store, results)


def _open_in_subprocess(config) -> subprocess.CompletedProcess:
    code = ("import sys\n"
            "from postbox.storage_engine import *\n"
            "config = StoreConfig(\n"
            "    root_dir=sys.argv[1],\n"
            "    commit_log=CommitLogConfig(segment_size_bytes=int(sys.argv[2])),\n"
            "    consume_queue=ConsumeQueueConfig(units_per_file=int(sys.argv[3])),\n"
            "    key_index=KeyIndexConfig(slot_count_max=int(sys.argv[4]),\n"
            "                             entry_count_max=int(sys.argv[5])))\n"
            "MessageStore.open(config).close()\n")
    args = [str(config.root_dir), str(config.commit_log.segment_size_bytes),
            str(config.consume_queue.units_per_file), str(config.key_index.slot_count_max),
            str(config.key_index.entry_count_max)]
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60, check=False)


def test_second_open_from_another_process_fails_fast(seeded, config):
    store, results = seeded
    refused = _open_in_subprocess(config)
    assert refused.returncode != 0
    assert "StoreLockedError" in refused.stderr and "already open" in refused.stderr
    assert_intact(store, results)

    store.close()
    reopened = _open_in_subprocess(config)
    assert reopened.returncode == 0, reopened.stderr  # close released the lock


CLOSED_CALLS = {
    "put_message": lambda s: s.put_message(Message(TOPIC, b"x")),
    "put_messages": lambda s: s.put_messages([Message(TOPIC, b"x")]),
    "get_message": lambda s: s.get_message("g", TOPIC, 0, 0),
    "read_message": lambda s: s.read_message(0),
    "view_message_by_id": lambda s: s.view_message_by_id("7F00000100002A9F0000000000000000"),
    "query_by_key": lambda s: s.query_by_key(TOPIC, "o-1"),
    "query_by_unique_key": lambda s: s.query_by_unique_key(TOPIC, "ABC"),
    "offset_by_time": lambda s: s.offset_by_time(TOPIC, 0, 0),
    "iter_messages": lambda s: s.iter_messages(),
    "wait_dispatched": lambda s: s.wait_dispatched(),
}


@pytest.mark.parametrize("call", list(CLOSED_CALLS.values()), ids=list(CLOSED_CALLS))
def test_closed_store_raises_store_closed(config, open_store, call):
    store = open_store(config)
    results = _seed(store)
    store.close()
    store.close()  # idempotent

    with pytest.raises(StoreClosedError, match="closed"):
        call(store)
    reopened = open_store(config)
    assert_intact(reopened, results)


@pytest.mark.parametrize("name", ["min_offset", "max_offset"])
def test_offsets_of_a_closed_store_raise_store_closed(config, open_store, name):
    store = open_store(config)
    _seed(store)
    store.close()
    with pytest.raises(StoreClosedError):
        getattr(store, name)(TOPIC, 0)
