"""One reconciliation run: read the inputs, classify in Spark, write the outputs.

Outputs under ``out_dir``: ``classification/`` (Parquet), ``classification.csv``,
``summary.json`` (``{"counts": {class: n}, ...}``, see ``ReconcileSummary.to_json``) and
``report.html``. They are built in a staging directory inside ``out_dir`` and moved into place
only when the run finished, so a failed run leaves no report that looks complete; a run that
could not read some store file still writes its report, marked incomplete (``complete: false``,
the banner, exit code 3).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from .aggregate import summarise
from .classify import classify
from .inputs import (
    Inputs,
    extents_frame,
    jdbc_frames,
    offsets_frame,
    store_frame,
    table_frames,
)
from .options import ReconcileOptions, ReconcileResult
from .report_html import render_report
from .results import ReconcileSummary
from .session import spark_session
from .store_files import list_store_files
from .table_export import Progress, describe_url, export_tables, present_tables

OUTPUT_NAMES = ("classification", "classification.csv", "summary.json", "report.html")


def run_reconciliation(options: ReconcileOptions, progress: Progress | None = None,
                       spark=None) -> ReconcileResult:
    """Reconcile ``options.store_dir`` against ``options.database_url``.

    Raises:
        ReconcileError: an input could not be read (no outputs were written).
    """
    report = progress or (lambda step, done, total: None)
    started = time.monotonic()
    as_of = options.as_of or datetime.now(UTC).replace(tzinfo=None)
    options.out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".reconcile-", dir=options.out_dir))
    try:
        report("read store", 0, 1)
        files = list_store_files(options.store_dir)  # offsets first: see table_export
        report("read store", 1, 1)
        spark = spark or spark_session(options.master, jars=options.jdbc_jars,
                                       conf=options.spark_conf,
                                       python=options.executor_python,
                                       remote=options.remote)
        inputs, source = _inputs(spark, options, files, staging, report)
        summary = ReconcileSummary(as_of=as_of, grace_ms=options.grace_ms,
                                   problems=list(files.problems))
        report("classify", 0, 1)
        classify(inputs, as_of, options.grace_ms).write.parquet(str(staging / "classification"))
        classified = spark.read.parquet(str(staging / "classification"))
        summarise(summary, classified, inputs)
        report("classify", 1, 1)
        _judge(summary, options.thresholds)
        summary.inputs = _describe_inputs(options, files, source)
        report("write report", 0, 1)
        _write_csv(classified, staging)
        summary.duration_s = round(time.monotonic() - started, 3)
        (staging / "summary.json").write_text(json.dumps(summary.to_json(), indent=2) + "\n")
        (staging / "report.html").write_text(render_report(summary), encoding="utf-8")
        _publish(staging, options.out_dir)
        report("write report", 1, 1)
        inputs.store_rows.unpersist()
        inputs.extents.unpersist()
        return ReconcileResult(summary, options.out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _inputs(spark, options: ReconcileOptions, files, staging: Path,
            report: Progress) -> tuple[Inputs, str]:
    """The input frames, and how the tables were read."""
    offsets = offsets_frame(spark, files)  # read by the driver before the tables (see
    # table_export), so a message confirmed while the tables are read is never seen as lost
    if options.jdbc_jars:
        tables = present_tables(options.database_url)
        report("read tables (JDBC)", 0, 1)
        stubs, logs, processed = jdbc_frames(spark, options.database_url, tables)
        report("read tables (JDBC)", 1, 1)
        source = "jdbc"
    else:
        exported = export_tables(options.database_url, staging / "tables",
                                 options.export_chunk_rows, report)
        stubs, logs, processed = table_frames(spark, exported)
        source = "parquet export"
    file_count = len(files.segments) + len(files.queue_files)
    report("scan store files", 0, file_count)
    store_rows = store_frame(spark, files, options.check_crc).cache()
    extents = extents_frame(spark, files).cache()
    store_rows.count()
    extents.count()
    report("scan store files", file_count, file_count)
    return Inputs(stubs, logs, processed, offsets, extents, store_rows), source


def _judge(summary: ReconcileSummary, thresholds: Mapping[str, int]) -> None:
    summary.thresholds = {str(name): int(limit) for name, limit in thresholds.items()}
    summary.exceeded = [name for name, limit in summary.thresholds.items()
                        if summary.counts.get(name, 0) > limit]


def _describe_inputs(options: ReconcileOptions, files, source: str) -> dict:
    return {
        "store": str(files.root), "database": describe_url(options.database_url),
        "tables_read_by": source, "master": options.remote or options.master,
        "segments": len(files.segments), "consume_queue_files": len(files.queue_files),
        "committed_offsets": len(files.offsets),
    }


def _write_csv(classified, staging: Path) -> None:
    parts = staging / "classification-csv"
    classified.coalesce(1).write.csv(
        str(parts), header=True, escape='"')
    part = next(parts.glob("part-*.csv"))
    part.rename(staging / "classification.csv")
    shutil.rmtree(parts)


def _publish(staging: Path, out_dir: Path) -> None:
    """Move the finished outputs over the previous run's, the report last."""
    for name in OUTPUT_NAMES:
        target = out_dir / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    for name in OUTPUT_NAMES:
        (staging / name).rename(out_dir / name)


__all__ = ["OUTPUT_NAMES", "run_reconciliation"]
