"""``postbox outbox …``: inspect and repair the outbox's message stubs (``outbox.admin``).

Reading: ``list`` (newest first, filtered by ``--status``/``--topic``, paged with ``--before``),
``show ID`` (every column but the content) and ``stats`` (counts by status and topic, the
relay's and the resend check's backlog, the oldest unconfirmed stub, the periodic tasks).
Repairing: ``rearm ID… | --all-void`` (void stubs get a fresh set of attempts), ``void ID…
--reason TEXT`` (give up on unconfirmed stubs) and ``resend ID…`` (publish again now, one more
attempt at least). A repair is all-or-nothing: one stub in the wrong state, or missing, is one
``error:`` line naming it and nothing changes. The commands only change rows; publishing is the
relay's work — in a running app, or the Celery ``relay_pending`` task.

The database is ``--db URL``, else ``POSTBOX_DATABASE_URL``, else ``sqlite:///.postbox/app.db``
(the option ``postbox db`` uses). Each command connects, checks that the outbox tables exist
(a database that is not migrated is one ``error:`` line saying to run ``postbox db upgrade``),
does its work and disconnects. Unreachable databases and database errors are one ``error:``
line with the URL, password hidden (exit code 2). "Nothing found" (no stubs listed, no such
stub, no void stub to re-arm) exits with code 1. Times are UTC: ISO 8601 with ``Z`` in JSON,
``YYYY-MM-DD HH:MM:SS`` in tables.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text
from sqlalchemy import Engine, inspect
from sqlalchemy.exc import SQLAlchemyError

from postbox.migrations.api import describe, safe_url
from postbox.outbox.admin import (
    DEFAULT_MAX_SEND_COUNT,
    AdminError,
    OutboxStats,
    StubRow,
    get_stub,
    list_stubs,
    rearm,
    schedule_resend,
    stub_stats,
    void,
)
from postbox.outbox.clock import utc_now
from postbox.outbox.database import create_database_engine
from postbox.outbox.tables import StubStatus, metadata

from .common import (
    EXIT_NOT_FOUND,
    CliError,
    JsonOption,
    out_console,
    print_json,
    print_note,
    reports_errors,
)
from .db_commands import DEFAULT_DATABASE_URL, DatabaseUrlOption, prepare_url
from .render import cell, key_value_table

outbox_app = typer.Typer(name="outbox", help="Inspect and repair the outbox's message stubs.",
                         no_args_is_help=True)

REQUIRED_TABLES = tuple(name for name in metadata.tables if name != "console_audit")
"""The outbox's tables ``postbox db upgrade`` creates; every command checks for them first (the
web console's audit table is the console's own: a database without it still serves the outbox)."""
LIST_LIMIT_DEFAULT = 50
LAST_ERROR_PREVIEW_CHARS = 60
IDS_SHOWN = 20
"""Ids a repair's human output lists before it says "and N more" (``--json`` has them all)."""
STATUS_STYLES = {StubStatus.UNCONFIRMED: "yellow", StubStatus.CONFIRMED: "green",
                 StubStatus.VOID: "bold red"}

MessageIdsArgument = Annotated[list[str], typer.Argument(
    metavar="ID", show_default=False, help="Message ids of the stubs (their UNIQ_KEY).")]


# ---- the database ----------------------------------------------------------------------------

@contextlib.contextmanager
def open_outbox(url: str) -> Iterator[Engine]:
    """An engine on ``url`` whose outbox tables exist; every database problem and every
    ``AdminError`` inside the block becomes a ``CliError``. Disposed on the way out. A missing
    SQLite file is an error, never created."""
    url = prepare_url(url, create=False)
    try:
        engine = create_database_engine(url)
    except (SQLAlchemyError, ImportError) as error:
        raise CliError(f"cannot use the database {safe_url(url)}: {describe(error)}") from error
    try:
        check_schema(engine, url)
        yield engine
    except AdminError as error:
        raise CliError(str(error)) from error
    except SQLAlchemyError as error:
        raise CliError(f"cannot use the database {safe_url(url)}: {describe(error)}") from error
    finally:
        engine.dispose()


def check_schema(engine: Engine, url: str) -> None:
    """A ``CliError`` saying to run ``postbox db upgrade`` when an outbox table is missing."""
    present = set(inspect(engine).get_table_names())
    missing = [name for name in REQUIRED_TABLES if name not in present]
    if len(missing) == len(REQUIRED_TABLES):
        raise CliError(f"the database {safe_url(url)} has no outbox tables (not migrated): "
                       "run `postbox db upgrade`")
    if missing:
        tables = "table" if len(missing) == 1 else "tables"
        raise CliError(f"the database {safe_url(url)} lacks the {', '.join(missing)} {tables} "
                       "(an older revision): run `postbox db upgrade`")


