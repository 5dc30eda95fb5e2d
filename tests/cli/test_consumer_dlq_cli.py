"""``postbox consumer progress`` and ``postbox dlq list|resend`` against real stores.

The state is built with the real ``Broker`` API (send, commit offsets, dead-letter with
``send_back(..., delay_level=-1)``), the broker is closed, and then the commands run on the files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from postbox.storage_engine import (
    Broker,
    CommitLogConfig,
    GetStatus,
    Message,
    MessageStore,
    MessageView,
    StoreConfig,
)
from tests.cli.cli_support import (
    SEGMENT_SIZE_BYTES,
    assert_one_error_line,
    run,
    run_json,
    store_args,
)

ORDER_COUNT = 10  # 5 per queue of "orders"
AUDIT_COUNT = 3
DLQ_ORIGIN_PROPERTY = "DLQ_ORIGIN_MESSAGE_ID"


@dataclass
class ConsumerStore:
    """A closed store with two groups' offsets and three dead letters of ``billing``."""

    root_dir: Path
    # DLQ offset -> (original topic, original message, reason)
    dead: dict[int, tuple[str, MessageView, str | None]] = field(default_factory=dict)
    dlq_msg_ids: dict[int, str] = field(default_factory=dict)

    @property
    def config(self) -> StoreConfig:
        return store_config(self.root_dir)


def store_config(root_dir: Path) -> StoreConfig:
    return StoreConfig(root_dir=root_dir,
                       commit_log=CommitLogConfig(segment_size_bytes=SEGMENT_SIZE_BYTES))


def build_store(root_dir: Path) -> ConsumerStore:
    """orders: 2 queues x 5 messages; audit: 3 messages on queue 0.

    billing committed orders 5/2 (lag 0 + 3) and dead-lettered orders q1 offsets 2 and 3 (with
    reasons) and audit q0 offset 0 (without); auditor committed audit q0 at 1 (lag 2).
    """
    data = ConsumerStore(root_dir)
    with Broker.open(store_config(root_dir)) as broker:
        broker.create_topic("orders", 2)
        for number in range(ORDER_COUNT):
            broker.send(Message("orders", f"order {number}".encode(), keys=[f"o-{number}"],
                                unique_key=f"UK{number:04d}"), queue_id=number % 2)
        for number in range(AUDIT_COUNT):
            broker.send(Message("audit", f"audit {number}".encode()), queue_id=0)
        assert broker.store.wait_dispatched(timeout_ms=10_000)
        broker.commit_offset("billing", "orders", 0, 5)
        broker.commit_offset("billing", "orders", 1, 2)
        broker.commit_offset("auditor", "audit", 0, 1)
        failed = broker.pull("billing", "orders", 1, 2, max_count=2).messages
        failed.append(broker.pull("billing", "audit", 0, 0, max_count=1).messages[0])
        for view, reason in zip(failed, ["bad amount", "timeout", None], strict=True):
            result = broker.send_back("billing", view, delay_level=-1, reason=reason)
            assert result.receipt is not None
            data.dead[result.receipt.queue_offset] = (view.topic, view, reason)
            data.dlq_msg_ids[result.receipt.queue_offset] = result.receipt.offset_msg_id
        assert broker.store.wait_dispatched(timeout_ms=10_000)
    assert sorted(data.dead) == [0, 1, 2]
    return data


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> ConsumerStore:
    """For read-only commands."""
    return build_store(tmp_path_factory.mktemp("consumers") / "store")


@pytest.fixture
def fresh(tmp_path) -> ConsumerStore:
    """For commands that write (resend)."""
    return build_store(tmp_path / "store")










def read_back(data: ConsumerStore, topic: str, queue_id: int, offset: int) -> MessageView:
    """The message at a queue offset, read from the reopened store."""
    with MessageStore.open(data.config) as store:
        assert store.wait_dispatched(timeout_ms=10_000)
        result = store.get_message("check", topic, queue_id, offset, max_count=1)
    assert result.status is GetStatus.FOUND, result
    return result.messages[0]


