"""Crash tests with real processes: a writer is killed with SIGKILL mid-write, again and again.

What is simulated: a process crash (``kill -9``) at a random moment of a writer that puts
messages into a store (``tests/support/crash_writer.py``): during interpreter start-up, during
``MessageStore.open`` (including the recovery of the previous crash, since some iterations start
the next writer without reopening in between), or in the middle of puts, segment rolls,
consume-queue and index rolls and flushes. A process crash keeps the page cache, so nothing a put
returned for may be lost, in SYNC and in ASYNC mode alike; only the one put in flight may be torn.
Power loss, where unflushed pages vanish, is ``test_power_loss.py``.

After each kill (or after a few stacked kills) the test reopens the store in this process and
asserts exactly what survived: the log holds every earlier survivor unchanged, then for each
writer run a gap-free prefix of its planned messages containing every acknowledged one and at most
the one in flight; every queue, read with ``get_message``, holds exactly its share of that log in
offset order; every message is found by position and by key, and the one lost in flight by
neither; ``verify_store`` is clean after the close. Seeds are printed in every assertion message.

Also: the store lock dies with a killed holder, and a crash soon after a restart still recovers
from the checkpoint the clean close before it wrote.
"""

from __future__ import annotations

import random
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pytest

from postbox.storage_engine import (
    FakeClock,
    FlushConfig,
    FlushMode,
    Message,
    MessageStore,
    MessageView,
    StoreLockedError,
    verify_store,
)
from tests.storage_engine.conftest import START_MS, abandon, read_queue
from tests.support.crash_writer import (
    SEGMENT_SIZE_BYTES,
    Ack,
    Planned,
    body_digest,
    crash_config,
    open_store,
    planned_messages,
    read_acks,
    unique_key,
)
from tests.support.paths import REPO_ROOT

READY_TIMEOUT_S = 30.0
KILL_DELAY_S = (0.05, 0.6)  # after the writer said ready
EARLY_KILL_CHANCE = 0.15  # kill during start-up instead
EARLY_KILL_CHANCE_RECOVERING = 0.5  # ... when the writer has an unclean stop to recover
EARLY_KILL_DELAY_S = (0.0, 0.3)  # after the process started
CHECK_CHANCE = 0.7  # otherwise the next writer recovers the crash itself


class Entry(NamedTuple):
    """A message the store must keep: where it is and what it holds."""

    run: int
    seq: int
    topic: str
    queue_id: int
    queue_offset: int
    log_position: int
    digest: str


@dataclass
class WriterRun:
    """One writer process: did it finish opening, and what did it acknowledge."""

    run: int
    ready: bool
    acks: list[Ack]


