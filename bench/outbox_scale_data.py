"""Bulk stubs for ``bench.outbox_scale_bench``: N ``message_stub`` rows in realistic states,
loaded with ``COPY … FROM STDIN`` (PostgreSQL) or ``LOAD DATA LOCAL INFILE`` (MariaDB/MySQL).

Rows are numbered; row ``i`` has the id ``S{i:031X}`` (ids grow with time, as the product's
time-based ids do) and was created ``span × (n - i) / n`` before the base time, so the table
holds exactly one retention period of traffic. Its state follows ``i % 100``:

- 0: ``void`` (five failed attempts, never published);
- 1: published, ``unconfirmed``, its resend check due (``next_resend_at`` up to an hour past):
  a consumer lagging, or a group that never confirms — these sit in the relay's index range;
- 2–4: published, ``unconfirmed``, resend check in the future (consumers not done yet);
- the rest: ``confirmed`` one second after creation.

``pending`` rows (``fresh_rows``) are new, never-published stubs: what the relay claims.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, text

from postbox.migrations.compare import applies_to
from postbox.outbox import message_stub

COLUMNS = ("message_id", "topic", "tags", "keys", "content", "status", "send_count", "queue_id",
           "queue_offset", "log_position", "offset_msg_id", "published_at", "next_resend_at",
           "created_at", "updated_at", "confirmed_at", "last_error")
CHUNK_ROWS = 50_000
TOPIC = "orders"
NULL = "\\N"


def stub_id(number: int) -> str:
    """The id of row ``number``."""
    return f"S{number:031X}"


_EPOCH = datetime.fromtimestamp(0, UTC).replace(tzinfo=None)  # naive UTC, as the tables
_SECONDS: dict[int, str] = {}
_MS, _S, _MIN = 1_000, 1_000_000, 60_000_000


def _us(moment: datetime) -> int:
    """Microseconds since the epoch of a naive-UTC ``moment``."""
    return (moment - _EPOCH) // timedelta(microseconds=1)


def _ts(us: int) -> str:
    """The timestamp text of ``us`` (seconds formatted once, then cached)."""
    second, fraction = divmod(us, _S)
    prefix = _SECONDS.get(second)
    if prefix is None:
        if len(_SECONDS) > 1_000_000:
            _SECONDS.clear()
        prefix = _SECONDS[second] = (_EPOCH + timedelta(seconds=second)).isoformat(" ")
    return f"{prefix}.{fraction:06d}"


_BODY_HEX = b'{"order": '.hex() + "%s" + b', "item": "book", "quantity": 2, "note": "bench"}'.hex()
_STATUS = {"void": "void", "confirmed": "confirmed"}
_SENT = {"void": "5", "fresh": "0"}


def _row(number: int, created: int, kind: str, now: int) -> tuple[str, ...]:
    """One row's column texts (``NULL`` for NULL); times in epoch microseconds; ``kind``: void,
    due, waiting, confirmed, fresh."""
    content = _BODY_HEX % str(number).encode().hex()
    published = kind in ("due", "waiting", "confirmed")
    if kind == "due":
        resend = now - (number % 3600) * _S
    elif kind == "waiting":
        resend = now + (60 + number % 600) * _S
    elif kind == "confirmed":
        resend = created + _MIN
    else:
        resend = created
    done = _ts(created + _S) if kind != "fresh" else _ts(created)
    if published:
        where = (str(number % 8), str(number // 8), str(number * 200), f"{number:032X}",
                 _ts(created + 5 * _MS))
    else:
        where = (NULL, NULL, NULL, NULL, NULL)
    return (stub_id(number), TOPIC, "paid", f"o-{number}", content,
            _STATUS.get(kind, "unconfirmed"), _SENT.get(kind, "1"), *where, _ts(resend),
            _ts(created), done, done if kind == "confirmed" else NULL,
            "RefusedError: bench" if kind == "void" else NULL)


def _kind(number: int) -> str:
    share = number % 100
    if share == 0:
        return "void"
    if share == 1:
        return "due"
    if share < 5:
        return "waiting"
    return "confirmed"


def history_rows(count: int, now: datetime, span: timedelta) -> Iterator[tuple[str, ...]]:
    """Rows 0 … count-1, spread over ``span`` before ``now``."""
    now_us = _us(now)
    start = now_us - span // timedelta(microseconds=1)
    step = (now_us - start) / max(count, 1)
    for number in range(count):
        yield _row(number, start + int(step * number), _kind(number), now_us)


def fresh_rows(first: int, count: int, now: datetime, kind: str = "fresh"
               ) -> Iterator[tuple[str, ...]]:
    """``count`` new stubs numbered from ``first``, created just before ``now``."""
    now_us = _us(now)
    for number in range(first, first + count):
        yield _row(number, now_us - (first + count - number) * _MS, kind, now_us)


def _chunks(rows: Iterator[tuple[str, ...]]) -> Iterator[list[tuple[str, ...]]]:
    chunk: list[tuple[str, ...]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= CHUNK_ROWS:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def load(engine: Engine, rows: Iterator[tuple[str, ...]]) -> int:
    """Load ``rows``; return how many."""
    if engine.dialect.name == "postgresql":
        return _copy_postgres(engine, rows)
    return _load_mysql(engine, rows)


def _copy_postgres(engine: Engine, rows: Iterator[tuple[str, ...]]) -> int:
    loaded = 0
    raw: Any = engine.raw_connection()
    try:
        with raw.cursor() as cursor, cursor.copy(
                f"COPY message_stub ({', '.join(COLUMNS)}) FROM STDIN") as copy:
            for chunk in _chunks(rows):
                copy.write("".join(
                    "\t".join(_pg_bytea(row)) + "\n" for row in chunk))
                loaded += len(chunk)
        raw.commit()
    finally:
        raw.close()
    return loaded


def _pg_bytea(row: tuple[str, ...]) -> tuple[str, ...]:
    content = COLUMNS.index("content")
    return (*row[:content], "\\\\x" + row[content], *row[content + 1:])


def _load_mysql(engine: Engine, rows: Iterator[tuple[str, ...]]) -> int:
    loaded = 0
    names = ", ".join("@content" if name == "content" else f"`{name}`" for name in COLUMNS)
    raw: Any = engine.raw_connection()
    try:
        for chunk in _chunks(rows):
            with tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False) as handle:
                handle.write("".join("\t".join(row) + "\n" for row in chunk))
            try:
                with raw.cursor() as cursor:
                    cursor.execute(f"LOAD DATA LOCAL INFILE '{handle.name}' INTO TABLE "
                                   f"message_stub ({names}) SET content = UNHEX(@content)")
                raw.commit()
            finally:
                os.unlink(handle.name)
            loaded += len(chunk)
    finally:
        raw.close()
    return loaded


def _indexes(engine: Engine) -> list[Any]:
    return [index for index in message_stub.indexes if applies_to(index, engine.dialect.name)]


def claim_indexes(engine: Engine) -> list[Any]:
    """The relay's claim index of this database (one)."""
    return [index for index in _indexes(engine) if index.name in (
        "ix_message_stub_unpublished", "ix_message_stub_status_published_at_next_resend_at")]


