"""The reconciliation without a JVM: the same classification, figures and outputs as the Spark
job, computed in this process on Arrow columns, for inputs one machine's memory holds
(``--engine python``, or ``auto`` up to ``ReconcileOptions.python_max_stubs``).

The tables are read whole into Arrow columns (``python_tables``: connectorx, else SQLAlchemy;
``message_log``, ``message_processed``, then ``message_stub``, after the offsets: the order of
``table_export``), the store with the same decoders the Spark tasks run (``store_decode``), and
every rule (``rules``) is evaluated on whole columns (``python_classify``). The outputs have the
Spark job's names, columns and types; only the order of the rows in ``classification.csv`` and
the Parquet part files differ (Spark's order is not defined either). Memory grows with the
tables: about 1.1 GB at a million stubs.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Set
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa

from postbox.outbox.tables import message_log, message_processed, message_stub

from . import python_classify
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
from .python_facts import Tables
from .python_outputs import write_outputs
from .python_tables import fast_url, from_rows, read_whole
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
    exported_through,
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
        stub_ids = tables.stubs["message_id"]
        carried = (carried_rows(options.out_dir, stub_ids) if state
                   else python_classify.SCHEMA.empty_table())
        report("classify", 0, 1)
        rows = pa.concat_tables([python_classify.classify(
            tables, files.offsets, store_rows, as_of, options.grace_ms,
            concat(stub_ids, carried["message_id"])), carried])
        summary = ReconcileSummary(as_of=as_of, grace_ms=options.grace_ms,
                                   problems=list(files.problems))
        summarise(summary, rows, tables.stubs, carried, files.offsets, store_rows, extents)
        report("classify", 1, 1)
        judge(summary, options.thresholds)
        summary.inputs = describe_inputs(
            options.database_url, files,
            "sqlalchemy" if state else exported_through(options.database_url),
            ENGINE_NAME) | {
            "incremental": state is not None, "segments_scanned": scanned,
            "rows_read": {"message_stub": tables.stubs.num_rows,
                          "message_log": tables.logs.num_rows,
                          "message_processed": tables.processed.num_rows},
            "rows_carried": carried.num_rows}
        report("write report", 0, 1)
        write_outputs(rows, staging)
        summary.duration_s = round(time.monotonic() - started, 3)
        write_summary_and_report(summary, staging)
        publish(staging, options.out_dir)
        save_state(options.out_dir, State(as_of, segments))
        report("write report", 1, 1)
        return ReconcileResult(summary, options.out_dir)


def read_tables(database_url: str, report: Progress, watermark: datetime | None = None,
                extra_ids: Set[str] = frozenset(), *, fast: bool = True) -> Tables:
    """The three tables' columns as Arrow tables, ``message_log`` first (see ``table_export``).

    A full run reads whole tables through connectorx when ``python_tables.fast_url`` allows
    (``fast=False``: always through SQLAlchemy). With a ``watermark`` (incremental): the stubs
    ``incremental.changed_stubs`` selects plus those of ``extra_ids``, and only their processed
    rows."""
    present = present_tables(database_url)
    stub, log, processed = message_stub, message_log, message_processed
    columns = {message_stub: STUB_COLUMNS, message_log: LOG_COLUMNS,
               message_processed: PROCESSED_COLUMNS}
    stub_where = [] if watermark is None else [changed_stubs(watermark)]
    fast = fast and fast_url(database_url) is not None
    with table_connection(database_url) as connection:
        def rows(table, *where) -> pa.Table:
            report(f"export {table.name}", 0, 1)
            if fast and not where:
                found = read_whole(database_url, table, columns[table])
            else:
                found = from_rows(connection.execute(sa.select(
                    *(table.c[name] for name in columns[table])).where(*where)),
                    columns[table])
            report(f"export {table.name}", 1, 1)
            return found

        logs = rows(log)
        done = (from_rows((), PROCESSED_COLUMNS) if "message_processed" not in present
                else rows(processed, *([processed.c.message_id.in_(sa.select(
                    stub.c.message_id).where(*stub_where))] if stub_where else [])))
        stubs = [rows(stub, *stub_where)]
        if watermark is not None:
            missing = extra_ids - set(stubs[0]["message_id"].to_pylist())
            for chunk in id_chunks(missing):
                stubs.append(rows(stub, stub.c.message_id.in_(chunk)))
                if "message_processed" in present:
                    done = pa.concat_tables([done, rows(processed,
                                                        processed.c.message_id.in_(chunk))])
    return Tables(pa.concat_tables(stubs).combine_chunks(), logs.combine_chunks(),
                  done.combine_chunks())


def summarise(summary: ReconcileSummary, rows: pa.Table, stubs: pa.Table, carried: pa.Table,
              offsets: Iterable, store_rows: list, extents: list) -> None:
    """Fill ``summary`` as ``aggregate.summarise`` does from the Spark frames (``stubs``: the
    stubs read, ``carried``: the stub rows carried over from the last run)."""
    finest = rows.group_by(["classification", "topic", "consumer_group", "hour"],
                           use_threads=False).aggregate([([], "count_all")])
    fill_counts(summary, [ClassCount(row["classification"], row["count_all"], row["topic"],
                                     row["consumer_group"], row["hour"])
                          for row in finest.to_pylist()])
    ends: dict[tuple, int] = {}
    for extent in extents:
        key = (extent.topic, extent.queue_id)
        ends[key] = max(ends.get(key, extent.max_offset), extent.max_offset)
    summary.lag = sorted((QueueLag(o.topic, o.consumer_group, o.queue_id, o.offset,
                                   ends.get((o.topic, o.queue_id), o.offset)) for o in offsets),
                         key=lambda lag: (lag.topic, lag.consumer_group, lag.queue_id))
    summary.resends = _resends(stubs, carried)
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


def _resends(stubs: pa.Table, carried: pa.Table) -> list[TopicResends]:
    """Per topic, one row per stub: the stubs read now, and the carried stub rows (a fan-out
    stub's rows all agree)."""
    carried_stubs = carried.group_by(["message_id"], use_threads=False).aggregate(
        [("topic", "last"), ("send_count", "last")])
    topics = concat(stubs["topic"], carried_stubs["topic_last"])
    sends = pc.fill_null(pc.cast(concat(stubs["send_count"], carried_stubs["send_count_last"]),
                                 pa.int64()), 0)
    figures = pa.table({"topic": topics, "sends": sends,
                        "resent": pc.cast(pc.greater(sends, 1), pa.int64()),
                        "resends": pc.max_element_wise(pc.subtract(sends, 1), 0)})
    by_topic = figures.group_by(["topic"], use_threads=False).aggregate(
        [([], "count_all"), ("resent", "sum"), ("resends", "sum"), ("sends", "max")])
    return sorted((TopicResends(row["topic"], row["count_all"], row["resent_sum"],
                                row["resends_sum"], row["sends_max"])
                   for row in by_topic.to_pylist()), key=lambda figures: figures.topic)


def concat(*columns: pa.ChunkedArray) -> pa.ChunkedArray:
    """The columns one after the other, without copying (all of the first one's type)."""
    kind = columns[0].type
    return pa.chunked_array([chunk.cast(kind) for column in columns for chunk in column.chunks],
                            kind)


def _nulls_first(value: object) -> tuple:
    return (value is not None, value)


__all__ = ["ENGINE_NAME", "read_tables", "run_python_reconciliation", "summarise"]