class Plans:
    """The planned messages of every run, regenerated lazily."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._runs: dict[int, tuple[Iterator[Planned], list[Planned]]] = {}

    def get(self, run: int, seq: int) -> Planned:
        generator, planned = self._runs.setdefault(
            run, (planned_messages(self._seed, run), []))
        while len(planned) <= seq:
            planned.append(next(generator))
        return planned[seq]


def _start_writer(root: Path, mode: FlushMode, seed: int, run: int,
                  work: Path) -> subprocess.Popen:
    with (work / f"writer-{run}.stderr").open("wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.support.crash_writer", "--root", str(root),
             "--acks", str(work / f"acks-{run}.txt"), "--mode", mode.name, "--seed", str(seed),
             "--run", str(run)],
            cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)


def _kill(process: subprocess.Popen) -> bytes:
    """SIGKILL, reap, and return what the writer had printed."""
    process.send_signal(signal.SIGKILL)
    process.wait()
    printed = process.stdout.read()
    process.stdout.close()
    process.stdin.close()
    return printed


def _run_writer(root: Path, mode: FlushMode, seed: int, run: int, rng: random.Random,
                work: Path, recovering: bool) -> WriterRun:
    """Start a writer, kill it at a random moment, return what it acknowledged."""
    process = _start_writer(root, mode, seed, run, work)
    ready = False
    try:
        if rng.random() < (EARLY_KILL_CHANCE_RECOVERING if recovering else EARLY_KILL_CHANCE):
            time.sleep(rng.uniform(*EARLY_KILL_DELAY_S))
        else:
            ready = _wait_ready(process, work / f"writer-{run}.stderr", seed, run)
            time.sleep(rng.uniform(*KILL_DELAY_S))
        assert process.poll() is None, (
            f"seed={seed} run={run}: the writer exited by itself with {process.returncode}: "
            f"{(work / f'writer-{run}.stderr').read_text()[-2000:]}")
    finally:
        printed = _kill(process)
    return WriterRun(run, ready or printed.startswith(b"ready"),
                     read_acks(work / f"acks-{run}.txt"))


def _wait_ready(process: subprocess.Popen, stderr_path: Path, seed: int, run: int) -> bool:
    """Block until the writer printed ``ready`` (its ``MessageStore.open`` returned)."""
    readable, _, _ = select.select([process.stdout], [], [], READY_TIMEOUT_S)
    assert readable, f"seed={seed} run={run}: writer not ready after {READY_TIMEOUT_S} s"
    line = process.stdout.readline()
    assert line == b"ready\n", (f"seed={seed} run={run}: writer failed to open: "
                                f"{stderr_path.read_text()[-2000:]}")
    return True


class Expected:
    """What the store must hold: every survivor of the runs checked so far, in log order."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.plans = Plans(seed)
        self.entries: list[Entry] = []

    def match_log(self, views: list[MessageView], runs: list[WriterRun], where: str) -> None:
        """Check the whole log against the old survivors and the new runs; adopt the result."""
        old = len(self.entries)
        assert len(views) >= old, f"{where}: log lost earlier survivors ({len(views)} < {old})"
        for entry, view in zip(self.entries, views, strict=False):
            assert _entry_of(view, entry.run, entry.seq) == entry, (
                f"{where}: earlier survivor changed: {entry}")
        queue_sizes = Counter((e.topic, e.queue_id) for e in self.entries)
        cursor = old
        for writer in runs:
            survived = 0
            while cursor < len(views) and _run_seq(views[cursor]) == (writer.run, survived):
                entry = self._check_new(views[cursor], writer, survived, queue_sizes, where)
                self.entries.append(entry)
                queue_sizes[(entry.topic, entry.queue_id)] += 1
                survived += 1
                cursor += 1
            _check_survivor_count(writer, survived, where)
        assert cursor == len(views), (
            f"{where}: unexpected record at position={views[cursor].log_position}: "
            f"keys={views[cursor].keys}")

    def _check_new(self, view: MessageView, writer: WriterRun, seq: int, queue_sizes: Counter,
                   where: str) -> Entry:
        planned = self.plans.get(writer.run, seq)
        assert (view.topic, view.queue_id, view.tags, body_digest(view.body)) == (
            planned.topic, planned.queue_id, planned.tags, planned.digest), (
            f"{where}: run {writer.run} seq {seq} at position={view.log_position} differs from "
            "what was put")
        assert view.queue_offset == queue_sizes[(planned.topic, planned.queue_id)], (
            f"{where}: run {writer.run} seq {seq}: queue offset {view.queue_offset}, expected "
            f"{queue_sizes[(planned.topic, planned.queue_id)]}")
        if seq < len(writer.acks):
            ack = writer.acks[seq]
            assert (ack.seq, ack.queue_offset, ack.log_position, ack.digest) == (
                seq, view.queue_offset, view.log_position, planned.digest), (
                f"{where}: acknowledged {ack} but the store holds position="
                f"{view.log_position} offset={view.queue_offset}")
        return _entry_of(view, writer.run, seq)


def _run_seq(view: MessageView) -> tuple[int, int] | None:
    run, _, seq = view.keys[0][1:].partition("-s") if view.keys else ("", "", "")
    return (int(run), int(seq)) if run.isdigit() and seq.isdigit() else None


def _entry_of(view: MessageView, run: int, seq: int) -> Entry:
    return Entry(run, seq, view.topic, view.queue_id, view.queue_offset, view.log_position,
                 body_digest(view.body))


def _check_survivor_count(writer: WriterRun, survived: int, where: str) -> None:
    """Every put up to the last acknowledged one survived, and at most one put more."""
    required = max((ack.seq + 1 for ack in writer.acks if ack.status == "PUT_OK"), default=0)
    assert required <= survived <= len(writer.acks) + 1, (
        f"{where}: run {writer.run}: puts up to seq {required - 1} were acknowledged "
        f"({len(writer.acks)} returned) but {survived} survived the kill")


def _check_reads(store: MessageStore, expected: Expected, runs: list[WriterRun],
                 where: str) -> None:
    """Every survivor by queue offset, by position and by key; lost ones by neither."""
    by_queue: dict[tuple[str, int], list[Entry]] = {}
    for entry in expected.entries:
        by_queue.setdefault((entry.topic, entry.queue_id), []).append(entry)
    for (topic, queue_id), entries in sorted(by_queue.items()):
        pulled = [_entry_of(view, *_run_seq(view)) for view in read_queue(store, topic, queue_id)]
        assert pulled == entries, f"{where}: queue {topic}/{queue_id} differs from its log share"
        assert store.max_offset(topic, queue_id) == len(entries), where
    for entry in expected.entries:
        view = store.read_message(entry.log_position)
        assert _entry_of(view, entry.run, entry.seq) == entry, f"{where}: {entry} by position"
        found = store.query_by_key(entry.topic, unique_key(entry.run, entry.seq))
        assert [v.log_position for v in found] == [entry.log_position], (
            f"{where}: query_by_key({entry.topic}, {unique_key(entry.run, entry.seq)}) returned "
            f"positions {[v.log_position for v in found]}, expected [{entry.log_position}]")
    survived = Counter(entry.run for entry in expected.entries)
    for writer in runs:  # the put after the last survivor never happened, or was torn
        lost = expected.plans.get(writer.run, survived[writer.run])
        assert store.query_by_key(lost.topic, lost.key) == [], f"{where}: {lost.key} found"


