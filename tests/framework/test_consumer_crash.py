"""A consumer killed with SIGKILL loses nothing: after a restart every message is handled, and
the only messages handled twice are those after the offsets committed when it died. Embedded,
the killed process owned the store; remote, the broker keeps the committed offsets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from postbox.framework import App
from tests.support.consumer_process import BROKER_CONF
from tests.support.paths import REPO_ROOT
from tests.support.polling import wait_until

MESSAGE_COUNT = 3_000


def _start(store_url: str, handled: Path) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.consumer_process", "--root", store_url,
         "--handled", str(handled)],
        cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert process.stdout is not None
    assert process.stdout.readline().strip() == b"ready"
    return process


def _handled(path: Path) -> list[tuple[int, int]]:
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        queue_id, offset, _ = line.split(" ", 2)
        entries.append((int(queue_id), int(offset)))
    return entries


def _committed_and_sizes(options: dict) -> tuple[dict[int, int], dict[int, int]]:
    """Committed offsets and queue sizes (an embedded store is not open elsewhere)."""
    with App(**options) as app:
        rows = [row for row in app.client.consumer_progress("g") if row.topic == "events"]
    return ({row.queue_id: row.committed_offset or 0 for row in rows},
            {row.queue_id: row.max_offset for row in rows})


def test_kill_9_mid_consumption_then_restart_loses_nothing(tmp_path, store):
    root = store.url()
    options = store.app_options(broker_conf=BROKER_CONF)
    with App(**options) as app:
        for index in range(MESSAGE_COUNT):
            app.producer.send("events", f"m{index}")
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first_log.touch()
    second_log.touch()

    process = _start(root, first_log)
    wait_until(lambda: len(_handled(first_log)) >= MESSAGE_COUNT // 3, 60,
               "the consumer to make progress")
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    first = _handled(first_log)
    assert len(first) < MESSAGE_COUNT, "killed too late to test anything"
    committed, sizes = _committed_and_sizes(options)
    assert sum(sizes.values()) == MESSAGE_COUNT  # every queue of the topic is listed

    process = _start(root, second_log)
    expected_second = {(q, o) for q, count in sizes.items()
                       for o in range(committed[q], count)}
    wait_until(lambda: set(_handled(second_log)) == expected_second, 60,
               "the restarted consumer to finish")
    process.stdin.close()
    assert process.wait(30) == 0
    second = _handled(second_log)
    assert len(second) == len(set(second))  # no duplicate within one run
    everything = {(q, o) for q, count in sizes.items() for o in range(count)}
    assert set(first) | set(second) == everything  # nothing lost
    duplicates = set(first) & set(second)
    assert all(offset >= committed[queue] for queue, offset in duplicates)  # only the tail