def queue_max_offsets(data: ConsumerStore) -> dict[tuple[str, int], int]:
    with MessageStore.open(data.config) as store:
        assert store.wait_dispatched(timeout_ms=10_000)
        return {(topic, queue_id): store.max_offset(topic, queue_id)
                for topic, queue_ids in store.topics().items() for queue_id in queue_ids}


# --- consumer progress -------------------------------------------------------------------------

def test_progress_of_one_group_is_exact(built):
    groups = run_json("consumer", "progress", "--group", "billing", *store_args(built))
    assert groups == [{
        "group": "billing", "queue_count": 3, "total_lag": 3,
        "queues": [
            {"topic": "%RETRY%billing", "queue_id": 0, "committed_offset": None,
             "min_offset": 0, "max_offset": 0, "lag": 0},
            {"topic": "orders", "queue_id": 0, "committed_offset": 5, "min_offset": 0,
             "max_offset": 5, "lag": 0},
            {"topic": "orders", "queue_id": 1, "committed_offset": 2, "min_offset": 0,
             "max_offset": 5, "lag": 3},
        ],
    }]


def test_progress_without_group_lists_every_group(built):
    groups = run_json("consumer", "progress", *store_args(built))
    assert [group["group"] for group in groups] == ["auditor", "billing"]
    auditor = groups[0]
    assert auditor["total_lag"] == 2
    committed = [queue for queue in auditor["queues"] if queue["committed_offset"] is not None]
    assert committed == [{"topic": "audit", "queue_id": 0, "committed_offset": 1,
                          "min_offset": 0, "max_offset": AUDIT_COUNT, "lag": 2}]
    assert groups[1]["total_lag"] == 3


def test_progress_table_shows_lag_and_totals(built):
    result = run("consumer", "progress", *store_args(built))
    assert result.exit_code == 0, result.stderr
    assert "group billing" in result.stdout and "group auditor" in result.stdout
    assert "total (3 queues)" in result.stdout
    row = next(line for line in result.stdout.splitlines()
               if line.split()[:2] == ["orders", "1"])
    assert row.split() == ["orders", "1", "2", "0", "5", "3"]


def test_progress_does_not_move_offsets(built):
    before = run_json("consumer", "progress", *store_args(built))
    assert run_json("consumer", "progress", *store_args(built)) == before


def test_progress_of_an_unknown_group_exits_1(built):
    result = run("consumer", "progress", "--group", "nobody", *store_args(built))
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert "no consumer group 'nobody'" in result.stderr
    assert run_json("consumer", "progress", "--group", "nobody", *store_args(built),
                    expect_exit=1) == []


def test_progress_of_an_invalid_group_name_is_one_error_line(built):
    result = run("consumer", "progress", "--group", "bad group", *store_args(built))
    assert_one_error_line(result, "bad group")


def test_progress_on_a_missing_store_is_one_error_line(tmp_path):
    result = run("consumer", "progress", "--store", str(tmp_path / "none"))
    assert_one_error_line(result, "not a store")


# --- dlq list ----------------------------------------------------------------------------------

def test_dlq_list_json_has_reason_and_original_topic(built):
    documents = run_json("dlq", "list", "--group", "billing", *store_args(built))
    assert [document["queue_offset"] for document in documents] == [0, 1, 2]
    for document in documents:
        topic, original, reason = built.dead[document["queue_offset"]]
        assert document["topic"] == "%DLQ%billing"
        assert document["original_topic"] == topic
        assert document["properties"]["RETRY_TOPIC"] == topic
        assert document["reason"] == reason
        assert document["unique_key"] == original.unique_key
        assert document["reconsume_count"] == 1
        assert document["body"] == original.body.decode()
        assert document["msg_id"] == built.dlq_msg_ids[document["queue_offset"]]
    assert [document["reason"] for document in documents] == ["bad amount", "timeout", None]
    assert [document["unique_key"] for document in documents] == ["UK0005", "UK0007", None]


