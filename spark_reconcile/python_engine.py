"""The reconciliation without a JVM: the same classification, figures and outputs as the Spark
job, computed in this process, for inputs small enough that starting Spark costs more than the
work (``--engine python``, or ``auto`` below ``ReconcileOptions.python_max_stubs``).

The tables are read through SQLAlchemy (``message_log``, ``message_processed``, then
``message_stub``, after the offsets: the order of ``table_export``), the store with the same
decoders the Spark tasks run (``store_decode``), and every row is judged by the shared rules
(``rules``). The outputs have the Spark job's names, columns and types; only the order of the
rows in ``classification.csv`` and the Parquet part files differ (Spark's order is not defined
either). Memory grows with the tables: this engine is for small inputs.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Set
from datetime import datetime

import sqlalchemy as sa

from postbox.outbox.tables import message_log, message_processed, message_stub

from . import python_classify
from .classes import STUB_CLASSES
from .incremental import (
    State,
    carried_rows,
    changed_stubs,
    id_chunks,
    load_state,
    save_state,
    scan_store,
    touched_ids,
)
from .options import ReconcileOptions, ReconcileResult
from .outputs import (
    describe_inputs,
    fill_counts,
    judge,
    publish,
    run_frame,
    write_summary_and_report,
)
from .python_classify import Tables
from .python_outputs import write_classification, write_csv
from .results import (
    ClassCount,
    GroupRetries,
    QueueLag,
    ReconcileSummary,
    StoreProblem,
    TopicResends,
)
from .store_decode import DLQ, PROBLEM, RETRY, queue_extent
from .table_export import (
    LOG_COLUMNS,
    PROCESSED_COLUMNS,
    STUB_COLUMNS,
    Progress,
    present_tables,
    table_connection,
)

ENGINE_NAME = "python"


def run_python_reconciliation(options: ReconcileOptions, progress: Progress | None = None
                              ) -> ReconcileResult:
    """Reconcile like ``job.run_reconciliation``, in this process (no Spark session).

    Raises:
        ReconcileError: an input could not be read (no outputs were written).
    """
    with run_frame(options, progress) as run:
        report, started, as_of, staging, files = (run.report, run.started, run.as_of,
                                                   run.staging, run.files)
        state = load_state(options.out_dir) if options.incremental else None
        report("scan store files", 0, len(files.segments))
        store_rows, fresh, segments, scanned = scan_store(files, state, options.check_crc)
        extents = [queue_extent(f.path, f.topic, f.queue_id, f.base_offset)
                   for f in files.queue_files]
        report("scan store files", len(files.segments), len(files.segments))
        tables = read_tables(options.database_url, report,
                             state.as_of if state else None, touched_ids(fresh))
        stub_ids = {stub["message_id"] for stub in tables.stubs}
        carried = carried_rows(options.out_dir, stub_ids) if state else []
        report("classify", 0, 1)
        rows = python_classify.classify(
            tables, files.offsets, store_rows, as_of, options.grace_ms,
            stub_ids | {row["message_id"] for row in carried}) + carried
        summary = ReconcileSummary(as_of=as_of, grace_ms=options.grace_ms,
                                   problems=list(files.problems))
        summarise(summary, rows, tables, files.offsets, store_rows, extents)
        report("classify", 1, 1)
        judge(summary, options.thresholds)
        summary.inputs = describe_inputs(options.database_url, files, "sqlalchemy",
                                         ENGINE_NAME) | {
            "incremental": state is not None, "segments_scanned": scanned,
            "rows_read": {"message_stub": len(tables.stubs), "message_log": len(tables.logs),
                          "message_processed": len(tables.processed)},
            "rows_carried": len(carried)}
        report("write report", 0, 1)
        write_classification(rows, staging / "classification")
        write_csv(rows, staging / "classification.csv")
        summary.duration_s = round(time.monotonic() - started, 3)
        write_summary_and_report(summary, staging)
        publish(staging, options.out_dir)
        save_state(options.out_dir, State(as_of, segments))
        report("write report", 1, 1)
        return ReconcileResult(summary, options.out_dir)


def read_tables(database_url: str, report: Progress, watermark: datetime | None = None,
                extra_ids: Set[str] = frozenset()) -> Tables:
    """The three tables' columns as dicts, ``message_log`` first (see ``table_export``).

    With a ``watermark`` (incremental): the stubs ``incremental.changed_stubs`` selects plus
    those of ``extra_ids``, and only their processed rows."""
    present = present_tables(database_url)
    stub, log, processed = message_stub, message_log, message_processed
    columns = {message_stub: STUB_COLUMNS, message_log: LOG_COLUMNS,
               message_processed: PROCESSED_COLUMNS}
    stub_where = [] if watermark is None else [changed_stubs(watermark)]
    with table_connection(database_url) as connection:
        def rows(table, *where) -> list[dict]:
            report(f"export {table.name}", 0, 1)
            found = [dict(row) for row in connection.execute(
                sa.select(*(table.c[name] for name in columns[table])).where(*where)
            ).mappings()]
            report(f"export {table.name}", 1, 1)
            return found

        logs = rows(log)
        done = [] if "message_processed" not in present else rows(processed, *(
            [processed.c.message_id.in_(sa.select(stub.c.message_id).where(
                *stub_where))] if stub_where else []))
        stubs = rows(stub, *stub_where)
        if watermark is not None:
            missing = extra_ids - {row["message_id"] for row in stubs}
            for chunk in id_chunks(missing):
                stubs += rows(stub, stub.c.message_id.in_(chunk))
                if "message_processed" in present:
                    done += rows(processed, processed.c.message_id.in_(chunk))
    return Tables(stubs, logs, done)


def summarise(summary: ReconcileSummary, rows: list[dict], tables: Tables, offsets: Iterable,
              store_rows: list, extents: list) -> None:
    """Fill ``summary`` as ``aggregate.summarise`` does from the Spark frames."""
    finest = Counter((row["classification"], row["topic"], row["consumer_group"], row["hour"])
                     for row in rows)
    fill_counts(summary, [ClassCount(kind, count, topic, group, hour)
                          for (kind, topic, group, hour), count in finest.items()])
    ends: dict[tuple, int] = {}
    for extent in extents:
        key = (extent.topic, extent.queue_id)
        ends[key] = max(ends.get(key, extent.max_offset), extent.max_offset)
    summary.lag = sorted((QueueLag(o.topic, o.consumer_group, o.queue_id, o.offset,
                                   ends.get((o.topic, o.queue_id), o.offset)) for o in offsets),
                         key=lambda lag: (lag.topic, lag.consumer_group, lag.queue_id))
    summary.resends = _resends(rows)
    retries: dict = {}
    for row in store_rows:
        if row.kind in (RETRY, DLQ):
            counted = retries.setdefault(row.consumer_group, [0, 0])
            counted[row.kind == DLQ] += 1
    summary.retries = [GroupRetries(group, retry, dead) for group, (retry, dead)
                       in sorted(retries.items(), key=lambda item: _nulls_first(item[0]))]
    summary.samples = python_classify.samples(rows)
    summary.problems.extend(
        [StoreProblem(row.file, row.reason, row.log_position) for row in store_rows
         if row.kind == PROBLEM]
        + [StoreProblem(extent.file, extent.problem) for extent in extents if extent.problem])
    summary.complete = not summary.problems


def _resends(rows: list[dict]) -> list[TopicResends]:
    """Per topic, from the stub rows (one per stub: a fan-out stub's rows all agree)."""
    stub_classes = {kind.value for kind in STUB_CLASSES}
    stubs = {row["message_id"]: row for row in rows if row["classification"] in stub_classes}
    by_topic: dict[str, list[int]] = {}
    for stub in stubs.values():
        figures = by_topic.setdefault(stub["topic"], [0, 0, 0, 0])
        sends = stub["send_count"] or 0
        figures[0] += 1
        figures[1] += sends > 1
        figures[2] += max(sends - 1, 0)
        figures[3] = max(figures[3], sends)
    return [TopicResends(topic, *figures) for topic, figures in sorted(by_topic.items())]


def _nulls_first(value: object) -> tuple:
    return (value is not None, value)


__all__ = ["ENGINE_NAME", "read_tables", "run_python_reconciliation", "summarise"]