# ---- documents and tables --------------------------------------------------------------------

def iso_time(moment: datetime | None) -> str | None:
    """Naive UTC as ISO 8601 with ``Z``: ``2025-01-02T03:04:05.678901Z``."""
    return None if moment is None else f"{moment.isoformat()}Z"


def table_time(moment: datetime | None) -> Text:
    """Naive UTC to the second for a table cell, ``—`` for None."""
    return cell(None if moment is None else moment.isoformat(sep=" ", timespec="seconds"))


def format_age(seconds: float) -> str:
    """``42s``, ``5m 3s``, ``2h 7m``, ``3d 4h``."""
    whole = max(int(seconds), 0)
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


def parse_time(value: str) -> datetime:
    """An ISO 8601 time as naive UTC (a time without offset is taken as UTC)."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as error:
        raise CliError(f"--before: not an ISO 8601 time: {value!r}") from error
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment


def stub_document(row: StubRow) -> dict[str, Any]:
    """Every field of the stub; times ISO 8601 UTC."""
    document = dataclasses.asdict(row)
    for name, value in document.items():
        if isinstance(value, datetime):
            document[name] = iso_time(value)
    document["status"] = row.status.value
    return document


def stats_document(stats: OutboxStats, database: str, now: datetime) -> dict[str, Any]:
    """``OutboxStats`` as JSON, with the time it was read and the oldest stub's age."""
    oldest = stats.oldest_unconfirmed_at
    return {
        "database": database, "now": iso_time(now), "by_status": stats.by_status,
        "by_topic": stats.by_topic, "due_for_resend": stats.due_for_resend,
        "unpublished": stats.unpublished, "oldest_unconfirmed_at": iso_time(oldest),
        "oldest_unconfirmed_age_s": None if oldest is None else (now - oldest).total_seconds(),
        "max_send_count_seen": stats.max_send_count_seen,
        "in_flight_logs": stats.in_flight_logs, "processed": stats.processed,
        "tasks": [{name: iso_time(value) if isinstance(value, datetime) else value
                   for name, value in dataclasses.asdict(task).items()}
                  for task in stats.tasks],
    }


def status_text(status: StubStatus) -> Text:
    return Text(status.value, style=STATUS_STYLES[status])


def where_text(row: StubRow) -> Text:
    """``queue/offset``: ``1/12``, ``1/—`` (delayed: offset unknown) or ``—`` (unpublished)."""
    if row.queue_id is None:
        return cell(None)
    offset = "—" if row.queue_offset is None else str(row.queue_offset)
    return Text(f"{row.queue_id}/{offset}")


def error_preview(error: str | None) -> Text:
    if not error:
        return cell(None)
    line = " ".join(error.split())
    if len(line) > LAST_ERROR_PREVIEW_CHARS:
        line = line[:LAST_ERROR_PREVIEW_CHARS - 1] + "…"
    return Text(line)


def stubs_table(rows: list[StubRow], title: str) -> Table:
    """One stub per row, newest first."""
    table = Table(title=Text(title), box=box.SIMPLE_HEAVY)
    table.add_column("message id", no_wrap=True)
    table.add_column("topic")
    table.add_column("tags")
    table.add_column("status", no_wrap=True)
    table.add_column("sends", justify="right")
    table.add_column("queue/offset", justify="right", no_wrap=True)
    table.add_column("created (UTC)", no_wrap=True)
    table.add_column("next resend (UTC)", no_wrap=True)
    table.add_column("last error", overflow="ellipsis", no_wrap=True)
    for row in rows:
        table.add_row(cell(row.message_id), cell(row.topic), cell(row.tags),
                      status_text(row.status), str(row.send_count), where_text(row),
                      table_time(row.created_at), table_time(row.next_resend_at),
                      error_preview(row.last_error))
    return table


def stub_detail_table(row: StubRow) -> Table:
    """Every field of one stub, one row each; times in UTC."""
    table = key_value_table({}, title=f"stub {row.message_id}")
    for field in dataclasses.fields(row):
        value = getattr(row, field.name)
        if field.name == "status":
            table.add_row(field.name, status_text(row.status))
        elif "datetime" in str(field.type):
            table.add_row(f"{field.name} (UTC)",
                          cell(None if value is None else value.isoformat(sep=" ")))
        else:
            table.add_row(field.name, cell(value))
    return table