def drop_indexes(engine: Engine) -> None:
    """Drop ``message_stub``'s secondary indexes (rebuilt by ``create_indexes``)."""
    with engine.begin() as connection:
        for index in _indexes(engine):
            index.drop(connection)


def create_indexes(engine: Engine) -> None:
    """Build the secondary indexes again (more sort memory on PostgreSQL), then refresh the
    statistics (and on PostgreSQL the visibility map)."""
    with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            connection.execute(text("SET maintenance_work_mem = '512MB'"))
        for index in _indexes(engine):
            index.create(connection)
    analyze(engine, vacuum=True)


def analyze(engine: Engine, *, vacuum: bool = False) -> None:
    """``VACUUM ANALYZE`` (PostgreSQL) or ``ANALYZE TABLE`` (MariaDB) of ``message_stub``."""
    if engine.dialect.name == "postgresql":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            verb = "VACUUM ANALYZE" if vacuum else "ANALYZE"
            connection.execute(text(f"{verb} message_stub"))
    else:
        with engine.connect() as connection:
            connection.execute(text("ANALYZE TABLE message_stub")).all()


def index_sizes(engine: Engine) -> dict[str, int]:
    """Bytes of each index of ``message_stub`` (primary key included)."""
    with engine.connect() as connection:
        if engine.dialect.name == "postgresql":
            rows = connection.execute(text(
                "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) "
                "FROM pg_index WHERE indrelid = 'message_stub'::regclass")).all()
        else:
            rows = connection.execute(text(
                "SELECT index_name, stat_value * @@innodb_page_size "
                "FROM mysql.innodb_index_stats WHERE database_name = DATABASE() AND "
                "table_name = 'message_stub' AND stat_name = 'size'")).all()
    return {str(name): int(size) for name, size in rows}


def row_count(engine: Engine) -> int:
    """Rows in ``message_stub``."""
    with engine.connect() as connection:
        return int(connection.execute(text("SELECT count(*) FROM message_stub")).scalar_one())


__all__ = ["analyze", "create_indexes", "drop_indexes", "fresh_rows", "history_rows",
           "index_sizes", "load", "row_count", "stub_id"]
