"""The Python engine's ``classification/`` (Parquet) and ``classification.csv``, with the
columns, types and text of the Spark job's: times in the CSV as Spark writes them
(``2024-05-01T12:00:00.000``, milliseconds always), empty strings quoted, nulls empty."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .python_classify import COLUMNS

SCHEMA = pa.schema([
    ("message_id", pa.string()), ("classification", pa.string()), ("topic", pa.string()),
    ("consumer_group", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
    ("status", pa.string()), ("send_count", pa.int32()), ("created_at", pa.timestamp("us")),
    ("hour", pa.timestamp("us")), ("detail", pa.string()),
])
assert tuple(SCHEMA.names) == COLUMNS


def write_classification(rows: list[dict], directory: Path) -> None:
    """One Parquet part file under ``directory``, like a one-task Spark write."""
    directory.mkdir()
    table = pa.table({name: pa.array([row[name] for row in rows], type=kind)
                      for name, kind in zip(SCHEMA.names, SCHEMA.types, strict=True)},
                     schema=SCHEMA)
    pq.write_table(table, directory / "part-00000.snappy.parquet")
    (directory / "_SUCCESS").touch()


def write_csv(rows: list[dict], path: Path) -> None:
    """``classification.csv``: a header, then one line per row."""
    with path.open("w", encoding="utf-8", newline="") as out:
        out.write(",".join(COLUMNS) + "\n")
        for row in rows:
            out.write(",".join(csv_field(row[name]) for name in COLUMNS) + "\n")


def csv_field(value: object) -> str:
    """One value as Spark's CSV writer writes it (``escape='"'``)."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}"
    text = str(value)
    if text == "" or any(mark in text for mark in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


__all__ = ["SCHEMA", "csv_field", "write_classification", "write_csv"]
