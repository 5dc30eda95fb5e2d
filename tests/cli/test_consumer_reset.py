"""``postbox consumer reset``: a stopped group's offsets on a topic moved to a time, by the
rules of ``mqadmin resetOffsetByTime`` (force: every queue; without: only roll back)."""

from __future__ import annotations

import time
from pathlib import Path

from postbox.storage_engine import Broker, Message, StoreConfig
from tests.cli.cli_support import assert_one_error_line, run_json

GROUP = "billing"
TOPIC = "orders"


def make_store(root: Path) -> int:
    """Two queues of four messages each, the group committed at their ends; returns a time
    between the second and third message of each queue."""
    with Broker.open(StoreConfig(root_dir=root)) as broker:
        broker.create_topic(TOPIC, 2)
        middle = 0
        for number in range(4):
            for queue_id in (0, 1):
                broker.send(Message(TOPIC, f"m{number}".encode()), queue_id=queue_id)
            if number == 1:
                time.sleep(0.05)
                middle = int(time.time() * 1000)
                time.sleep(0.05)
        for queue_id in (0, 1):
            broker.commit_offset(GROUP, TOPIC, queue_id, 4)
    return middle


def committed(root: Path) -> dict[int, int | None]:
    with Broker.open(StoreConfig(root_dir=root)) as broker:
        return {queue_id: broker.query_offset(GROUP, TOPIC, queue_id) for queue_id in (0, 1)}


def test_reset_moves_every_queue_to_the_first_offset_at_the_time(tmp_path: Path) -> None:
    middle = make_store(tmp_path)
    resets = run_json("consumer", "reset", "--group", GROUP, "--topic", TOPIC,
                      "--time", str(middle), "--store", str(tmp_path))
    assert [(row["queue_id"], row["before"], row["after"]) for row in resets] == \
        [(0, 4, 2), (1, 4, 2)]
    assert committed(tmp_path) == {0: 2, 1: 2}


def test_without_force_only_queues_past_the_time_roll_back(tmp_path: Path) -> None:
    make_store(tmp_path)
    with Broker.open(StoreConfig(root_dir=tmp_path)) as broker:
        broker.commit_offset(GROUP, TOPIC, 1, 1)
    resets = run_json("consumer", "reset", "--group", GROUP, "--topic", TOPIC,
                      "--time", "99999999999999", "--no-force", "--store", str(tmp_path))
    assert [row["changed"] for row in resets] == [False, False]  # the end: nothing rolls back
    resets = run_json("consumer", "reset", "--group", GROUP, "--topic", TOPIC,
                      "--time", "0", "--no-force", "--store", str(tmp_path))
    assert committed(tmp_path) == {0: 0, 1: 0}
    assert [row["before"] for row in resets] == [4, 1]


def test_an_unknown_topic_is_one_error_line(tmp_path: Path) -> None:
    make_store(tmp_path)
    from tests.cli.cli_support import run

    result = run("consumer", "reset", "--group", GROUP, "--topic", "nope", "--time", "0",
                 "--store", str(tmp_path))
    assert_one_error_line(result, "no topic 'nope'")
