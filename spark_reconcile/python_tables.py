"""The outbox tables as Arrow tables: whole for the Python engine (in ``table_export``'s reading
order, ``message_log``, ``message_processed``, then ``message_stub``, with its columns and
types), or streamed in bounded batches for the Spark job's export (``stream_whole``).

A whole table is read by connectorx (``pip install 'postbox[spark]'``), which moves rows from
SQLite, PostgreSQL and MySQL/MariaDB straight into Arrow columns without a Python object per
value: at a million stubs that is most of the engine's time otherwise. A SQLite table is read in
two rowid ranges at once (SQLite's reader is one thread per connection; each range is one
consistent read, as each table is). Without connectorx, for another database, for a URL
connectorx cannot take (driver options in its query string other than PostgreSQL's ``options``
and ``sslmode``) and for the filtered reads of an incremental run, rows come through SQLAlchemy
and are turned into columns here.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import sqlalchemy as sa

from .errors import DatabaseUnavailableError

FAST_DIALECTS = {"sqlite": "sqlite", "postgresql": "postgresql", "mysql": "mysql",
                 "mariadb": "mysql"}
"""SQLAlchemy backend -> connectorx scheme."""
SQLITE_PARTS = 2
"""A SQLite table is read in this many rowid ranges at once (its reader is one thread each)."""
ROW_COLUMN = "postbox_rowid"
PASSED_QUERY = {"postgresql": frozenset({"options", "sslmode"})}
"""URL query keys connectorx takes as the SQLAlchemy driver does (``options=-csearch_path=…``)."""


def describe_url(database_url: str) -> str:
    """The URL with its password masked, for messages and reports."""
    try:
        return sa.make_url(database_url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "<unparseable database URL>"


def fast_url(database_url: str) -> str | None:
    """``database_url`` as connectorx takes it, or None when it cannot (then SQLAlchemy reads)."""
    if importlib.util.find_spec("connectorx") is None:
        return None
    url = sa.make_url(database_url)
    scheme = FAST_DIALECTS.get(url.get_backend_name())
    if scheme is None or not set(url.query) <= PASSED_QUERY.get(scheme, frozenset()):
        return None
    if scheme == "sqlite":
        if not url.database or url.database == ":memory:":
            return None
        return f"sqlite://{Path(url.database).resolve()}"
    return url.set(drivername=scheme).render_as_string(hide_password=False)


def read_whole(database_url: str, table: sa.Table, columns: dict[str, pa.DataType]) -> pa.Table:
    """Every row of ``table``'s ``columns`` through connectorx (``fast_url`` must be set).

    Raises:
        DatabaseUnavailableError: the read failed.
    """
    import connectorx

    with _reading(database_url, table) as url:
        if url.startswith("sqlite:"):
            found = connectorx.read_sql(
                url, f"SELECT rowid AS {ROW_COLUMN}, {', '.join(columns)} FROM {table.name}",
                return_type="arrow", partition_on=ROW_COLUMN, partition_num=SQLITE_PARTS)
        else:
            found = connectorx.read_sql(url, f"SELECT {', '.join(columns)} FROM {table.name}",
                                        return_type="arrow")
    return cast_columns(found, columns)


def stream_whole(database_url: str, table: sa.Table, columns: dict[str, pa.DataType],
                 batch_rows: int) -> Iterator[pa.Table]:
    """Every row of ``table``'s ``columns`` through connectorx (``fast_url`` must be set), at
    most ``batch_rows`` at a time: the Spark job's export, whose memory stays bounded.

    Raises:
        DatabaseUnavailableError: the read failed.
    """
    import connectorx

    with _reading(database_url, table) as url:
        reader = connectorx.read_sql(url, f"SELECT {', '.join(columns)} FROM {table.name}",
                                     return_type="arrow_stream", batch_size=batch_rows)
        for batch in reader:
            if batch.num_rows:
                yield cast_columns(pa.Table.from_batches([batch]), columns)


@contextmanager
def _reading(database_url: str, table: sa.Table) -> Iterator[str]:
    """connectorx's URL for ``database_url``; its errors as ``DatabaseUnavailableError``."""
    url = fast_url(database_url)
    if url is None:
        raise ValueError(f"connectorx cannot read {describe_url(database_url)}")
    try:
        yield url
    except Exception as error:  # connectorx raises its own (Rust) error types
        raise DatabaseUnavailableError(f"cannot read {table.name} from "
                                       f"{describe_url(database_url)}: {error}") from error


def cast_columns(found: pa.Table, columns: dict[str, pa.DataType]) -> pa.Table:
    """``found`` with exactly ``columns``, in order and of their types."""
    schema = pa.schema(list(columns.items()))
    return pa.table([found[name].cast(kind) for name, kind in columns.items()], schema=schema)


def from_rows(rows: Iterable[tuple], columns: dict[str, pa.DataType]) -> pa.Table:
    """Rows (tuples in ``columns``' order) as a table of those columns."""
    listed = list(rows)
    schema = pa.schema(list(columns.items()))
    if not listed:
        return schema.empty_table()
    values = list(zip(*listed, strict=True))
    return pa.table([pa.array(list(column), kind) for column, kind
                     in zip(values, schema.types, strict=True)], schema=schema)


__all__ = ["cast_columns", "describe_url", "fast_url", "from_rows", "read_whole", "stream_whole"]
