"""A store writer meant to be killed with SIGKILL (the subject of ``test_crash.py``).

Run from the repository root::

    python -m tests.support.crash_writer --root DIR --acks FILE --mode SYNC --seed 7 --run 3

It opens the store at ``--root`` with ``crash_config`` (64 KiB commit-log segments, 32-unit
consume-queue files and 127-entry index files, so every kind of file rolls within a run), prints
``ready`` on stdout once ``MessageStore.open`` returned, then puts the messages of
``planned_messages(seed, run)`` one at a time, forever. After each ``put_message`` returned it
appends one acknowledgement line to ``--acks`` and fsyncs that file before the next put, so the
parent knows exactly which puts were acknowledged: a line on disk means its put had returned, and
at most one put (the one after the last line) can have been in flight when the kill landed.

The messages are a pure function of (seed, run, seq), so the parent regenerates them instead of
trusting anything the killed process wrote besides the store and the acknowledgements.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from postbox.storage_engine import (
    Clock,
    CommitLogConfig,
    ConsumeQueueConfig,
    FlushConfig,
    FlushMode,
    KeyIndexConfig,
    Message,
    MessageStore,
    PutResult,
    StoreConfig,
)

TOPICS = ("orders", "audit")
QUEUE_COUNT = 3
TAGS = ("paid", "new", None)
SEGMENT_SIZE_BYTES = 64 * 1024
PLANNED_MESSAGES_MAX = 1_000_000  # far more than a run can write before its kill


def crash_config(root: Path, mode: FlushMode) -> StoreConfig:
    """Small files so segments, consume-queue files and index files all roll in one run;
    short flush intervals so ASYNC flushes and checkpoints happen while the writer runs; the
    fewest open queue files allowed, so files are closed and reopened (loads and recovery
    scans touch more than 8) around the kills."""
    return StoreConfig(
        root_dir=root,
        commit_log=CommitLogConfig(segment_size_bytes=SEGMENT_SIZE_BYTES),
        consume_queue=ConsumeQueueConfig(units_per_file=32, open_files_max=8),
        key_index=KeyIndexConfig(slot_count_max=64, entry_count_max=128),
        flush=FlushConfig(mode=mode, interval_ms=50, thorough_interval_ms=400,
                          consume_queue_interval_ms=100,
                          consume_queue_thorough_interval_ms=500))


def open_store(config: StoreConfig, clock: Clock | None = None) -> MessageStore:
    """Open with retention pinned (disk 10 % used, never a deletion hour): a nearly full CI
    disk or a run at 4 a.m. must not delete segments under the test."""
    return MessageStore.open(config, clock=clock, disk_usage=lambda _path: 0.1,
                             hour_of_day=lambda _ms: 12)


@dataclass(frozen=True)
class Planned:
    """One message the writer of run ``run`` puts as its ``seq``-th put."""

    run: int
    seq: int
    topic: str
    queue_id: int
    tags: str | None
    body: bytes

    @property
    def key(self) -> str:
        """The message's unique key (its second key, ``g<n>``, is shared)."""
        return unique_key(self.run, self.seq)

    @property
    def digest(self) -> str:
        """Short body digest, as written in acknowledgement lines."""
        return body_digest(self.body)

    def message(self) -> Message:
        """The ``Message`` to put."""
        return Message(self.topic, self.body, tags=self.tags,
                       keys=[self.key, f"g{self.seq % 7}"])


def unique_key(run: int, seq: int) -> str:
    """Key naming one planned message across all runs of a store."""
    return f"r{run}-s{seq}"


def body_digest(body: bytes) -> str:
    """First 16 hex digits of the body's SHA-256."""
    return hashlib.sha256(body).hexdigest()[:16]


def _body_size(rng: random.Random) -> int:
    draw = rng.random()
    if draw < 0.03:
        return rng.randrange(20_000, 40_000)  # most of a 64 KiB segment
    if draw < 0.15:
        return rng.randrange(2_000, 10_000)
    return rng.randrange(1, 2_000)


def planned_messages(seed: int, run: int) -> Iterator[Planned]:
    """The messages of one run, in put order (deterministic in ``seed`` and ``run``)."""
    rng = random.Random(f"crash-writer/{seed}/{run}")
    for seq in range(PLANNED_MESSAGES_MAX):
        yield Planned(run, seq, rng.choice(TOPICS), rng.randrange(QUEUE_COUNT),
                      rng.choice(TAGS), rng.randbytes(_body_size(rng)))


class Ack(NamedTuple):
    """One acknowledgement line: a put that returned, and what it returned."""

    run: int
    seq: int
    queue_id: int
    queue_offset: int
    log_position: int
    key: str
    body_length: int
    digest: str
    status: str


def format_ack(planned: Planned, result: PutResult) -> str:
    """The line the writer appends after ``put_message`` returned ``result``."""
    return (f"{planned.run} {planned.seq} {result.queue_id} {result.queue_offset} "
            f"{result.log_position} {planned.key} {len(planned.body)} {planned.digest} "
            f"{result.status.value}\n")


def read_acks(path: Path) -> list[Ack]:
    """Every complete acknowledgement line of ``path``; a torn last line is ignored."""
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.split("\n")[:-1]  # the part after the last newline is torn (or empty)
    acks = []
    for line in lines:
        run, seq, queue_id, offset, position, key, length, digest, status = line.split(" ")
        acks.append(Ack(int(run), int(seq), int(queue_id), int(offset), int(position), key,
                        int(length), digest, status))
    return acks


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def run_writer(config: StoreConfig, acks_path: Path, seed: int, run: int) -> None:
    """Open the store, say ``ready``, put and acknowledge until killed."""
    store = open_store(config)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    fd = os.open(acks_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for planned in planned_messages(seed, run):
        result = store.put_message(planned.message(), planned.queue_id)
        _write_all(fd, format_ack(planned, result).encode())
        os.fsync(fd)
    sys.stdin.read()  # out of planned messages: wait for the kill, never close cleanly


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--acks", type=Path, required=True)
    parser.add_argument("--mode", choices=[mode.name for mode in FlushMode], required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--run", type=int, required=True)
    args = parser.parse_args(argv)
    run_writer(crash_config(args.root, FlushMode[args.mode]), args.acks, args.seed, args.run)


if __name__ == "__main__":
    main()
