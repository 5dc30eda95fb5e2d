"""Export the outbox tables to Parquet in bounded chunks (the Spark job's default input).

Rows are streamed ``chunk_rows`` at a time, each chunk one Parquet row group, so memory stays
bounded however large the table: through connectorx straight into Arrow where
``python_tables.fast_url`` allows (SQLite, PostgreSQL, MySQL/MariaDB), else through SQLAlchemy
with a server-side cursor where the database has one (any database SQLAlchemy reaches; no JDBC
driver either way).

Order matters for a consistent picture without a cross-table snapshot: ``message_log`` is read
before ``message_stub`` (the consumer deletes a log row in the transaction that confirms the
stub, so a message confirmed between the two reads is seen as confirmed, never as lost), and the
caller reads the consumer offsets before both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError

from postbox.outbox.tables import message_log, message_processed, message_stub

from .errors import DatabaseUnavailableError, MissingTableError
from .python_tables import describe_url, fast_url, from_rows, stream_whole

Progress = Callable[[str, int, int], None]
"""``progress(step, done, total)``: how the job reports each step."""

_TIMESTAMP = pa.timestamp("us")

STUB_COLUMNS = {
    "message_id": pa.string(), "topic": pa.string(),
    "status": pa.string(), "send_count": pa.int32(), "queue_id": pa.int32(),
    "queue_offset": pa.int64(), "delay_level": pa.int32(), "published_at": _TIMESTAMP,
    "created_at": _TIMESTAMP, "updated_at": _TIMESTAMP, "confirmed_at": _TIMESTAMP,
    "overtaken_at": _TIMESTAMP, "last_error": pa.string(), "expected_groups": pa.string(),
}
"""The stub columns the classification reads (never the message body)."""
LOG_COLUMNS = {
    "consumer_group": pa.string(), "message_id": pa.string(), "topic": pa.string(),
    "queue_id": pa.int32(), "queue_offset": pa.int64(), "created_at": _TIMESTAMP,
}
PROCESSED_COLUMNS = {"consumer_group": pa.string(), "message_id": pa.string()}

TABLES = (  # in reading order, see the module docstring
    (message_log, LOG_COLUMNS, True),
    (message_processed, PROCESSED_COLUMNS, False),
    (message_stub, STUB_COLUMNS, True),
)
"""(table, columns, required)"""


@dataclass(frozen=True)
class ExportedTable:
    """One table written as Parquet."""

    name: str
    path: Path
    rows: int


def present_tables(database_url: str) -> set[str]:
    """The tables of the database, checked for the ones the reconciliation needs.

    Raises:
        DatabaseUnavailableError: the database cannot be reached.
        MissingTableError: ``message_stub`` or ``message_log`` does not exist.
    """
    with table_connection(database_url) as connection:
        return _check_tables(connection, describe_url(database_url))


def export_tables(database_url: str, work_dir: Path, chunk_rows: int = 50_000,
                  progress: Progress | None = None, *, fast: bool = True
                  ) -> dict[str, ExportedTable]:
    """Write ``message_log``, ``message_processed`` (when present) and ``message_stub``
    (through connectorx when ``fast`` and ``python_tables.fast_url`` allow, else SQLAlchemy).

    Raises:
        DatabaseUnavailableError: the database cannot be reached or a read fails.
        MissingTableError: ``message_stub`` or ``message_log`` does not exist.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    fast = fast and fast_url(database_url) is not None
    with table_connection(database_url) as connection:
        present = _check_tables(connection, describe_url(database_url))
        total = {table.name: connection.execute(sa.select(sa.func.count()).select_from(table))
                 .scalar_one() for table, _, _ in TABLES if table.name in present}
        return {table.name: _export(
            stream_whole(database_url, table, columns, chunk_rows) if fast
            else _chunks(connection, table, columns, chunk_rows),
            table, columns, work_dir, total[table.name], progress)
            for table, columns, _ in TABLES if table.name in present}


def exported_through(database_url: str) -> str:
    """How a whole table of ``database_url`` is read (``export_tables``, and the Python
    engine's full run): ``connectorx`` or ``sqlalchemy``."""
    return "connectorx" if fast_url(database_url) is not None else "sqlalchemy"


@contextmanager
def table_connection(database_url: str) -> Iterator[sa.Connection]:
    """A connection to ``database_url``; errors as ``DatabaseUnavailableError``."""
    where = describe_url(database_url)
    try:
        engine = sa.create_engine(database_url)
    except (SQLAlchemyError, ImportError, ValueError) as error:
        raise DatabaseUnavailableError(f"cannot use database {where}: {error}") from error
    try:
        with engine.connect() as connection:
            yield connection
    except SQLAlchemyError as error:
        raise DatabaseUnavailableError(f"cannot read database {where}: "
                                       f"{error.__class__.__name__}: {error}") from error
    finally:
        engine.dispose()


def _check_tables(connection: sa.Connection, where: str) -> set[str]:
    present = set(sa.inspect(connection).get_table_names())
    missing = [table.name for table, _, required in TABLES
               if required and table.name not in present]
    if missing:
        raise MissingTableError(
            f"database {where} has no table {', '.join(missing)}: run `postbox db upgrade "
            "--db URL` (or point --db at the application's database)")
    return present


def _chunks(connection, table: sa.Table, columns: dict[str, pa.DataType], chunk_rows: int
            ) -> Iterator[pa.Table]:
    """The table's ``columns`` through SQLAlchemy, ``chunk_rows`` at a time (server-side
    cursor where the database has one)."""
    statement = sa.select(*(table.c[name] for name in columns))
    result = connection.execution_options(stream_results=True,
                                          yield_per=chunk_rows).execute(statement)
    for chunk in result.partitions(chunk_rows):
        yield from_rows(chunk, columns)


def _export(chunks: Iterator[pa.Table], table: sa.Table, columns: dict[str, pa.DataType],
            work_dir: Path, total: int, progress: Progress | None) -> ExportedTable:
    """``chunks`` into ``<table>.parquet``, one row group each."""
    schema = pa.schema(list(columns.items()))
    path = work_dir / f"{table.name}.parquet"
    rows = 0
    with pq.ParquetWriter(path, schema) as writer:
        for chunk in chunks:
            writer.write_table(chunk)
            rows += chunk.num_rows
            if progress:
                progress(f"export {table.name}", rows, max(total, rows))
        if rows == 0:
            writer.write_table(schema.empty_table())
    if progress:
        progress(f"export {table.name}", rows, max(total, rows))
    return ExportedTable(table.name, path, rows)


__all__ = ["ExportedTable", "describe_url", "export_tables", "exported_through", "present_tables",
           "table_connection"]