def _check_store(root: Path, mode: FlushMode, expected: Expected, runs: list[WriterRun],
                 unclean: bool, where: str) -> None:
    config = crash_config(root, mode)
    store = open_store(config)
    try:
        recovery = store.stats()["recovery"]
        if unclean:
            assert recovery["clean_shutdown"] is False, f"{where}: {recovery}"
        expected.match_log(list(store.iter_messages()), runs, where)
        _check_reads(store, expected, runs, where)
    finally:
        store.close()
    assert verify_store(root, config) == [], f"{where}: recovery {recovery}"


def _kill_loop(tmp_path: Path, mode: FlushMode, seed: int, iterations: int) -> Expected:
    """Kill ``iterations`` writers on one store directory, checking after most kills."""
    rng = random.Random(seed)
    tmp_path.mkdir(parents=True, exist_ok=True)
    root = tmp_path / "store"
    expected = Expected(seed)
    pending: list[WriterRun] = []
    unclean = False
    for run in range(iterations):
        writer = _run_writer(root, mode, seed, run, rng, tmp_path, recovering=unclean)
        pending.append(writer)
        unclean = unclean or writer.ready  # ready: the writer's open created ``abort``
        if run == iterations - 1 or rng.random() < CHECK_CHANCE:
            where = (f"seed={seed} mode={mode.name} run={run} "
                     f"(runs since last check: {[w.run for w in pending]})")
            _check_store(root, mode, expected, pending, unclean, where)
            pending, unclean = [], False
    return expected


@pytest.mark.parametrize(("mode", "iterations", "seed"), [
    (FlushMode.SYNC, 20, 20_240_611),
    (FlushMode.ASYNC, 10, 20_240_612),
])
def test_kill_9_keeps_every_acknowledged_message(tmp_path, mode, iterations, seed):
    expected = _kill_loop(tmp_path, mode, seed, iterations)
    runs_with_survivors = {entry.run for entry in expected.entries}
    assert len(runs_with_survivors) >= iterations // 2, (
        f"seed={seed}: only runs {sorted(runs_with_survivors)} wrote anything: the kills "
        "land too early to test much")


@pytest.mark.slow  # `make test-slow`, run by CI
@pytest.mark.timeout(1_200)  # about 5 min each on a busy 2-core machine
@pytest.mark.parametrize(("mode", "seed"), [(FlushMode.SYNC, 1), (FlushMode.ASYNC, 2)])
def test_kill_9_long_run(tmp_path, mode, seed):
    for store_number in range(4):  # 4 x 25 kills: the checks reread whole stores
        _kill_loop(tmp_path / f"round-{store_number}", mode, seed * 100 + store_number, 25)


def test_kill_9_releases_the_store_lock(tmp_path):
    root = tmp_path / "store"
    config = crash_config(root, FlushMode.SYNC)
    process = _start_writer(root, FlushMode.SYNC, 5, 0, tmp_path)
    try:
        _wait_ready(process, tmp_path / "writer-0.stderr", 5, 0)
        with pytest.raises(StoreLockedError):
            open_store(config)
    finally:
        _kill(process)
    with open_store(config) as store:
        assert store.stats()["recovery"]["clean_shutdown"] is False
    assert verify_store(root, config) == []


def test_a_crash_soon_after_a_restart_scans_from_the_checkpoint(tmp_path):
    """A clean close records in the checkpoint that everything stored so far is durable. The
    next session must not forget it: a crash before its first thorough queue flush should scan
    from the segment the checkpoint names, not re-dispatch the whole log. (The crash here is
    ``conftest.abandon``: threads stopped, files released, no close — what kill -9 leaves.)"""
    config = crash_config(tmp_path / "store", FlushMode.SYNC).replace(
        flush=FlushConfig(mode=FlushMode.SYNC, consume_queue_interval_ms=3_600_000))
    clock = FakeClock(START_MS)
    store = open_store(config, clock)
    for number in range(100):  # 100 ms apart, two segments (about 59 records each)
        store.put_message(Message("orders", bytes(1000), keys=[f"k{number}"]), 0)
        clock.advance(100)
    store.close()
    clock.advance(10_000)
    store = open_store(config, clock)
    store.put_message(Message("orders", b"after the restart"), 0)
    abandon(store)
    store = open_store(config, clock)
    try:
        report = store.stats()["recovery"]
        # checkpoint - 3 s = the 70th record's time: the second segment started before it
        assert (report["scan_start"], report["checkpoint_trusted"]) == (SEGMENT_SIZE_BYTES, True)
    finally:
        store.close()
