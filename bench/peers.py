"""Peer queues for the store benchmark: one small adapter per library, same two operations.

Every adapter stores a message per ``put_many`` item and reads messages back in order in
``get_all(limit)`` (touching each body, returning how many it read; every message unless the
adapter sets ``get_count_max``). Adapters differ in what a put
costs on disk, and the benchmark reports that next to the figures:

* ``LiteQueuePeer``: litequeue ``LiteQueue.put`` (SQLite WAL, ``synchronous=NORMAL``, one
  autocommit per put; WAL commits are not fsynced in NORMAL mode).
* ``DiskcacheDequePeer``: diskcache ``Deque.append`` (SQLite WAL, ``synchronous=NORMAL``).
* ``PersistQueuePeer``: persist-queue ``SQLiteQueue.put`` with ``auto_commit=True`` (SQLite WAL,
  default ``synchronous=FULL``: every put is a commit and every commit fsyncs the WAL).
* ``SqliteWalPeer``: raw ``sqlite3``, WAL, ``synchronous=NORMAL``, rows ``(key, tag, body)``,
  one ``INSERT`` call per row, a commit every 1 000 rows (a per-message API, like
  ``put_message``).
* ``SqliteWalBatchPeer``: the same table filled with ``executemany`` of 1 000 rows per commit (a
  batch API, like ``put_messages``); ``SqliteWalBatchIndexedPeer`` adds an index on ``key``
  (Postbox maintains a key index, so that variant is the closer match).

Each adapter says whether it fsyncs per put (``fsync_per_put``) and whether its put is a
per-message or a batch call (``api``), so the report can compare like with like.
Queue peers store the body only (they have no key or tag); the sqlite3 peers store all three.
``ratios`` turns the figures into like-for-like ratios (``bench.report`` prints them).
Nothing here is thread-safe; each measurement opens a fresh adapter in a fresh directory, and
``measure_peer`` deletes that directory afterwards.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

SQLITE_COMMIT_ROWS = 1_000
SQLITE_READ_BATCH = 32


class BenchError(Exception):
    """A measurement produced a wrong result (root error of the ``bench`` package)."""


def run_and_print(run: Callable[[Any], dict], render: Callable[[dict], None], args: Any) -> int:
    """The common tail of every benchmark's ``main``: run, then print the report as JSON
    (``--json``) or tables; a ``BenchError`` becomes one ``[bench] FAILED`` line and exit 2."""
    try:
        report = run(args)
    except BenchError as error:
        print(f"[bench] FAILED: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=2, default=str))  # datetimes and paths as text
    else:
        render(report)
    return 0


class LiteQueuePeer:
    """litequeue ``LiteQueue``: one autocommitted INSERT per put, no fsync per put."""

    name = "litequeue LiteQueue.put"
    fsync_per_put = False
    api = "per-message"
    note = ("WAL, synchronous=NORMAL, autocommit per put; get = pop (consumes), first 2 000 "
            "only: each pop scans the table")
    get_count_max = 2_000

    def __init__(self, directory: Path) -> None:
        from litequeue import LiteQueue

        self._queue = LiteQueue(str(directory / "litequeue.db"))

    def put_many(self, keys: Sequence[str], bodies: Sequence[bytes]) -> None:
        put = self._queue.put
        for body in bodies:
            put(body)

    def get_all(self, limit: int) -> int:
        pop = self._queue.pop
        count = 0
        while count < limit and (message := pop()) is not None:
            len(message.data)
            count += 1
        return count

    def close(self) -> None:
        self._queue.close()


class DiskcacheDequePeer:
    """diskcache ``Deque``: one SQLite transaction per append, no fsync per append."""

    name = "diskcache Deque.append"
    fsync_per_put = False
    api = "per-message"
    note = "WAL, synchronous=NORMAL, one transaction per append; get = iterate"

    def __init__(self, directory: Path) -> None:
        from diskcache import Deque

        self._deque = Deque(directory=str(directory / "deque"))

    def put_many(self, keys: Sequence[str], bodies: Sequence[bytes]) -> None:
        append = self._deque.append
        for body in bodies:
            append(body)

    def get_all(self, limit: int) -> int:
        count = 0
        for body in self._deque:
            if count == limit:
                break
            len(body)
            count += 1
        return count

    def close(self) -> None:
        self._deque.cache.close()


class PersistQueuePeer:
    """persist-queue ``SQLiteQueue`` with ``auto_commit=True``: a fsynced commit per put."""

    name = "persist-queue SQLiteQueue.put"
    fsync_per_put = True
    api = "per-message"
    note = "auto_commit=True, WAL, synchronous=FULL: fsync per put; get = get (commits)"

    def __init__(self, directory: Path) -> None:
        from persistqueue import SQLiteQueue

        self._queue = SQLiteQueue(str(directory / "persistqueue"), auto_commit=True)

    def put_many(self, keys: Sequence[str], bodies: Sequence[bytes]) -> None:
        put = self._queue.put
        for body in bodies:
            put(body)

    def get_all(self, limit: int) -> int:
        from persistqueue import Empty

        get = self._queue.get
        count = 0
        while count < limit:
            try:
                body = get(block=False)
            except Empty:
                return count
            len(body)
            count += 1
        return count

    def close(self) -> None:
        self._queue.close()


class SqliteWalPeer:
    """Raw ``sqlite3`` in WAL mode: one ``INSERT`` call per row, a commit every 1 000 rows."""

    name = "sqlite3 WAL, INSERT/row, commit/1000"
    fsync_per_put = False
    api = "per-message"
    note = "synchronous=NORMAL, rows (key, tag, body), no key index; get = SELECT 32/batch"
    key_index = False

    def __init__(self, directory: Path) -> None:
        self._conn = sqlite3.connect(str(directory / "raw.db"), isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("CREATE TABLE msg (id INTEGER PRIMARY KEY, key TEXT NOT NULL, "
                           "tag TEXT NOT NULL, body BLOB NOT NULL)")
        if self.key_index:
            self._conn.execute("CREATE INDEX msg_key ON msg(key)")

    def put_many(self, keys: Sequence[str], bodies: Sequence[bytes]) -> None:
        execute = self._conn.execute
        sql = "INSERT INTO msg (key, tag, body) VALUES (?, 't', ?)"
        for start in range(0, len(bodies), SQLITE_COMMIT_ROWS):
            execute("BEGIN")
            for i in range(start, min(start + SQLITE_COMMIT_ROWS, len(bodies))):
                execute(sql, (keys[i], bodies[i]))
            execute("COMMIT")

    def get_all(self, limit: int) -> int:
        sql = "SELECT id, body FROM msg WHERE id > ? ORDER BY id LIMIT ?"
        last_id, count = 0, 0
        while count < limit and (rows := self._conn.execute(
                sql, (last_id, min(SQLITE_READ_BATCH, limit - count))).fetchall()):
            for row_id, body in rows:
                len(body)
                last_id = row_id
            count += len(rows)
        return count

    def close(self) -> None:
        self._conn.close()


class SqliteWalBatchPeer(SqliteWalPeer):
    """Raw ``sqlite3`` in WAL mode: ``executemany`` of 1 000 rows, one commit each."""

    name = "sqlite3 WAL, executemany/1000"
    api = "batch"
    note = "synchronous=NORMAL, rows (key, tag, body), no key index, one commit per batch"

    def put_many(self, keys: Sequence[str], bodies: Sequence[bytes]) -> None:
        conn = self._conn
        sql = "INSERT INTO msg (key, tag, body) VALUES (?, 't', ?)"
        for start in range(0, len(bodies), SQLITE_COMMIT_ROWS):
            stop = start + SQLITE_COMMIT_ROWS
            conn.execute("BEGIN")
            conn.executemany(sql, zip(keys[start:stop], bodies[start:stop], strict=True))
            conn.execute("COMMIT")


class SqliteWalBatchIndexedPeer(SqliteWalBatchPeer):
    """``SqliteWalBatchPeer`` plus an index on ``key`` (closer to what Postbox maintains)."""

    name = "sqlite3 WAL, executemany/1000, key index"
    note = "as above plus CREATE INDEX on key (Postbox also indexes keys)"
    key_index = True


PEERS: tuple[type, ...] = (LiteQueuePeer, DiskcacheDequePeer, PersistQueuePeer, SqliteWalPeer,
                           SqliteWalBatchPeer, SqliteWalBatchIndexedPeer)


def measure_peer(peer_cls: type, keys: Sequence[str], bodies: Sequence[bytes], reps: int,
                 tmp_root: str | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> dict:
    """Put then read back ``bodies`` in a fresh directory ``reps`` times; median rates.

    Raises ``BenchError`` when a read-back does not return every message.
    """
    get_count = min(len(bodies), getattr(peer_cls, "get_count_max", None) or len(bodies))
    put_s, get_s = [], []
    for _ in range(reps):
        directory = Path(tempfile.mkdtemp(prefix="postbox-bench-peer-", dir=tmp_root))
        try:
            peer = peer_cls(directory)
            try:
                start = clock()
                peer.put_many(keys, bodies)
                put_s.append(clock() - start)
                start = clock()
                read = peer.get_all(get_count)
                get_s.append(clock() - start)
            finally:
                peer.close()
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        if read != get_count:
            raise BenchError(f"{peer_cls.name}: read back {read} of {get_count} messages")
    count = len(bodies)
    return {
        "name": peer_cls.name, "fsync_per_put": peer_cls.fsync_per_put, "api": peer_cls.api,
        "note": peer_cls.note,
        "count": count, "reps": reps, "put_seconds": put_s, "get_seconds": get_s,
        "put_msgs_per_s": count / statistics.median(put_s),
        "get_count": get_count, "get_msgs_per_s": get_count / statistics.median(get_s),
        "put_mb_per_s": count * len(bodies[0]) / statistics.median(put_s) / 1e6,
    }


def like_for_like(postbox: dict, peer: dict) -> tuple[str, float] | None:
    """Which Postbox put compares with ``peer``, and the ratio Postbox ÷ peer."""
    if peer["fsync_per_put"]:
        name = "put_sync"
    else:
        name = "put_batch" if peer["api"] == "batch" else "put_single"
    if name not in postbox:
        return None
    return name, postbox[name]["per_s"] / peer["put_msgs_per_s"]


def ratios(postbox: dict, peers: list[dict]) -> dict:
    """Per-peer like-for-like ratios and the headline against the fastest non-fsyncing peer."""
    per_peer = {}
    for peer in peers:
        pair = like_for_like(postbox, peer) if postbox else None
        if pair is not None:
            per_peer[peer["name"]] = {
                "postbox": pair[0], "ratio": pair[1],
                "suspect": not postbox[pair[0]].get("fsync_plausible", True)}
    headline = {}
    non_fsync = [peer for peer in peers if not peer["fsync_per_put"]]
    if postbox and non_fsync:
        fastest = max(non_fsync, key=lambda peer: peer["put_msgs_per_s"])
        headline = {"fastest_non_fsync_peer": fastest["name"],
                    "peer_put_msgs_per_s": fastest["put_msgs_per_s"],
                    "single_ratio": postbox["put_single"]["per_s"] / fastest["put_msgs_per_s"],
                    "batch_ratio": postbox["put_batch"]["per_s"] / fastest["put_msgs_per_s"]}
    return {"per_peer": per_peer, "headline": headline}
