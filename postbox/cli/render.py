"""Turning store values into rich tables and JSON documents for the ``postbox`` commands.

Pure helpers: they build ``Table`` objects and plain dicts, and never print. A message's JSON
document is ``MessageView.as_dict()`` plus its body: ``body`` when the bytes are valid UTF-8,
otherwise ``body_base64``. Text taken from messages is wrapped in ``rich.text.Text`` so markup-like
characters in bodies, keys or tags are shown as they are.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rich import box
from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

from postbox.storage_engine import MessageView

BODY_PREVIEW_CHARS = 40
BODY_DETAIL_CHARS = 400
MISSING_MARK = "—"

_TIMESTAMP_FIELDS = frozenset({"born_timestamp_ms", "store_timestamp_ms"})


def message_document(view: MessageView) -> dict[str, Any]:
    """The JSON document of one message: ``as_dict()`` plus ``body`` or ``body_base64``."""
    document = view.as_dict()
    try:
        document["body"] = view.body.decode("utf-8")
    except UnicodeDecodeError:
        document["body_base64"] = base64.b64encode(view.body).decode("ascii")
    return document


def format_time_ms(epoch_ms: int) -> str:
    """Local wall-clock time with milliseconds, e.g. ``2024-05-01 12:00:00.123``.

    Integer arithmetic (no float seconds), so the milliseconds shown are the ones stored; a
    value no calendar can show is printed as the number.
    """
    try:
        moment = datetime.datetime.fromtimestamp(epoch_ms // 1000, datetime.UTC).astimezone()
    except (OverflowError, OSError, ValueError):
        return str(epoch_ms)
    moment = moment.replace(microsecond=(epoch_ms % 1000) * 1000, tzinfo=None)
    return moment.isoformat(sep=" ", timespec="milliseconds")


def body_preview(body: bytes, limit_chars: int = BODY_PREVIEW_CHARS) -> Text:
    """A one-line preview: printable text, or hex when the body is not UTF-8."""
    try:
        text = body.decode("utf-8")
        shown = "".join(char if char.isprintable() else "·" for char in text[:limit_chars])
        suffix = "…" if len(text) > limit_chars else ""
        return Text(shown + suffix)
    except UnicodeDecodeError:
        half = limit_chars // 2
        suffix = "…" if len(body) > half else ""
        return Text(f"0x{body[:half].hex()}{suffix}", style="magenta")


def cell(value: Any) -> Text:
    """A table cell showing ``value`` literally (no markup), ``—`` for None or empty."""
    if value is None or value == "" or value == [] or value == {}:
        return Text(MISSING_MARK, style="dim")
    if isinstance(value, list):
        return Text(" ".join(str(item) for item in value))
    if isinstance(value, Mapping):
        return Text("\n".join(f"{key}={item}" for key, item in value.items()))
    return Text(str(value))


def message_detail_table(view: MessageView, title: str | None = None) -> Table:
    """Every field of one message, one row each (a vertical table)."""
    table = Table(title=_title(title), box=box.SIMPLE_HEAVY, show_header=False)
    table.add_column("field", style="bold cyan", no_wrap=True)
    table.add_column("value", overflow="fold")
    for name, value in view.as_dict().items():
        if name in _TIMESTAMP_FIELDS:
            table.add_row(name, Text(f"{value}  ({format_time_ms(value)})"))
        else:
            table.add_row(name, cell(value))
    table.add_row("body", body_preview(view.body, BODY_DETAIL_CHARS))
    return table


@dataclasses.dataclass(frozen=True)
class CompactColumn:
    """One column of the compact message table."""

    header: str
    value: Callable[[MessageView], Text]
    drop_rank: int
    """Narrow consoles drop the highest ranks first; rank 0 is always shown."""
    justify: JustifyMethod = "left"
    squeezable: bool = False
    """May be cut to ``SQUEEZED_WIDTH`` (with an ellipsis) before it has to be dropped."""


SQUEEZED_WIDTH = 12
TABLE_OVERHEAD_CHARS_PER_COLUMN = 3
"""Padding (1 + 1) and separator each column adds to a SIMPLE_HEAVY table (plus 1 edge)."""

COMPACT_COLUMNS = (
    CompactColumn("position", lambda view: Text(str(view.log_position)), 0, "right"),
    CompactColumn("topic", lambda view: cell(view.topic), 5),
    CompactColumn("queue", lambda view: Text(str(view.queue_id)), 0, "right"),
    CompactColumn("offset", lambda view: Text(str(view.queue_offset)), 0, "right"),
    CompactColumn("store time", lambda view: Text(format_time_ms(view.store_timestamp_ms)), 4),
    CompactColumn("tags", lambda view: cell(view.tags), 2),
    CompactColumn("keys", lambda view: cell(view.keys), 1),
    CompactColumn("unique key", lambda view: cell(view.unique_key), 7),
    CompactColumn("msg id", lambda view: cell(view.msg_id), 0),
    CompactColumn("size", lambda view: Text(str(len(view.body))), 6, "right"),
    CompactColumn("body", lambda view: body_preview(view.body), 3, squeezable=True),
)


def messages_table(views: Iterable[MessageView], title: str | None = None,
                   width: int | None = None) -> Table:
    """A compact table, one message per row, in the order given.

    With ``width`` (the console's), low-ranked columns are left out until the rest fit, and a
    caption says so; ``--json`` always has every field.
    """
    views = list(views)
    rows = [[column.value(view) for column in COMPACT_COLUMNS] for view in views]
    natural = [max([len(column.header), *(row[index].cell_len for row in rows)])
               for index, column in enumerate(COMPACT_COLUMNS)]
    shown = _columns_that_fit(natural, width)
    spare = None if width is None else width - _table_width(natural, shown)
    table = Table(title=_title(title), box=box.SIMPLE_HEAVY)
    for index in shown:
        column = COMPACT_COLUMNS[index]
        fixed = None
        if column.squeezable and spare is not None:
            fixed = max(SQUEEZED_WIDTH, min(natural[index], SQUEEZED_WIDTH + spare))
        table.add_column(column.header, justify=column.justify, overflow="ellipsis",
                         no_wrap=True, width=fixed)
    for row in rows:
        table.add_row(*(row[index] for index in shown))
    if len(shown) < len(COMPACT_COLUMNS):
        hidden = [column.header for index, column in enumerate(COMPACT_COLUMNS)
                  if index not in shown]
        table.caption = f"narrow console: {', '.join(hidden)} not shown (try --json)"
    return table


def _table_width(natural: list[int], shown: list[int]) -> int:
    """Width of a compact table showing ``shown``, squeezable columns at their minimum."""
    widths = [min(natural[index], SQUEEZED_WIDTH) if COMPACT_COLUMNS[index].squeezable
              else natural[index] for index in shown]
    return sum(widths) + TABLE_OVERHEAD_CHARS_PER_COLUMN * len(shown) + 1


def _columns_that_fit(natural: list[int], width: int | None) -> list[int]:
    """Indexes of the compact columns to show within ``width`` characters."""
    shown = list(range(len(COMPACT_COLUMNS)))
    by_rank = sorted(shown, key=lambda index: COMPACT_COLUMNS[index].drop_rank, reverse=True)
    for index in by_rank:
        if width is None or _table_width(natural, shown) <= width:
            break
        if COMPACT_COLUMNS[index].drop_rank == 0:
            break
        shown.remove(index)
    return shown


def key_value_table(rows: Mapping[str, Any], title: str | None = None) -> Table:
    """Two columns, name and value."""
    table = Table(title=_title(title), box=box.SIMPLE_HEAVY, show_header=False)
    table.add_column("name", style="bold cyan", no_wrap=True)
    table.add_column("value", overflow="fold")
    for name, value in rows.items():
        table.add_row(name, cell(value))
    return table


def records_table(records: list[Mapping[str, Any]], title: str | None = None) -> Table:
    """A table of dicts that share their keys (the first record names the columns)."""
    table = Table(title=_title(title), box=box.SIMPLE_HEAVY)
    columns = list(records[0]) if records else []
    for name in columns:
        table.add_column(name.replace("_", " "), overflow="fold")
    for record in records:
        table.add_row(*(cell(record.get(name)) for name in columns))
    return table


def stats_tables(stats: Mapping[str, Any]) -> list[Table]:
    """``store.stats()`` as an overview table plus one table per list of records in it."""
    overview: dict[str, Any] = {}
    lists: dict[str, list[Mapping[str, Any]]] = {}
    _flatten(stats, "", overview, lists)
    tables = [key_value_table(overview, title="store")]
    for name, records in lists.items():
        tables.append(records_table(records, title=f"{name} ({len(records)})"))
    return tables


def _title(title: str | None) -> Text | None:
    return None if title is None else Text(title)


def _flatten(mapping: Mapping[str, Any], prefix: str, scalars: dict[str, Any],
             lists: dict[str, list[Mapping[str, Any]]]) -> None:
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            _flatten(value, f"{name}.", scalars, lists)
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            lists[name] = value
        else:
            scalars[name] = value