def stats_tables(stats: OutboxStats, now: datetime) -> list[Table]:
    """Overview, per-topic counts and (when any ran) the periodic tasks."""
    oldest = stats.oldest_unconfirmed_at
    oldest_text = None if oldest is None else (
        f"{oldest.isoformat(sep=' ', timespec='seconds')}  "
        f"({format_age((now - oldest).total_seconds())} ago)")
    overview = {
        **{f"{status} stubs": count for status, count in stats.by_status.items()},
        "unpublished (relay's backlog)": stats.unpublished,
        "due for resend check": stats.due_for_resend,
        "oldest unconfirmed (UTC)": oldest_text,
        "max send count seen": stats.max_send_count_seen,
        "in-flight message logs": stats.in_flight_logs,
        "processed (group, message) rows": stats.processed,
    }
    tables = [key_value_table(overview, title="outbox")]
    if stats.by_topic:
        topics = Table(title=Text(f"by topic ({len(stats.by_topic)})"), box=box.SIMPLE_HEAVY)
        topics.add_column("topic")
        for status in StubStatus:
            topics.add_column(status.value, justify="right")
        topics.add_column("total", justify="right")
        for topic, counts in stats.by_topic.items():
            topics.add_row(cell(topic), *(str(counts[status.value]) for status in StubStatus),
                           str(sum(counts.values())))
        tables.append(topics)
    if stats.tasks:
        tasks = Table(title=Text(f"periodic tasks ({len(stats.tasks)})"), box=box.SIMPLE_HEAVY)
        for name in ("task", "runs", "skipped", "last started (UTC)", "last finished (UTC)",
                     "lease owner", "lease until (UTC)", "last scheduler"):
            tasks.add_column(name, justify="right" if name in ("runs", "skipped") else "left")
        for task in stats.tasks:
            tasks.add_row(cell(task.name), str(task.runs), str(task.skipped),
                          table_time(task.last_started_at), table_time(task.last_finished_at),
                          cell(task.lease_owner), table_time(task.lease_until),
                          cell(task.last_scheduler))
        tables.append(tasks)
    return tables


def report_changed(ids: list[str], key: str, done: str, hint: str, json_output: bool) -> None:
    """``{key: ids, "count": n}`` with ``--json``; else ``<done> n stub(s): ids`` and a hint."""
    if json_output:
        print_json({key: ids, "count": len(ids)})
        return
    shown = ", ".join(ids[:IDS_SHOWN])
    more = f" and {len(ids) - IDS_SHOWN} more" if len(ids) > IDS_SHOWN else ""
    console = out_console()
    console.print(Text(f"{done} {len(ids)} stub(s): {shown}{more}"), highlight=False)
    console.print(Text(hint, style="dim"), highlight=False)


# ---- commands --------------------------------------------------------------------------------

@outbox_app.command("list")
@reports_errors
def list_command(
    status: Annotated[StubStatus | None, typer.Option(
        "--status", show_default=False, help="Only stubs with this status.")] = None,
    topic: Annotated[str | None, typer.Option(
        "--topic", metavar="TOPIC", show_default=False, help="Only stubs of this topic.")]
    = None,
    limit: Annotated[int, typer.Option(
        "--limit", metavar="N", help="At most N stubs (up to 1000).")] = LIST_LIMIT_DEFAULT,
    before: Annotated[str | None, typer.Option(
        "--before", metavar="TIME", show_default=False,
        help="Only stubs created before this ISO 8601 time (UTC unless it has an offset): "
             "the next page.")] = None,
    db: DatabaseUrlOption = DEFAULT_DATABASE_URL, json_output: JsonOption = False,
) -> None:
    """List stubs, newest first: id, topic, status, sends, where it went, last error."""
    before_time = None if before is None else parse_time(before)
    with open_outbox(db) as engine:
        rows = list_stubs(engine, status=status, topic=topic, limit=limit, before=before_time)
    if json_output:
        print_json({"stubs": [stub_document(row) for row in rows]})
    elif rows:
        table = stubs_table(rows, f"stubs: {len(rows)}")
        if len(rows) == limit:
            table.caption = (f"limit {limit} reached; older ones: --before "
                             f"{iso_time(rows[-1].created_at)}")
        out_console().print(table)
    if not rows:
        filters = [f"{name} {value}" for name, value in
                   (("status", status), ("topic", topic), ("created before", before))
                   if value is not None]
        print_note(f"no stubs{' with ' + ', '.join(filters) if filters else ''} "
                   f"in {safe_url(db)}")
        raise typer.Exit(EXIT_NOT_FOUND)


