"""Outbox message groups: relay throughput with stubs in FIFO message groups vs without.

Run ``python -m bench.outbox_groups_bench`` (or ``postbox bench outbox-groups``); ``--json``
for one JSON document on stdout (progress goes to stderr).

Per mode — ``ungrouped``, then ``--groups`` G message groups (default 100; ``--groups 100
--groups 1000`` measures several) — a fresh SQLite file (or ``--database URL``, whose outbox
tables are dropped and created again) gets ``--messages`` N stubs (default 5 000) committed
before the clock, 500 per transaction through ``outbox.send``, the groups interleaved
(message i in group i mod G, so every group has N / G stubs in send order), then analyzed
(PostgreSQL, MariaDB: the planner's statistics, as autovacuum keeps them). Then one ``Relay``
over an embedded store drains them with ``publish_due()`` passes until none is left: stubs/s
is N over that time. The grouped modes then check the order: within each group the stubs'
queue offsets grow in send order, all in one queue (a violation raises ``BenchError``).

What it shows: an ungrouped claim takes ``batch_size`` stubs and publishes them in batch sends
of one topic, one call per ``send_batch_max``; a grouped claim takes one stub per group (its
group's head, ``claims.group_head``) and publishes each alone (its group's queue), so a pass
costs one send per group and one more claim round per stub of the busiest group.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, select

from bench.outbox_scale_data import analyze
from bench.peers import BenchError, run_and_print
from postbox import outbox
from postbox.framework import App
from postbox.outbox import Relay, RelayOptions, message_stub

stub = message_stub.c
TOPIC = "bench-groups"
SENDS_PER_TRANSACTION = 500


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="postbox bench outbox-groups", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=5_000, help="stubs per mode")
    p.add_argument("--groups", type=int, action="append", default=None,
                   help="message groups of a grouped mode (repeatable; default 100)")
    p.add_argument("--batch", type=int, default=100, help="the relay's batch_size")
    p.add_argument("--database", default=None,
                   help="a database URL (default: a SQLite file per mode)")
    p.add_argument("--dir", default=None, help="parent of the temp dirs (None: system temp)")
    p.add_argument("--json", action="store_true", help="print one JSON document, no table")
    args = p.parse_args(argv)
    args.groups = args.groups or [100]
    return args


def progress(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


def fill(engine: Engine, messages: int, groups: int | None) -> None:
    """Commit ``messages`` stubs, interleaved over ``groups`` message groups (None: none)."""
    for first in range(0, messages, SENDS_PER_TRANSACTION):
        with engine.begin() as connection:
            for number in range(first, min(first + SENDS_PER_TRANSACTION, messages)):
                group = f"group-{number % groups}" if groups else None
                outbox.send(connection, TOPIC, f"{group}:{number}", message_group=group)


def check_order(engine: Engine) -> None:
    """Within each group: one queue, offsets growing in send order."""
    query = select(stub.message_group, stub.queue_id, stub.queue_offset).where(
        stub.message_group.is_not(None)).order_by(stub.message_group, stub.created_at,
                                                   stub.message_id)
    seen: dict[str, tuple[int, int]] = {}
    queues: dict[str, set[int]] = defaultdict(set)
    with engine.connect() as connection:
        for group, queue_id, offset in connection.execute(query):
            queues[group].add(queue_id)
            last = seen.get(group)
            if last is not None and offset <= last[1]:
                raise BenchError(f"{group}: offset {offset} after {last[1]}")
            seen[group] = (queue_id, offset)
    if any(len(ids) != 1 for ids in queues.values()):
        raise BenchError("a group's stubs went to more than one queue")


def measure(args: argparse.Namespace, groups: int | None, root: Path) -> dict[str, Any]:
    url = args.database or f"sqlite:///{root / 'outbox.db'}"
    engine = outbox.create_database_engine(url)
    outbox.metadata.drop_all(engine)
    outbox.metadata.create_all(engine)
    app = App(store_url=root / "store")
    try:
        fill(engine, args.messages, groups)
        if engine.dialect.name != "sqlite":  # planner statistics, as autovacuum keeps them
            analyze(engine)
        relay = Relay(app.producer, engine, options=RelayOptions(batch_size=args.batch),
                      owner="bench-relay")
        started = time.perf_counter()
        while relay.publish_due():
            pass
        elapsed = time.perf_counter() - started
        with engine.connect() as connection:
            left = connection.execute(select(func.count()).where(
                stub.published_at.is_(None))).scalar_one()
        if left or relay.stats.failed:
            raise BenchError(f"{left} stubs left unpublished, {relay.stats.failed} failed")
        if groups:
            check_order(engine)
    finally:
        app.stop()
        engine.dispose()
    return {"mode": f"{groups} groups" if groups else "ungrouped", "groups": groups,
            "messages": args.messages, "seconds": round(elapsed, 3),
            "stubs_per_s": round(args.messages / elapsed)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    results = []
    for groups in [None, *args.groups]:
        root = Path(tempfile.mkdtemp(prefix="outbox-groups-", dir=args.dir))
        try:
            result = measure(args, groups, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        progress(f"{result['mode']}: {result['stubs_per_s']} stubs/s")
        results.append(result)
    base = results[0]["stubs_per_s"]
    for result in results:
        result["ratio"] = round(result["stubs_per_s"] / base, 3)
    return {"batch_size": args.batch, "database": args.database or "sqlite", "modes": results}


def render(report: dict[str, Any]) -> None:
    print(f"relay throughput, batch_size {report['batch_size']}, {report['database']}")
    print(f"{'mode':<14}{'stubs':>8}{'seconds':>10}{'stubs/s':>10}{'ratio':>8}")
    for row in report["modes"]:
        print(f"{row['mode']:<14}{row['messages']:>8}{row['seconds']:>10}"
              f"{row['stubs_per_s']:>10}{row['ratio']:>8}")


def main(argv: list[str] | None = None) -> int:
    return run_and_print(run, render, parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
