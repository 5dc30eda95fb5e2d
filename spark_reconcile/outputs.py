"""What every engine does with a finished classification, without Spark: the counts rolled
up from the finest breakdown, the verdict, the description of the inputs, and the outputs
moved into place (``classification/``, ``classification.csv``, ``summary.json``,
``report.html``) only once they are all written, so a failed run leaves the previous report."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .classes import ALL_CLASSES, MessageClass
from .options import ReconcileOptions
from .report_html import render_report
from .results import ClassCount, ReconcileSummary
from .store_files import StoreFiles, list_store_files
from .table_export import Progress, describe_url

OUTPUT_NAMES = ("classification", "classification.csv", "summary.json", "report.html")
SAMPLE_CLASSES = (MessageClass.LOST, MessageClass.DEAD_LETTERED, MessageClass.EXHAUSTED,
                  MessageClass.ORPHAN_LOG, MessageClass.DLQ_WITHOUT_STUB)
SAMPLES_PER_CLASS = 20


def fill_counts(summary: ReconcileSummary, finest: list[ClassCount]) -> None:
    """The counts and every breakdown, from the (class, topic, group, hour) counts."""
    summary.by_topic_group_hour = sorted(finest, key=_order)
    summary.counts = dict.fromkeys(ALL_CLASSES, 0) | _roll_up(summary.by_topic_group_hour)
    summary.by_topic = _breakdown(summary.by_topic_group_hour, "topic")
    summary.by_group = _breakdown(summary.by_topic_group_hour, "consumer_group")
    summary.by_hour = _breakdown(summary.by_topic_group_hour, "hour")


def _order(count: ClassCount) -> tuple:
    return (count.topic or "", count.consumer_group or "", count.hour or datetime.min,
            count.classification)


def _roll_up(counts: list[ClassCount]) -> dict[str, int]:
    totals: Counter[str] = Counter()
    for count in counts:
        totals[MessageClass(count.classification)] += count.count
    return dict(totals)


def _breakdown(counts: list[ClassCount], key: str) -> list[ClassCount]:
    totals: Counter[tuple] = Counter()
    for count in counts:
        totals[(count.classification, getattr(count, key))] += count.count
    rows = [ClassCount(name, total, **{key: value}) for (name, value), total in totals.items()]
    return sorted(rows, key=_order)


def judge(summary: ReconcileSummary, thresholds: Mapping[str, int]) -> None:
    """Record the thresholds and the classes above them."""
    summary.thresholds = {str(name): int(limit) for name, limit in thresholds.items()}
    summary.exceeded = [name for name, limit in summary.thresholds.items()
                        if summary.counts.get(name, 0) > limit]


def describe_inputs(database_url: str, files: StoreFiles, source: str, master: str) -> dict:
    """``summary.inputs``: where the data came from and how much of it."""
    return {
        "store": str(files.root), "database": describe_url(database_url),
        "tables_read_by": source, "master": master,
        "segments": len(files.segments), "consume_queue_files": len(files.queue_files),
        "committed_offsets": len(files.offsets),
    }


def write_summary_and_report(summary: ReconcileSummary, staging: Path) -> None:
    """``summary.json`` and ``report.html`` in ``staging``."""
    (staging / "summary.json").write_text(json.dumps(summary.to_json(), indent=2) + "\n")
    (staging / "report.html").write_text(render_report(summary), encoding="utf-8")


def publish(staging: Path, out_dir: Path) -> None:
    """Move the finished outputs over the previous run's, the report last."""
    for name in OUTPUT_NAMES:
        target = out_dir / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    for name in OUTPUT_NAMES:
        (staging / name).rename(out_dir / name)


__all__ = ["OUTPUT_NAMES", "SAMPLES_PER_CLASS", "SAMPLE_CLASSES", "describe_inputs",
           "fill_counts", "judge", "publish", "write_summary_and_report"]


@dataclass(frozen=True, slots=True)
class RunFrame:
    """What every engine's run starts from: its progress callback, start time, ``as_of``, a
    staging directory inside the output folder (published whole at the end) and the store's
    files, listed before anything else is read (offsets first: see ``table_export``)."""

    report: Progress
    started: float
    as_of: datetime
    staging: Path
    files: StoreFiles


@contextmanager
def run_frame(options: ReconcileOptions, progress: Progress | None) -> Iterator[RunFrame]:
    """A run's ``RunFrame``; the staging directory is removed when the run ends, however."""
    report = progress or (lambda step, done, total: None)
    started = time.monotonic()
    as_of = options.as_of or datetime.now(UTC).replace(tzinfo=None)
    options.out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".reconcile-", dir=options.out_dir))
    try:
        report("read store", 0, 1)
        files = list_store_files(options.store_dir)
        report("read store", 1, 1)
        yield RunFrame(report, started, as_of, staging, files)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