@outbox_app.command("show")
@reports_errors
def show_command(
    message_id: Annotated[str, typer.Argument(metavar="ID", help="Message id of the stub.")],
    db: DatabaseUrlOption = DEFAULT_DATABASE_URL, json_output: JsonOption = False,
) -> None:
    """Show one stub in detail (every column but the content)."""
    with open_outbox(db) as engine:
        row = get_stub(engine, message_id)
    if json_output:
        print_json({"stub": None if row is None else stub_document(row)})
    elif row is not None:
        out_console().print(stub_detail_table(row))
    if row is None:
        print_note(f"no stub {message_id!r} in {safe_url(db)}")
        raise typer.Exit(EXIT_NOT_FOUND)


@outbox_app.command("stats")
@reports_errors
def stats_command(db: DatabaseUrlOption = DEFAULT_DATABASE_URL,
                  json_output: JsonOption = False) -> None:
    """Counts by status and topic, backlog, oldest unconfirmed stub, periodic tasks."""
    now = utc_now()
    with open_outbox(db) as engine:
        stats = stub_stats(engine, now=now)
    if json_output:
        print_json(stats_document(stats, safe_url(db), now))
        return
    console = out_console()
    for table in stats_tables(stats, now):
        console.print(table)
    if not stats.tasks:
        print_note("no periodic outbox task has run yet")


@outbox_app.command("rearm")
@reports_errors
def rearm_command(
    message_ids: Annotated[list[str] | None, typer.Argument(
        metavar="ID", show_default=False,
        help="Message ids of void stubs (or --all-void).")] = None,
    all_void: Annotated[bool, typer.Option(
        "--all-void", help="Re-arm every void stub.")] = False,
    db: DatabaseUrlOption = DEFAULT_DATABASE_URL, json_output: JsonOption = False,
) -> None:
    """Re-arm void stubs: unconfirmed, send count 0, published again at the relay's next poll."""
    if bool(message_ids) == all_void:
        raise CliError("give the ids of void stubs or --all-void (exactly one of them)")
    with open_outbox(db) as engine:
        ids = rearm(engine, None if all_void else message_ids, all_void=all_void)
    if not ids:
        if json_output:
            print_json({"rearmed": [], "count": 0})
        print_note(f"no void stubs in {safe_url(db)}; nothing re-armed")
        raise typer.Exit(EXIT_NOT_FOUND)
    report_changed(ids, "rearmed", "re-armed", "the relay (of a running app, or the Celery "
                   "relay_pending task) publishes them again", json_output)


@outbox_app.command("void")
@reports_errors
def void_command(
    message_ids: MessageIdsArgument,
    reason: Annotated[str, typer.Option(
        "--reason", metavar="TEXT", show_default=False,
        help="Why (kept in the stubs' last_error as 'voided by operator: TEXT').")],
    db: DatabaseUrlOption = DEFAULT_DATABASE_URL, json_output: JsonOption = False,
) -> None:
    """Void unconfirmed stubs: the relay and the resend check leave them alone."""
    with open_outbox(db) as engine:
        ids = void(engine, message_ids, reason=reason)
    report_changed(ids, "voided", "voided", "`postbox outbox rearm` brings them back",
                   json_output)


@outbox_app.command("resend")
@reports_errors
def resend_command(
    message_ids: MessageIdsArgument,
    max_send_count: Annotated[int, typer.Option(
        "--max-send-count", metavar="N",
        help="The relay's max_send_count: a stub with N or more sends gets N-1, so exactly "
             "one more attempt.")] = DEFAULT_MAX_SEND_COUNT,
    db: DatabaseUrlOption = DEFAULT_DATABASE_URL, json_output: JsonOption = False,
) -> None:
    """Publish unconfirmed (or void) stubs again: unpublished and due now, for the relay."""
    with open_outbox(db) as engine:
        ids = schedule_resend(engine, message_ids, max_send_count=max_send_count)
    report_changed(ids, "scheduled", "scheduled for publishing", "the relay (of a running "
                   "app, or the Celery relay_pending task) publishes them", json_output)


__all__ = ["open_outbox", "outbox_app"]
