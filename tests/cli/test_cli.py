"""The ``postbox`` command line against real stores written in the test (no mocks)."""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from postbox.storage_engine import CommitLogConfig, Message, MessageStore, StoreConfig
from postbox.storage_engine.formats import UniqueKeyGenerator
from tests.cli.cli_support import (
    SEGMENT_SIZE_BYTES,
    WIDE_TERMINAL,
    assert_one_error_line,
    run,
    run_json,
    store_args,
)

ORDER_COUNT = 24
BINARY_BODY = bytes(range(256)) * 2
POSTBOX_SCRIPT = Path(sys.executable).with_name("postbox")
BENCH_SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "store_bench.py"


@dataclass
class WrittenStore:
    """A closed store on disk and what the fixture put into it."""

    root_dir: Path
    orders: dict[str, object] = field(default_factory=dict)  # key -> PutResult
    unique_keys: dict[str, str] = field(default_factory=dict)  # key -> UNIQ_KEY
    bodies: dict[str, bytes] = field(default_factory=dict)  # key -> body
    binary: object = None  # PutResult of the message with a non-UTF-8 body
    audit: list = field(default_factory=list)

    @property
    def all_results(self) -> list:
        return sorted([*self.orders.values(), self.binary, *self.audit],
                      key=lambda result: result.log_position)


def order_body(number: int) -> bytes:
    return json.dumps({"order": number, "padding": "x" * 400}).encode()


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> WrittenStore:
    root_dir = tmp_path_factory.mktemp("cli") / "store"
    config = StoreConfig(root_dir=root_dir,
                         commit_log=CommitLogConfig(segment_size_bytes=SEGMENT_SIZE_BYTES))
    keys = UniqueKeyGenerator(ip="10.0.0.7", pid=4242, class_loader_hash=0x18B4AAC2)
    data = WrittenStore(root_dir)
    with MessageStore.open(config) as store:
        for number in range(ORDER_COUNT):
            key = f"order-{number}"
            unique_key = keys.next_key(1_700_000_000_000 + number)
            body = order_body(number)
            message = Message("orders", body, tags="refund" if number % 5 == 4 else "paid",
                              keys=[key], unique_key=unique_key)
            data.orders[key] = store.put_message(message, queue_id=number % 2)
            data.unique_keys[key] = unique_key
            data.bodies[key] = body
        data.binary = store.put_message(
            Message("orders", BINARY_BODY, tags="blob", keys=["blob-1"]), queue_id=1)
        data.audit = store.put_messages(
            [Message("audit", f"event {n}".encode(), keys=[f"audit-{n}"]) for n in range(3)],
            queue_id=0)
        assert store.wait_dispatched(timeout_ms=10_000)
    return data










# --- store -------------------------------------------------------------------------------------

def test_stats_json_describes_the_store(written):
    stats = run_json("store", "stats", *store_args(written))
    last = written.all_results[-1]
    assert stats["commit_log"]["segment_size_bytes"] == SEGMENT_SIZE_BYTES
    assert stats["commit_log"]["segment_count"] >= 2
    assert stats["commit_log"]["max_position"] == last.log_position + last.store_size
    assert stats["queue_count"] == 3
    queues = {(queue["topic"], queue["queue_id"]): queue for queue in stats["queues"]}
    assert queues[("orders", 0)]["max_offset"] == ORDER_COUNT // 2
    assert queues[("orders", 1)]["max_offset"] == ORDER_COUNT // 2 + 1
    assert queues[("audit", 0)]["max_offset"] == 3


def test_stats_table(written):
    result = run("store", "stats", *store_args(written))
    assert result.exit_code == 0, result.stderr
    assert "commit_log.max_position" in result.stdout
    assert "orders" in result.stdout


def test_verbose_logs_the_store_to_stderr_for_that_command_only(written):
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    result = run("--verbose", "store", "stats", *store_args(written))
    assert result.exit_code == 0, result.stderr
    assert "storage_engine" in result.stderr  # the store's own INFO records, by logger name
    assert (root.handlers, root.level) == (handlers, level)