def test_dlq_list_table(built):
    result = run("dlq", "list", "--group", "billing", *store_args(built))
    assert result.exit_code == 0, result.stderr
    assert "dead letters of billing: 3" in result.stdout
    rows = {line.split()[0]: line for line in result.stdout.splitlines()
            if line.split() and line.split()[0] in ("0", "1", "2")}
    assert rows["0"].split()[:6] == ["0", "UK0005", "orders", "1", "bad", "amount"]
    assert rows["1"].split()[:5] == ["1", "UK0007", "orders", "1", "timeout"]
    assert rows["2"].split()[:5] == ["2", "—", "audit", "1", "—"]
    assert "order 5" in rows["0"] and "audit 0" in rows["2"]


def test_dlq_list_offset_and_limit(built):
    documents = run_json("dlq", "list", "-g", "billing", "--offset", "1", "--limit", "1",
                         *store_args(built))
    assert [document["queue_offset"] for document in documents] == [1]
    documents = run_json("dlq", "list", "-g", "billing", "--offset", "1", "--limit", "0",
                         *store_args(built))
    assert [document["queue_offset"] for document in documents] == [1, 2]
    result = run("dlq", "list", "-g", "billing", "--limit", "2", *store_args(built))
    assert result.exit_code == 0, result.stderr
    assert "continue with --offset 2" in result.stdout


@pytest.mark.parametrize("args", [["--group", "nobody"], ["--group", "billing", "--offset", "3"]])
def test_dlq_list_with_no_dead_letters_exits_1(built, args):
    result = run("dlq", "list", *args, *store_args(built))
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert "no dead letters" in result.stderr
    assert run_json("dlq", "list", *args, *store_args(built), expect_exit=1) == []


@pytest.mark.parametrize(("args", "fragment"), [
    (["--group", "billing", "--limit", "-1"], "--limit"),
    (["--group", "billing", "--offset", "-1"], "--offset"),
    (["--group", "bad group"], "bad group"),
])
def test_dlq_list_bad_arguments_are_one_error_line(built, args, fragment):
    assert_one_error_line(run("dlq", "list", *args, *store_args(built)), fragment)


def test_dlq_list_requires_a_group(built):
    result = run("dlq", "list", *store_args(built))
    assert result.exit_code == 2
    assert "--group" in result.stderr


# --- dlq resend --------------------------------------------------------------------------------

def test_resend_goes_to_the_dead_lettering_group_only(fresh):
    before = queue_max_offsets(fresh)
    documents = run_json("dlq", "resend", "--group", "billing", "--offset", "1", "--offset", "2",
                         *store_args(fresh))
    assert [document["dlq_offset"] for document in documents] == [1, 2]
    assert [document["topic"] for document in documents] == ["%RETRY%billing"] * 2
    assert [document["original_topic"] for document in documents] == ["orders", "audit"]
    for document in documents:
        _, original, _ = fresh.dead[document["dlq_offset"]]
        assert document["dlq_msg_id"] == fresh.dlq_msg_ids[document["dlq_offset"]]
        assert document["status"] == "PUT_OK"
        view = read_back(fresh, document["topic"], document["queue_id"],
                         document["queue_offset"])
        assert view.body == original.body
        assert view.unique_key == original.unique_key == document["unique_key"]
        assert view.msg_id == document["msg_id"]
        assert view.reconsume_count == 0
        assert view.properties[DLQ_ORIGIN_PROPERTY] == document["dlq_msg_id"]
        assert view.properties["RETRY_TOPIC"] == document["original_topic"]
        assert "DLQ_REASON" not in view.properties
    after = queue_max_offsets(fresh)
    grown = {queue: after[queue] - before.get(queue, 0) for queue in after
             if after[queue] != before.get(queue, 0)}
    assert sum(grown.values()) == 2  # the group's retry topic only: no other group sees them
    assert {topic for topic, _ in grown} == {"%RETRY%billing"}
    assert after[("%DLQ%billing", 0)] == 3  # the DLQ keeps its records


