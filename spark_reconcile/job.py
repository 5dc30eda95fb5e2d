"""One reconciliation run: read the inputs, classify in Spark, write the outputs.

Outputs under ``out_dir``: ``classification/`` (Parquet), ``classification.csv``,
``summary.json`` (``{"counts": {class: n}, ...}``, see ``ReconcileSummary.to_json``) and
``report.html``. They are built in a staging directory inside ``out_dir`` and moved into place
only when the run finished, so a failed run leaves no report that looks complete; a run that
could not read some store file still writes its report, marked incomplete (``complete: false``,
the banner, exit code 3).
"""

from __future__ import annotations

import shutil
import time
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
from .outputs import (
    OUTPUT_NAMES,
    describe_inputs,
    judge,
    publish,
    run_frame,
    write_summary_and_report,
)
from .results import ReconcileSummary
from .session import spark_session
from .table_export import Progress, export_tables, exported_through, present_tables

COPY_BUFFER_BYTES = 1 << 20


def run_reconciliation(options: ReconcileOptions, progress: Progress | None = None,
                       spark=None) -> ReconcileResult:
    """Reconcile ``options.store_dir`` against ``options.database_url``.

    Raises:
        ReconcileError: an input could not be read (no outputs were written).
    """
    with run_frame(options, progress) as run:
        report, started, as_of, staging, files = (run.report, run.started, run.as_of,
                                                   run.staging, run.files)
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
        judge(summary, options.thresholds)
        summary.inputs = describe_inputs(options.database_url, files, source,
                                         options.remote or options.master)
        report("write report", 0, 1)
        _write_csv(classified, staging)
        summary.duration_s = round(time.monotonic() - started, 3)
        write_summary_and_report(summary, staging)
        publish(staging, options.out_dir)
        report("write report", 1, 1)
        inputs.store_rows.unpersist()
        inputs.extents.unpersist()
        return ReconcileResult(summary, options.out_dir)


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
        source = f"parquet export ({exported_through(options.database_url)})"
    file_count = len(files.segments) + len(files.queue_files)
    report("scan store files", 0, file_count)
    store_rows = store_frame(spark, files, options.check_crc).cache()
    extents = extents_frame(spark, files).cache()
    store_rows.count()
    extents.count()
    report("scan store files", file_count, file_count)
    return Inputs(stubs, logs, processed, offsets, extents, store_rows), source


def _write_csv(classified, staging: Path) -> None:
    """``classification.csv``: the part files written in parallel (no header), then joined
    behind one header line by the driver (no single-task shuffle of every row)."""
    parts = staging / "classification-csv"
    classified.write.csv(str(parts), header=False, escape='"')
    with (staging / "classification.csv").open("wb") as joined:
        joined.write((",".join(classified.columns) + "\n").encode())
        for part in sorted(parts.glob("part-*.csv")):
            with part.open("rb") as source:
                shutil.copyfileobj(source, joined, COPY_BUFFER_BYTES)
    shutil.rmtree(parts)


__all__ = ["OUTPUT_NAMES", "run_reconciliation"]
