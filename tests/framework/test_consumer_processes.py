"""Consumers of one group in three separate processes share the queues of a remote broker (a
``postbox broker`` process or Apache RocketMQ): every message is handled exactly once overall
and the offsets are committed on the broker. Remote transports only: an embedded store belongs
to one process."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from postbox.framework import App
from tests.support.paths import REPO_ROOT
from tests.support.polling import wait_until

CONSUMERS = 3
MESSAGES = 600
QUEUES = 8 + 1  # the topic's queues plus %RETRY%g's one


def _spawn(store_url: str, handled: Path) -> subprocess.Popen:
    handled.touch()
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.remote_consumer_process", "--store-url", store_url,
         "--handled", str(handled)], cwd=REPO_ROOT, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE)


def _assignments(logs: list[Path]) -> list[set[str]]:
    sets = []
    for log in logs:
        path = Path(str(log) + ".queues")
        sets.append(set(path.read_text(encoding="utf-8").splitlines()) if path.exists()
                    else set())
    return sets


def _settled(logs: list[Path]) -> bool:
    """Every queue held by exactly one consumer, and each consumer holds some."""
    sets = _assignments(logs)
    return (all(sets) and sum(map(len, sets)) == QUEUES
            and len(set().union(*sets)) == QUEUES)


def _handled(log: Path) -> list[str]:
    return [line.split(" ", 2)[2] for line in log.read_text(encoding="utf-8").splitlines()]


@pytest.mark.remote_only("three processes share one broker")
def test_three_consumer_processes_share_the_queues_exactly_once(store, tmp_path):
    admin_app = App(store_url=store.url())
    admin = admin_app.client
    try:
        admin.create_topic("events", 8)
        logs = [tmp_path / f"handled-{index}.log" for index in range(CONSUMERS)]
        processes = [_spawn(store.url(), log) for log in logs]
        try:
            for process in processes:
                assert process.stdout is not None
                assert process.stdout.readline().strip() == b"ready"
            wait_until(lambda: len(admin.consumer_ids("g")) == CONSUMERS, 30, "3 members")
            wait_until(lambda: _settled(logs), 30, "a settled assignment")

            for index in range(MESSAGES):
                admin_app.producer.send("events", f"m{index}")
            wait_until(lambda: sum(len(_handled(log)) for log in logs) >= MESSAGES, 60,
                       "every message handled")
        finally:
            for process in processes:
                assert process.stdin is not None
                process.stdin.close()
            for process in processes:
                assert process.wait(60) == 0

        seen = Counter(body for log in logs for body in _handled(log))
        assert set(seen) == {f"m{index}" for index in range(MESSAGES)}  # nothing lost
        assert max(seen.values()) == 1  # nothing handled twice
        assert all(_handled(log) for log in logs)  # every process did part of the work
        progress = {(p.topic, p.queue_id): p for p in admin.consumer_progress("g")}
        for queue_id in range(8):
            item = progress[("events", queue_id)]
            assert item.committed_offset == item.max_offset > 0  # committed on the broker
        assert admin.consumer_ids("g") == []  # every process left the group
    finally:
        admin_app.stop()