def test_resend_twice_sends_twice_and_dlq_list_shows_the_mark(fresh):
    first = run_json("dlq", "resend", "-g", "billing", "--offset", "0", *store_args(fresh))
    second = run_json("dlq", "resend", "-g", "billing", "--offset", "0", *store_args(fresh))
    assert first[0]["msg_id"] != second[0]["msg_id"]
    for document in (*first, *second):
        view = read_back(fresh, "%RETRY%billing", document["queue_id"],
                         document["queue_offset"])
        assert view.body == b"order 5"
    letters = run_json("dlq", "list", "-g", "billing", *store_args(fresh))  # a new process's view
    assert letters[0]["queue_offset"] == 0
    assert letters[0]["resent"]["count"] == 2
    assert letters[0]["resent"]["last_msg_id"] == second[0]["msg_id"]
    assert [letter["resent"] for letter in letters[1:]] == [None, None]
    table = run("dlq", "list", "-g", "billing", *store_args(fresh)).stdout
    assert "resent" in table and "2×" in table


def test_resend_all_from_an_offset(fresh):
    documents = run_json("dlq", "resend", "-g", "billing", "--all", "--offset", "1",
                         *store_args(fresh))
    assert [document["dlq_offset"] for document in documents] == [1, 2]
    documents = run_json("dlq", "resend", "-g", "billing", "--all", *store_args(fresh))
    assert [document["dlq_offset"] for document in documents] == [0, 1, 2]
    for document in documents:
        topic, original, _ = fresh.dead[document["dlq_offset"]]
        assert document["original_topic"] == topic
        view = read_back(fresh, document["topic"], document["queue_id"],
                         document["queue_offset"])
        assert view.body == original.body


def test_resend_prints_the_new_location(fresh):
    result = run("dlq", "resend", "-g", "billing", "--offset", "0", *store_args(fresh))
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("dlq offset 0 → %RETRY%billing queue ")
    assert "(for orders)" in lines[0]
    assert "unique key UK0005" in lines[0]
    assert "re-sent 1 dead letter(s) of billing" in lines[-1]
    assert "re-sending again sends again" in lines[-1]


def test_resend_of_an_offset_without_a_dead_letter_sends_nothing(fresh):
    before = queue_max_offsets(fresh)
    result = run("dlq", "resend", "-g", "billing", "--offset", "0", "--offset", "7",
                 *store_args(fresh))
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert "offset(s) 7; nothing re-sent" in result.stderr
    assert queue_max_offsets(fresh) == before


@pytest.mark.parametrize("args", [["-g", "billing", "--all", "--offset", "3"],
                                  ["-g", "nobody", "--all"]])
def test_resend_all_with_nothing_to_send_exits_1(fresh, args):
    assert run_json("dlq", "resend", *args, *store_args(fresh), expect_exit=1) == []


@pytest.mark.parametrize(("args", "fragment"), [
    (["-g", "billing"], "--all"),
    (["-g", "billing", "--all", "--offset", "0", "--offset", "1"], "at most one --offset"),
    (["-g", "billing", "--offset", "-1"], "--offset must be >= 0"),
    (["-g", "bad group", "--offset", "0"], "bad group"),
])
def test_resend_bad_arguments_are_one_error_line(fresh, args, fragment):
    before = queue_max_offsets(fresh)
    assert_one_error_line(run("dlq", "resend", *args, *store_args(fresh)), fragment)
    assert queue_max_offsets(fresh) == before


def test_help_lists_the_new_sub_apps():
    result = run("--help")
    assert "consumer" in result.stdout and "dlq" in result.stdout


def test_an_error_part_way_names_what_was_re_sent(fresh):
    with Broker.open(fresh.config) as broker:  # a record in the DLQ without RETRY_TOPIC
        broker.send(Message("%DLQ%billing", b"stray"), queue_id=0)
    result = run("dlq", "resend", "-g", "billing", "--all", "--json", *store_args(fresh))
    assert_one_error_line(result, "RETRY_TOPIC", "re-sent 3 of 4 before it: dlq offsets 0, 1, 2")
    after = queue_max_offsets(fresh)
    assert sum(count for (topic, _), count in after.items() if topic == "%RETRY%billing") == 3
    assert after[("orders", 0)] + after[("orders", 1)] == ORDER_COUNT