def test_topics_json_lists_queues_with_offsets(written):
    topics = run_json("store", "topics", *store_args(written))
    assert topics == [
        {"topic": "audit", "queues": [{"queue_id": 0, "min_offset": 0, "max_offset": 3}]},
        {"topic": "orders", "queues": [
            {"queue_id": 0, "min_offset": 0, "max_offset": ORDER_COUNT // 2},
            {"queue_id": 1, "min_offset": 0, "max_offset": ORDER_COUNT // 2 + 1},
        ]},
    ]


def test_topics_table(written):
    result = run("store", "topics", *store_args(written))
    assert result.exit_code == 0, result.stderr
    assert "orders" in result.stdout and "audit" in result.stdout


def test_dump_json_is_the_log_in_order(written):
    records = run_json("store", "dump", "--limit", "0", *store_args(written))
    expected = written.all_results
    assert [record["log_position"] for record in records] == [r.log_position for r in expected]
    assert [record["msg_id"] for record in records] == [r.msg_id for r in expected]
    first = records[0]
    assert first["topic"] == "orders" and first["keys"] == ["order-0"]
    assert first["body"] == order_body(0).decode()
    assert first["unique_key"] == written.unique_keys["order-0"]


def test_dump_filters_limits_and_starts_at_a_position(written):
    audit = run_json("store", "dump", "--topic", "audit", *store_args(written))
    assert [record["body"] for record in audit] == ["event 0", "event 1", "event 2"]
    two = run_json("store", "dump", "--limit", "2", *store_args(written))
    assert len(two) == 2
    start = written.orders["order-5"].log_position
    tail = run_json("store", "dump", "--from-position", str(start), "--limit", "0",
                    *store_args(written))
    assert tail[0]["keys"] == ["order-5"]
    assert len(tail) == len(written.all_results) - 5


def test_dump_table_shows_ids_and_continuation(written):
    result = run("store", "dump", "--limit", "3", *store_args(written))
    assert result.exit_code == 0, result.stderr
    assert written.orders["order-0"].msg_id in result.stdout
    assert "--from-position" in result.stdout


def test_dump_on_a_narrow_console_keeps_ids_and_says_what_it_hid(written):
    result = run("store", "dump", "--limit", "2", *store_args(written), env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.stderr
    assert written.orders["order-0"].msg_id in result.stdout
    assert "not shown" in result.stdout
    assert all(len(line) <= 80 for line in result.stdout.splitlines())


# --- query -------------------------------------------------------------------------------------

def test_query_id_json_returns_every_field(written):
    put = written.orders["order-3"]
    message = run_json("query", "id", put.msg_id, *store_args(written))
    assert message["msg_id"] == put.msg_id
    assert message["log_position"] == put.log_position
    assert message["queue_id"] == 1 and message["queue_offset"] == put.queue_offset
    assert message["store_timestamp_ms"] == put.store_timestamp_ms
    assert message["tags"] == "paid" and message["keys"] == ["order-3"]
    assert message["unique_key"] == written.unique_keys["order-3"]
    assert message["body"] == written.bodies["order-3"].decode()
    assert message["body_size"] == len(written.bodies["order-3"])


def test_query_id_binary_body_is_base64(written):
    message = run_json("query", "id", written.binary.msg_id, *store_args(written))
    assert "body" not in message
    assert base64.b64decode(message["body_base64"]) == BINARY_BODY


def test_query_id_table_is_vertical(written):
    put = written.orders["order-4"]
    result = run("query", "id", put.msg_id, *store_args(written))
    assert result.exit_code == 0, result.stderr
    for name in ("topic", "queue_offset", "log_position", "store_size", "body_crc", "sys_flag",
                 "born_timestamp_ms", "born_host", "store_host", "reconsume_count",
                 "prepared_transaction_position", "msg_id", "unique_key", "properties", "body"):
        assert name in result.stdout
    assert "refund" in result.stdout


@pytest.mark.parametrize("bad_id", ["not-a-msg-id", "ABC", "Z" * 32])
def test_query_id_neither_msg_id_nor_unique_key_is_not_found(written, bad_id):
    result = run("query", "id", bad_id, *store_args(written))
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert "UNIQ_KEY" in result.stderr and "Traceback" not in result.stderr


def test_query_id_accepts_the_unique_key_a_producer_returned(written):
    unique_key = written.unique_keys["order-9"]
    message = run_json("query", "id", unique_key, *store_args(written))
    assert message["msg_id"] == written.orders["order-9"].msg_id
    assert message["unique_key"] == unique_key
    only_audit = run_json("query", "id", unique_key, "--topic", "audit", *store_args(written),
                          expect_exit=1)
    assert only_audit is None


def test_query_id_outside_the_log_is_not_found(written):
    outside = written.orders["order-0"].msg_id[:16] + f"{10**9:016X}"
    assert run_json("query", "id", outside, *store_args(written), expect_exit=1) is None


def test_query_key_json(written):
    messages = run_json("query", "key", "orders", "order-7", *store_args(written))
    assert [message["log_position"] for message in messages] == [
        written.orders["order-7"].log_position]
    assert messages[0]["body"] == written.bodies["order-7"].decode()


def test_query_key_respects_the_time_range(written):
    # The key index keeps store times to the second (RocketMQ's IndexFile), so the range
    # edges here stay well clear of the message's own second.
    put = written.orders["order-7"]
    before = run_json("query", "key", "orders", "order-7", "--end",
                      str(put.store_timestamp_ms - 10_000), *store_args(written), expect_exit=1)
    assert before == []
    after = run_json("query", "key", "orders", "order-7", "--begin",
                     str(put.store_timestamp_ms + 10_000), *store_args(written), expect_exit=1)
    assert after == []
    within = run_json("query", "key", "orders", "order-7", "--begin",
                      str(put.store_timestamp_ms - 10_000), "--end",
                      str(put.store_timestamp_ms + 10_000), "--max", "1", *store_args(written))
    assert [message["keys"] for message in within] == [["order-7"]]


def test_query_key_not_found_exits_1(written):
    assert run_json("query", "key", "orders", "no-such-key", *store_args(written),
                    expect_exit=1) == []
    result = run("query", "key", "orders", "no-such-key", *store_args(written))
    assert result.exit_code == 1 and "no messages" in result.stderr


def test_query_key_table(written):
    result = run("query", "key", "audit", "audit-1", *store_args(written))
    assert result.exit_code == 0, result.stderr
    assert written.audit[1].msg_id in result.stdout


def test_query_unique_key_json(written):
    unique_key = written.unique_keys["order-11"]
    messages = run_json("query", "unique-key", "orders", unique_key, *store_args(written))
    assert [message["unique_key"] for message in messages] == [unique_key]
    assert messages[0]["log_position"] == written.orders["order-11"].log_position


def test_query_offset_json(written):
    put = written.orders["order-6"]
    document = run_json("query", "offset", "orders", "0", str(put.queue_offset),
                        *store_args(written))
    assert document["status"] == "FOUND"
    assert document["message"]["log_position"] == put.log_position
    assert document["max_offset"] == ORDER_COUNT // 2


def test_query_offset_beyond_the_queue_exits_1(written):
    document = run_json("query", "offset", "orders", "0", "999", *store_args(written),
                        expect_exit=1)
    assert document["message"] is None and document["status"] != "FOUND"


def test_query_offset_table(written):
    result = run("query", "offset", "orders", "1", "0", *store_args(written))
    assert result.exit_code == 0, result.stderr
    assert written.orders["order-1"].msg_id in result.stdout


def test_query_time_json_lands_on_a_message_stored_then(written):
    put = written.orders["order-9"]
    document = run_json("query", "time", "orders", "1", str(put.store_timestamp_ms),
                        *store_args(written))
    assert 0 <= document["offset"] <= ORDER_COUNT // 2
    assert document["message"]["store_timestamp_ms"] == put.store_timestamp_ms


def test_query_time_table_prints_the_offset(written):
    put = written.orders["order-2"]
    result = run("query", "time", "orders", "0", str(put.store_timestamp_ms),
                 *store_args(written))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("offset ")


# --- options and errors ------------------------------------------------------------------------

def test_store_env_var_gives_the_directory(written):
    stats = run_json("store", "stats", "--segment-size", str(SEGMENT_SIZE_BYTES),
                     env={"POSTBOX_STORE": str(written.root_dir)})
    assert stats["queue_count"] == 3


def test_broker_conf_builds_the_config(written, tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=broker-a\nstorePathRootDir={written.root_dir}\n"
                    f"mappedFileSizeCommitLog={SEGMENT_SIZE_BYTES}\n", encoding="utf-8")
    stats = run_json("store", "stats", "--broker-conf", str(conf))
    assert stats["commit_log"]["segment_size_bytes"] == SEGMENT_SIZE_BYTES
    elsewhere = tmp_path / "broker-elsewhere.conf"
    elsewhere.write_text(f"storePathRootDir={tmp_path / 'nothing'}\n"
                         f"mappedFileSizeCommitLog={SEGMENT_SIZE_BYTES}\n", encoding="utf-8")
    topics = run_json("store", "topics", "--broker-conf", str(elsewhere), "--store",
                      str(written.root_dir))
    assert [topic["topic"] for topic in topics] == ["audit", "orders"]


def test_bad_broker_conf_value_is_one_error_line(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={tmp_path}\nflushDiskType=SOMETIMES\n", encoding="utf-8")
    assert_one_error_line(run("store", "stats", "--broker-conf", str(conf)), "flushDiskType")


def test_missing_store_is_one_error_line(tmp_path):
    result = run("store", "stats", "--store", str(tmp_path / "absent"))
    assert_one_error_line(result, "not a store", "does not exist")
    assert not (tmp_path / "absent").exists()


def test_wrong_segment_size_is_one_error_line(written):
    result = run("store", "stats", "--store", str(written.root_dir), "--segment-size", "16384")
    assert_one_error_line(result)


def test_invalid_segment_size_is_one_error_line(written):
    result = run("store", "stats", "--store", str(written.root_dir), "--segment-size", "10")
    assert_one_error_line(result, "segment_size_bytes")


def test_a_store_held_open_is_inspected_read_only(written):
    config = StoreConfig(root_dir=written.root_dir,
                         commit_log=CommitLogConfig(segment_size_bytes=SEGMENT_SIZE_BYTES))
    with MessageStore.open(config):
        stats = run_json("store", "stats", *store_args(written))
    assert stats["commit_log"]["max_position"] > written.all_results[-1].log_position
    counts = {(queue["topic"], queue["queue_id"]): queue["max_offset"] for queue in stats["queues"]}
    assert counts == {("orders", 0): ORDER_COUNT // 2, ("orders", 1): ORDER_COUNT // 2 + 1,
                      ("audit", 0): 3}
    assert stats["read_only"] is True and stats["recovery"] is None


def test_stats_of_a_clean_store_reports_no_truncation(tmp_path):
    config = StoreConfig(root_dir=tmp_path / "store",
                         commit_log=CommitLogConfig(segment_size_bytes=SEGMENT_SIZE_BYTES))
    with MessageStore.open(config) as store:
        store.put_message(Message("orders", b"one"))
    with MessageStore.open(config) as store:  # a clean reopen: nothing torn, nothing cut
        assert store.stats()["recovery"]["truncated_bytes"] == 0


def test_help_lists_the_sub_apps():
    result = run("--help")
    assert result.exit_code == 0
    for name in ("store", "query", "bench", "demo"):
        assert name in result.stdout


# --- store tour --------------------------------------------------------------------------------

def test_store_tour_runs_and_is_repeatable(tmp_path):
    store_dir = tmp_path / "demo-store"
    for _ in range(2):
        result = run("store", "tour", "--store", str(store_dir))
        assert result.exit_code == 0, (result.stdout, result.stderr)
        assert "1000 messages" in result.stdout
        assert "checks passed" in result.stdout
        assert "FAILED" not in result.stdout
    topics = run_json("store", "topics", "--store", str(store_dir))
    assert [topic["topic"] for topic in topics] == ["orders"]
    assert sum(queue["max_offset"] for queue in topics[0]["queues"]) == 1000


def test_store_tour_refuses_to_delete_a_directory_that_is_not_a_store(tmp_path):
    keep = tmp_path / "precious"
    keep.mkdir()
    (keep / "notes.txt").write_text("keep me", encoding="utf-8")
    assert_one_error_line(run("store", "tour", "--store", str(keep)), "refusing")
    assert (keep / "notes.txt").exists()


# --- bench -------------------------------------------------------------------------------------

@pytest.mark.skipif(not BENCH_SCRIPT.is_file(), reason="no bench/store_bench.py")
def test_bench_store_hands_arguments_to_the_benchmark():
    result = run("bench", "store", "--help")
    assert result.exit_code == 0, result.stderr
    assert "usage:" in result.stdout and "--count" in result.stdout


@pytest.mark.skipif(not BENCH_SCRIPT.is_file(), reason="no bench/ in this checkout")
def test_bench_durability_hands_arguments_to_the_benchmark():
    result = run("bench", "durability", "--help")
    assert result.exit_code == 0, result.stderr
    assert "usage:" in result.stdout and "--recovery-mib" in result.stdout


@pytest.mark.skipif(not BENCH_SCRIPT.is_file(), reason="no bench/ in this checkout")
def test_bench_outbox_scale_hands_arguments_to_the_benchmark():
    result = run("bench", "outbox-scale", "--help")
    assert result.exit_code == 0, result.stderr
    assert "usage:" in result.stdout and "--sizes" in result.stdout


@pytest.mark.skipif(not BENCH_SCRIPT.is_file(), reason="no bench/ in this checkout")
def test_bench_outbox_groups_hands_arguments_to_the_benchmark():
    result = run("bench", "outbox-groups", "--help")
    assert result.exit_code == 0, result.stderr
    assert "usage:" in result.stdout and "--groups" in result.stdout


# --- the installed console script --------------------------------------------------------------

def run_script(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **WIDE_TERMINAL}
    env.pop("POSTBOX_STORE", None)
    return subprocess.run([str(POSTBOX_SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


@pytest.mark.skipif(not POSTBOX_SCRIPT.exists(), reason="console script not installed")
def test_console_script_json_and_errors(written):
    completed = run_script("store", "topics", *store_args(written), "--json")
    assert completed.returncode == 0, completed.stderr
    assert [topic["topic"] for topic in json.loads(completed.stdout)] == ["audit", "orders"]
    completed = run_script("query", "offset", "orders", "0", "0", *store_args(written),
                           "--segment-size", "10")
    assert completed.returncode == 2
    assert completed.stdout == ""
    assert completed.stderr.strip().startswith("error: ")
    assert len(completed.stderr.strip().splitlines()) == 1


def test_python_dash_m_postbox():
    completed = subprocess.run([sys.executable, "-m", "postbox", "--help"], capture_output=True,
                               text=True, timeout=120, check=False)
    assert completed.returncode == 0, completed.stderr
    assert "demo" in completed.stdout and "query" in completed.stdout


# --- verify ------------------------------------------------------------------------------------

def test_store_verify_reports_a_clean_store_and_a_damaged_one(tmp_path):
    store_dir = tmp_path / "demo-store"
    assert run("store", "tour", "--store", str(store_dir), "--messages", "200").exit_code == 0
    clean = run_json("store", "verify", "--store", str(store_dir))
    assert clean["problems"] == []
    segment = store_dir / "commitlog" / "00000000000000000000"
    with open(segment, "r+b") as handle:  # flip a body byte of the first record: its CRC breaks
        handle.seek(100)
        byte = handle.read(1)
        handle.seek(100)
        handle.write(bytes([byte[0] ^ 0xFF]))
    damaged = run("store", "verify", "--store", str(store_dir), "--json")
    assert damaged.exit_code == 1
    problems = json.loads(damaged.stdout)["problems"]
    assert any("position=0" in problem and "CRC" in problem for problem in problems)
