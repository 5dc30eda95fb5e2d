"""The reconciliation's inputs as Spark DataFrames.

- ``stubs``, ``logs``, ``processed``: the outbox tables, from the Parquet export
  (``table_export``) or read through Spark JDBC when driver jars are configured.
- ``offsets``: committed consumer offsets, ``extents``: each queue's max offset (one Spark task
  per consume-queue file), ``store_rows``: dead-lettered, retried and delivered-delayed messages
  plus problems (one Spark task per commit-log segment) — see ``store_decode``.

DataFrame APIs only (no RDD, no SparkContext), so the job runs on a classic session and through
Spark Connect alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import astuple, dataclass

import pyarrow as pa
import sqlalchemy as sa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .store_decode import QueueExtent, StoreRow, queue_extent, scan_segment
from .store_files import StoreFiles
from .table_export import LOG_COLUMNS, PROCESSED_COLUMNS, STUB_COLUMNS, ExportedTable

STORE_ROW_SCHEMA = T.StructType([
    T.StructField("kind", T.StringType(), False),
    T.StructField("topic", T.StringType()),
    T.StructField("queue_id", T.IntegerType()),
    T.StructField("queue_offset", T.LongType()),
    T.StructField("log_position", T.LongType()),
    T.StructField("unique_key", T.StringType()),
    T.StructField("origin_message_id", T.StringType()),
    T.StructField("original_topic", T.StringType()),
    T.StructField("consumer_group", T.StringType()),
    T.StructField("store_timestamp_ms", T.LongType()),
    T.StructField("reconsume_times", T.IntegerType()),
    T.StructField("reason", T.StringType()),
    T.StructField("file", T.StringType()),
])
assert STORE_ROW_SCHEMA.names == list(StoreRow._fields)

EXTENT_SCHEMA = T.StructType([
    T.StructField("topic", T.StringType(), False),
    T.StructField("queue_id", T.IntegerType(), False),
    T.StructField("max_offset", T.LongType(), False),
    T.StructField("problem", T.StringType()),
    T.StructField("file", T.StringType()),
])
assert EXTENT_SCHEMA.names == list(QueueExtent._fields)

OFFSET_SCHEMA = T.StructType([
    T.StructField("topic", T.StringType(), False),
    T.StructField("consumer_group", T.StringType(), False),
    T.StructField("queue_id", T.IntegerType(), False),
    T.StructField("committed_offset", T.LongType(), False),
])



@dataclass
class Inputs:
    """Every input DataFrame of one run."""

    stubs: DataFrame
    logs: DataFrame
    processed: DataFrame
    offsets: DataFrame
    extents: DataFrame
    store_rows: DataFrame


def table_frames(spark: SparkSession, exported: dict[str, ExportedTable]
                 ) -> tuple[DataFrame, DataFrame, DataFrame]:
    """(stubs, logs, processed) from the Parquet export."""
    stubs = spark.read.parquet(str(exported["message_stub"].path))
    logs = spark.read.parquet(str(exported["message_log"].path))
    if "message_processed" in exported:
        processed = spark.read.parquet(str(exported["message_processed"].path))
    else:
        processed = _no_processed_rows(spark)
    return stubs, logs, processed


def jdbc_url(database_url: str) -> tuple[str, dict[str, str]]:
    """The JDBC URL and connection properties for a SQLAlchemy URL.

    Raises:
        ValueError: no JDBC mapping for this database.
    """
    url = sa.make_url(database_url)
    backend = url.get_backend_name()
    properties = {key: value for key, value in (("user", url.username),
                                                ("password", url.password)) if value}
    address = f"{url.host or '127.0.0.1'}{f':{url.port}' if url.port else ''}"
    if backend == "sqlite":
        if not url.database or url.database == ":memory:":
            raise ValueError("an in-memory SQLite database cannot be read over JDBC")
        return f"jdbc:sqlite:{url.database}", {"driver": "org.sqlite.JDBC"}
    if backend == "postgresql":
        return (f"jdbc:postgresql://{address}/{url.database}",
                {**properties, "driver": "org.postgresql.Driver"})
    if backend in ("mysql", "mariadb"):
        return (f"jdbc:mariadb://{address}/{url.database}",
                {**properties, "driver": "org.mariadb.jdbc.Driver"})
    raise ValueError(f"no JDBC mapping for {backend} databases; use the Parquet export")


def jdbc_frames(spark: SparkSession, database_url: str, tables: set[str]
                ) -> tuple[DataFrame, DataFrame, DataFrame]:
    """(stubs, logs, processed) read through Spark JDBC (logs first, like the export)."""
    url, properties = jdbc_url(database_url)
    times_as_text = url.startswith("jdbc:sqlite:")  # its driver reads DATETIME text as a date

    def read(name: str, columns: dict) -> DataFrame:
        query = f"SELECT {', '.join(columns)} FROM {name}"
        reader = spark.read.format("jdbc").options(url=url, query=query, **properties)
        times = [column for column, kind in columns.items() if kind == pa.timestamp("us")]
        if times_as_text and times:
            reader = reader.option("customSchema", ", ".join(f"{c} STRING" for c in times))
        frame = reader.load()
        # the same types as the export, whatever the driver maps (SQLite keeps times as text)
        return frame.select(*(F.col(column).cast(_spark_type(kind)).alias(column)
                              for column, kind in columns.items())).cache()

    logs = read("message_log", LOG_COLUMNS)
    logs.count()  # materialise in the documented order
    processed = (read("message_processed", PROCESSED_COLUMNS) if "message_processed" in tables
                 else _no_processed_rows(spark))
    processed.count()
    stubs = read("message_stub", STUB_COLUMNS)
    stubs.count()
    return stubs, logs, processed


def _no_processed_rows(spark: SparkSession) -> DataFrame:
    """``message_processed`` for a database without it (it is optional)."""
    return spark.createDataFrame([], T.StructType([
        T.StructField(column, _spark_type(kind)) for column, kind in PROCESSED_COLUMNS.items()]))


def _spark_type(kind) -> T.DataType:
    if kind == pa.string():
        return T.StringType()
    if kind == pa.int32():
        return T.IntegerType()
    if kind == pa.int64():
        return T.LongType()
    return T.TimestampType()


def offsets_frame(spark: SparkSession, files: StoreFiles) -> DataFrame:
    """Committed offsets, read by the driver from ``consumerOffset.json``."""
    return spark.createDataFrame([astuple(offset) for offset in files.offsets], OFFSET_SCHEMA)


def extents_frame(spark: SparkSession, files: StoreFiles) -> DataFrame:
    """Max offset per consume-queue file: one task per file."""
    queue_files = [(f.path, f.topic, f.queue_id, f.base_offset) for f in files.queue_files]
    if not queue_files:
        return spark.createDataFrame([], EXTENT_SCHEMA)
    return _one_task_each(spark, queue_files, lambda item: [queue_extent(*item)], EXTENT_SCHEMA)


def store_frame(spark: SparkSession, files: StoreFiles, check_crc: bool = True) -> DataFrame:
    """The interesting commit-log records and the problems: one task per segment."""
    segments = [(segment.path, segment.base_position) for segment in files.segments]
    if not segments:
        return spark.createDataFrame([], STORE_ROW_SCHEMA)
    return _one_task_each(spark, segments,
                          lambda item: scan_segment(item[0], item[1], check_crc),
                          STORE_ROW_SCHEMA)


def _one_task_each(spark: SparkSession, items: list[tuple], rows: Callable[[tuple], Iterable],
                   schema: T.StructType) -> DataFrame:
    """``rows(item)`` for every item, one Spark task per item, as a frame of ``schema``.

    DataFrame operations only (``range`` with one partition per item, ``mapInArrow``), no RDD:
    the same plan runs on a classic session and through Spark Connect, where RDDs and the
    SparkContext do not exist. The items travel with the function (they are file names)."""
    arrow_schema = pa.schema([pa.field(field.name, _ARROW_TYPES[type(field.dataType)])
                              for field in schema.fields])

    def tasks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                found = [tuple(row) for row in rows(items[index])]
                yield pa.RecordBatch.from_arrays(
                    [pa.array(list(column), type=kind.type) for column, kind in
                     zip(zip(*found, strict=True), arrow_schema, strict=True)]
                    if found else [pa.array([], type=kind.type) for kind in arrow_schema],
                    schema=arrow_schema)

    return spark.range(0, len(items), 1, len(items)).mapInArrow(tasks, schema)


_ARROW_TYPES = {T.StringType: pa.string(), T.IntegerType: pa.int32(), T.LongType: pa.int64()}


__all__ = [
    "EXTENT_SCHEMA", "Inputs", "OFFSET_SCHEMA", "STORE_ROW_SCHEMA", "extents_frame",
    "jdbc_frames", "jdbc_url", "offsets_frame", "store_frame", "table_frames",
]
