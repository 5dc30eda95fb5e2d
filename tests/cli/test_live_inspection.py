"""Inspection commands against a store another process is writing: they answer, and they change
nothing of the writer's files.

The writer is a real broker in its own process (``tests.support.live_writer``), holding the
store's lock and writing continuously; the commands run while it writes. For the "changes
nothing" check the writer is paused with SIGSTOP (its lock, mappings and threads stay as they
are), every file of the store is hashed, the commands run, the files are hashed again, and the
writer is resumed and must go on writing.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from postbox.storage_engine import MessageStore, verify_store
from postbox.storage_engine.store.read_only import writer_holds
from tests.cli.cli_support import run, run_json
from tests.support.live_writer import GROUP, SEGMENT_SIZE_BYTES, TOPIC, live_config
from tests.support.paths import REPO_ROOT
from tests.support.polling import wait_stopped, wait_until

STOP_TIMEOUT_S = 30


class LiveWriter:
    """The ``live_writer`` child process and the ``sent`` lines it printed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sent: list[tuple[int, str, str]] = []  # (index, UNIQ_KEY, offsetMsgId)
        self.closed = threading.Event()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.live_writer", "--root", str(root)],
            cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            words = line.split()
            if words[:1] == ["sent"]:
                self.sent.append((int(words[1]), words[2], words[3]))
            elif words == ["closed"]:
                self.closed.set()

    def wait_sent(self, count: int) -> None:
        wait_until(lambda: len(self.sent) >= count or self.process.poll() is not None,
                   what=f"{count} messages sent")
        assert self.process.poll() is None, "the writer died"

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            assert self.process.stdin is not None
            self.process.stdin.write("stop\n")
            self.process.stdin.close()
            self.process.wait(STOP_TIMEOUT_S)


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[LiveWriter]:
    live = LiveWriter(tmp_path / "store")
    try:
        live.wait_sent(300)
        yield live
    finally:
        live.stop()


def args(root: Path) -> list[str]:
    return ["--store", str(root), "--segment-size", str(SEGMENT_SIZE_BYTES)]


def body_index(document: dict) -> int:
    """``order N`` → N."""
    return int(document["body"].split()[1])


def test_inspection_answers_while_a_broker_writes(writer: LiveWriter) -> None:
    root = writer.root
    known = writer.sent[:200]
    stats = run_json("store", "stats", *args(root))
    assert stats["commit_log"]["max_position"] > 0
    assert {queue["topic"] for queue in stats["queues"]} >= {TOPIC, f"%DLQ%{GROUP}"}
    topics = {document["topic"] for document in run_json("store", "topics", *args(root))}
    assert TOPIC in topics

    index, unique_key, msg_id = known[150]
    assert body_index(run_json("query", "id", msg_id, *args(root))) == index
    assert body_index(run_json("query", "id", unique_key, *args(root))) == index
    [by_key] = run_json("query", "key", TOPIC, f"order-{index}", *args(root))
    assert body_index(by_key) == index
    [by_unique] = run_json("query", "unique-key", TOPIC, unique_key, *args(root))
    assert by_unique["msg_id"] == msg_id
    at_zero = run_json("query", "offset", TOPIC, "0", "0", *args(root))
    assert at_zero["status"] == "FOUND" and body_index(at_zero["message"]) == 0

    dumped = run_json("store", "dump", "--topic", TOPIC, "--limit", "0", *args(root))
    indexes = [body_index(document) for document in dumped]
    assert indexes == sorted(indexes) and len(set(indexes)) == len(indexes)
    assert indexes[:len(known)] == list(range(len(known)))  # no message lost, none torn

    [progress] = run_json("consumer", "progress", "-g", GROUP, *args(root))
    assert {queue["topic"] for queue in progress["queues"]} >= {TOPIC}
    assert sum(queue["committed_offset"] or 0 for queue in progress["queues"]) > 0
    letters = run_json("dlq", "list", "-g", GROUP, "--limit", "5", *args(root))
    assert [letter["reason"] for letter in letters] == [f"bad-{n}" for n in range(0, 50, 10)]

    sent = len(writer.sent)
    writer.wait_sent(sent + 200)  # the writer went on writing meanwhile, and goes on
    writer.stop()
    assert writer.closed.is_set()
    assert verify_store(root, live_config(root)) == []


def store_files(root: Path) -> dict[str, str]:
    """Every file of the store: relative path → SHA-256 of its bytes."""
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


INSPECTIONS = (
    ("store", "stats"), ("store", "topics"), ("store", "dump", "--limit", "0"),
    ("store", "verify"), ("query", "key", TOPIC, "order-3"), ("query", "offset", TOPIC, "0", "1"),
    ("query", "time", TOPIC, "0", "0"), ("consumer", "progress"),
    ("dlq", "list", "-g", GROUP),
)


def test_inspection_writes_nothing_and_the_writer_goes_on(writer: LiveWriter) -> None:
    root = writer.root
    os.kill(writer.process.pid, signal.SIGSTOP)
    try:
        wait_stopped(writer.process.pid)
        before = store_files(root)
        for command in INSPECTIONS:
            result = run(*command, *args(root), "--json")
            assert result.exit_code in (0, 1), (command, result.stdout, result.stderr)
        refused = run("dlq", "resend", "-g", GROUP, "--offset", "0", *args(root))
        assert refused.exit_code == 2 and "--broker" in refused.stderr
        assert store_files(root) == before
        assert writer_holds(root)
    finally:
        os.kill(writer.process.pid, signal.SIGCONT)
    sent = len(writer.sent)
    writer.wait_sent(sent + 200)
    writer.stop()
    assert writer.closed.is_set()
    assert verify_store(root, live_config(root)) == []
    with MessageStore.open(live_config(root)) as store:  # the writer's lock was released
        assert store.max_offset(TOPIC, 0) + store.max_offset(TOPIC, 1) == len(writer.sent)
