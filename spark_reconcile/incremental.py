"""Incremental reconciliation (``--incremental``, Python engine): read what changed since the
last run plus what is still open, carry the rest over from the last run's classification.

The last run leaves ``reconcile-state.json`` beside its outputs: its ``as_of`` (the
watermark) and, per commit-log segment, the size and modification time it had and the store
rows found in it (dead letters, retries, delivered delayed messages, problems: few). A run
with ``incremental`` then

- re-reads the stubs that can have changed class: ``unconfirmed`` ones (pending, lost,
  in flight: open by nature), those created or updated since the watermark (minus
  ``OVERLAP``, for transactions that committed late), those with a ``message_log`` row, a
  ``message_processed`` row since the watermark, or a dead letter / retry / delivered copy in
  a segment scanned now;
- reads ``message_log`` whole (its rows are deleted when confirmed: it is open by nature) and
  the ``message_processed`` rows of the re-read stubs;
- scans only the segments that are new or changed (size or modification time) since the last
  run, and keeps the rows of the others;
- carries over every other stub row of the last run's ``classification/``: confirmed and void
  stubs that nothing touched keep their class.

What it cannot see: stubs deleted since the last run keep their rows until a full run (the
default) drops them. Without a state file (first run, or after a failed one) the run is full.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import sqlalchemy as sa

from postbox.outbox.tables import message_log, message_processed, message_stub

from .classes import STUB_CLASSES
from .python_classify import SCHEMA
from .store_decode import StoreRow, scan_segment
from .store_files import StoreFiles

STATE_NAME = "reconcile-state.json"
OVERLAP = timedelta(minutes=5)
IDS_PER_QUERY = 500


@dataclass
class State:
    """What a run leaves for the next incremental one."""

    as_of: datetime
    segments: dict[str, dict] = field(default_factory=dict)
    """Segment path → ``{"size": bytes, "mtime_ns": ns, "rows": [StoreRow as a list]}``."""


def load_state(out_dir: Path) -> State | None:
    """The last run's state, or None (no run yet, or an unreadable file: run full)."""
    try:
        document = json.loads((out_dir / STATE_NAME).read_text(encoding="utf-8"))
        return State(datetime.fromisoformat(document["as_of"]), document["segments"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_state(out_dir: Path, state: State) -> None:
    """Write the state (after the outputs are in place)."""
    path = out_dir / STATE_NAME
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps({"as_of": state.as_of.isoformat(),
                                     "segments": state.segments}), encoding="utf-8")
    temporary.replace(path)


def scan_store(files: StoreFiles, previous: State | None, check_crc: bool
               ) -> tuple[list[StoreRow], list[StoreRow], dict[str, dict], int]:
    """(every store row, the rows of segments scanned now, the new state's segments, how many
    segments were scanned now)."""
    every: list[StoreRow] = []
    fresh: list[StoreRow] = []
    segments: dict[str, dict] = {}
    scanned = 0
    for segment in files.segments:
        try:
            stat = os.stat(segment.path)
            seen = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        except OSError:
            seen = {"size": -1, "mtime_ns": -1}
        kept = (previous.segments.get(segment.path) if previous else None)
        if kept and kept["size"] == seen["size"] and kept["mtime_ns"] == seen["mtime_ns"]:
            rows = [StoreRow(*row) for row in kept["rows"]]
        else:
            rows = list(scan_segment(segment.path, segment.base_position, check_crc))
            fresh.extend(rows)
            scanned += 1
        every.extend(rows)
        segments[segment.path] = {**seen, "rows": [list(row) for row in rows]}
    return every, fresh, segments, scanned


def changed_stubs(watermark: datetime) -> sa.ColumnElement[bool]:
    """The stubs a run since ``watermark`` re-reads (besides those with new store rows)."""
    since = watermark - OVERLAP
    return sa.or_(
        message_stub.c.status == "unconfirmed",
        message_stub.c.created_at >= since, message_stub.c.updated_at >= since,
        message_stub.c.message_id.in_(sa.select(message_log.c.message_id)),
        message_stub.c.message_id.in_(sa.select(message_processed.c.message_id).where(
            message_processed.c.processed_at >= since)))


def touched_ids(rows: Iterable[StoreRow]) -> set[str]:
    """The message ids the store rows of the newly scanned segments name."""
    return {message_id for row in rows for message_id in (row.unique_key, row.origin_message_id)
            if message_id}


def carried_rows(out_dir: Path, reread: pa.Array | pa.ChunkedArray) -> pa.Table:
    """The last run's stub rows whose stub is not re-read now (``reread``: the ids)."""
    directory = out_dir / "classification"
    if not directory.is_dir():
        return SCHEMA.empty_table()
    last = pq.read_table(directory).select(SCHEMA.names).cast(SCHEMA)
    stub_classes = pa.array([kind.value for kind in STUB_CLASSES])
    keep = pc.and_(pc.is_in(last["classification"], value_set=stub_classes),
                   pc.invert(pc.is_in(last["message_id"], value_set=reread)))
    return last.filter(keep)


def id_chunks(ids: Iterable[str]) -> Iterable[list[str]]:
    """``ids`` in lists of at most ``IDS_PER_QUERY`` (bounded ``IN`` lists)."""
    ordered = sorted(ids)
    for start in range(0, len(ordered), IDS_PER_QUERY):
        yield ordered[start:start + IDS_PER_QUERY]


__all__ = ["OVERLAP", "STATE_NAME", "State", "carried_rows", "changed_stubs", "id_chunks",
           "load_state", "save_state", "scan_store", "touched_ids"]
