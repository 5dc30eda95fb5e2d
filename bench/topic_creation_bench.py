"""Topic and subscription-group creation cost as the tables grow.

Creates topics (then groups) on a fresh broker and prints the mean milliseconds per creation in
windows of 100 around given table sizes, plus how many files each table wrote. Each creation
persists ``topics.json`` / ``subscriptionGroup.json`` (atomic replace with fsync), so the figure
includes one fsync of the file system under ``--dir``.

    python bench/topic_creation_bench.py --topics 3000 --groups 1000 [--dir /tmp]

Timing is measured here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from postbox.storage_engine import Broker, BrokerConfig, StoreConfig

WINDOW = 100


def _timed(create, count: int, marks: set[int]) -> dict[int, float]:
    """Create ``count`` entries; ms per creation over the ``WINDOW`` creations ending at marks."""
    figures: dict[int, float] = {}
    started = time.perf_counter()
    for index in range(1, count + 1):
        if index % WINDOW == 1:
            started = time.perf_counter()
        create(index)
        if index % WINDOW == 0 and index in marks:
            figures[index] = (time.perf_counter() - started) * 1000 / WINDOW
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=3000)
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--dir", default=None, help="where the temporary store goes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        limits = {"topic_count_max": args.topics * 3 + 10,
                  "subscription_group_count_max": args.groups + 10}
        known = BrokerConfig.__dataclass_fields__  # older versions had no limits
        config = StoreConfig(root_dir=Path(directory) / "store", broker=BrokerConfig(
            **{name: value for name, value in limits.items() if name in known}))
        with Broker.open(config) as broker:
            topic_marks = {WINDOW, args.topics // 2 // WINDOW * WINDOW, args.topics}
            topics = _timed(lambda i: broker.create_topic(f"bench-topic-{i}"), args.topics,
                            topic_marks)
            group_marks = {WINDOW, args.groups}
            groups = _timed(lambda i: broker.subscription_group(f"bench-group-{i}"),
                            args.groups, group_marks)
            tables = broker.tables
            writes = (getattr(tables.topics, "persist_count", "?"),
                      getattr(tables.subscription_groups, "persist_count", "?"))
    for size, ms in sorted(topics.items()):
        print(f"topics: {ms:7.2f} ms per topic at {size} topics")
    for size, ms in sorted(groups.items()):
        print(f"groups: {ms:7.2f} ms per group at {size} groups")
    print(f"files written: topics.json {writes[0]}, subscriptionGroup.json {writes[1]}")


if __name__ == "__main__":
    main()
