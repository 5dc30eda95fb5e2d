"""The Python engine's ``classification/`` (Parquet) and ``classification.csv``, with the
columns, types and text of the Spark job's: times in the CSV as Spark writes them
(``2024-05-01T12:00:00.000``, milliseconds always), empty strings quoted, nulls empty."""

from __future__ import annotations

from collections import deque
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .arrow_text import Column, as_array, csv_text
from .python_classify import COLUMNS, SCHEMA

WORKERS = 2
"""Threads writing the outputs."""
CSV_LINES_PER_WRITE = 200_000
"""Rows turned into text and written at a time (bounds the text held in memory)."""
FEW_VALUES = frozenset({"classification", "topic", "consumer_group", "queue_id", "status",
                        "send_count", "hour"})
"""Columns with few distinct values: each distinct value is written as text once."""


def write_outputs(rows: pa.Table, staging: Path) -> None:
    """``classification/`` and ``classification.csv`` in ``staging``, side by side: Arrow's
    kernels and the Parquet writer run without the GIL, so the CSV's text is built in parts
    on ``WORKERS`` threads while the Parquet file is written."""
    with ThreadPoolExecutor(WORKERS) as pool:
        parquet = pool.submit(write_classification, rows, staging / "classification")
        write_csv(rows, staging / "classification.csv", pool)
        parquet.result()


def write_classification(rows: pa.Table, directory: Path) -> None:
    """One Parquet part file under ``directory``, like a one-task Spark write."""
    directory.mkdir()
    pq.write_table(rows.select(COLUMNS).cast(SCHEMA), directory / "part-00000.snappy.parquet")
    (directory / "_SUCCESS").touch()


def write_csv(rows: pa.Table, path: Path, pool: Executor | None = None) -> None:
    """``classification.csv``: a header, then one line per row (parts built on ``pool``, at
    most ``WORKERS`` ahead of the one being written)."""
    parts = (rows.slice(start, CSV_LINES_PER_WRITE)
             for start in range(0, rows.num_rows, CSV_LINES_PER_WRITE))
    with path.open("wb") as out:
        out.write((",".join(COLUMNS) + "\n").encode())
        if pool is None:
            for part in parts:
                out.write(_csv_lines(part))
            return
        pending: deque[Future[pa.Buffer]] = deque()
        for part in parts:
            pending.append(pool.submit(_csv_lines, part))
            if len(pending) > WORKERS:
                out.write(pending.popleft().result())
        while pending:
            out.write(pending.popleft().result())


def _csv_lines(part: pa.Table) -> pa.Buffer:
    """The CSV lines of ``part``, each ending with a line feed."""
    lines = as_array(pc.binary_join_element_wise(*(
        _few_values_text(part[name]) if name in FEW_VALUES else csv_text(part[name])
        for name in COLUMNS), ","))
    ended = pc.binary_join_element_wise(lines, "\n", "")
    return pc.binary_join(pa.ListArray.from_arrays(
        pa.array([0, len(ended)], pa.int32()), ended), "")[0].as_buffer()


def _few_values_text(column: Column) -> pa.Array:
    """``csv_text`` of a column with few distinct values, through its dictionary."""
    encoded = pc.dictionary_encode(as_array(column))
    return pc.fill_null(pc.take(csv_text(encoded.dictionary), encoded.indices), "")


__all__ = ["SCHEMA", "write_classification", "write_csv", "write_outputs"]
