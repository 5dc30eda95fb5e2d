"""``postbox db …``: create and migrate the outbox tables (``migrations``, Alembic).

``upgrade [REVISION]`` (default ``head``), ``downgrade [REVISION]`` (default ``-1``: one step;
``base`` drops the tables and their rows) and ``current`` (the database's revision and whether
it is the newest). The database is ``--db URL``, else ``POSTBOX_DATABASE_URL``, else
``sqlite:///.postbox/app.db``; ``upgrade`` creates a missing SQLite file (and, for a relative
path, its parent directory); ``current`` and ``downgrade`` never create one, they say there is
no database there. ``postgres://`` and ``postgresql://`` mean ``postgresql+psycopg://``,
``mysql://`` means ``mysql+pymysql://`` (``outbox.database.normalize_database_url``); a URL whose
dialect or driver is not installed is refused with the forms that work.

Every command connects, does its work and disconnects. Unreachable databases, unparsable URLs,
missing drivers and unknown revisions are one ``error:`` line (exit code 2); the URL is shown
with its password hidden.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated, Any

import typer
from sqlalchemy import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from postbox import migrations
from postbox.framework import environment
from postbox.migrations.api import safe_url
from postbox.outbox.database import URL_FORMS, normalize_database_url, sqlite_file

from .common import CliError, JsonOption, out_console, print_json, reports_errors

DATABASE_URL_ENV_VAR = environment.DATABASE_URL.name
DEFAULT_DATABASE_URL = environment.DATABASE_URL.default or ""

db_app = typer.Typer(name="db", help="Create and migrate the outbox tables.",
                     no_args_is_help=True)

DatabaseUrlOption = Annotated[str, typer.Option(
    "--db", metavar="URL", envvar=DATABASE_URL_ENV_VAR,
    help="SQLAlchemy URL of the application database.")]


def prepare_url(url: str, *, create: bool = True) -> str:
    """``url`` with its driver made explicit (``normalize_database_url``), once it parses and
    its dialect and driver are installed. A missing SQLite file: with ``create``, its parent
    directory is made (for a relative path) so the database can be created; without, it is an
    error (nothing is created)."""
    try:
        normalized = normalize_database_url(url)
        database = sqlite_file(normalized)
        make_url(normalized).get_dialect().import_dbapi()
    except (NoSuchModuleError, ImportError) as error:  # before ArgumentError: a subclass
        raise CliError(f"cannot use database URL {safe_url(url)!r}: {error}; URL forms that "
                       f"work: {URL_FORMS}") from error
    except (ArgumentError, ValueError) as error:
        raise CliError(f"bad database URL {safe_url(url)!r}: {error}; URL forms: {URL_FORMS}"
                       ) from error
    if database is not None and not database.exists():
        if not create:
            raise CliError(f"no database at {database} (postbox db upgrade creates it)")
        if not database.is_absolute():
            database.parent.mkdir(parents=True, exist_ok=True)
    return str(normalized)


@contextlib.contextmanager
def reporting_migration_errors() -> Iterator[None]:
    """Turn a ``MigrationError`` into a ``CliError`` (one ``error:`` line, exit code 2)."""
    try:
        yield
    except migrations.MigrationError as error:
        raise CliError(str(error)) from error


def revision_label(revision: str | None, head: str) -> str:
    """``0001 (head)``, ``0001`` or ``<base>`` for a database without tables."""
    if revision is None:
        return "<base>"
    return f"{revision} (head)" if revision == head else revision


def report_move(url: str, verb: str, before: str | None, after: str | None,
                json_output: bool) -> None:
    """Print where an upgrade or downgrade took the database."""
    head = migrations.head()
    if json_output:
        print_json({"database": safe_url(url), "from": before, "to": after, "head": head,
                    "is_head": after == head})
    elif before == after:
        out_console().print(f"{safe_url(url)}: already at {revision_label(after, head)}",
                            highlight=False)
    else:
        out_console().print(f"{safe_url(url)}: {verb} from {revision_label(before, head)} "
                            f"to {revision_label(after, head)}", highlight=False)


@db_app.command("upgrade")
@reports_errors
def upgrade_command(
        revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
        db: DatabaseUrlOption = DEFAULT_DATABASE_URL, json_output: JsonOption = False) -> None:
    """Migrate the database up to REVISION (default: the newest)."""
    url = prepare_url(db)
    with reporting_migration_errors():
        before = migrations.current(url)
        migrations.upgrade(url, revision)
        after = migrations.current(url)
    report_move(url, "upgraded", before, after, json_output)


@db_app.command("downgrade")
@reports_errors
def downgrade_command(
        revision: Annotated[str, typer.Argument(
            help="Target revision: -1 steps back once, base drops the outbox tables.")] = "-1",
        db: DatabaseUrlOption = DEFAULT_DATABASE_URL, json_output: JsonOption = False) -> None:
    """Migrate the database down to REVISION (default: one step back)."""
    url = prepare_url(db, create=False)
    with reporting_migration_errors():
        before = migrations.current(url)
        if before is None and revision != "base":
            raise CliError(f"nothing to downgrade: {safe_url(url)} has no revision")
        migrations.downgrade(url, revision)
        after = migrations.current(url)
    report_move(url, "downgraded", before, after, json_output)


@db_app.command("current")
@reports_errors
def current_command(db: DatabaseUrlOption = DEFAULT_DATABASE_URL,
                    json_output: JsonOption = False) -> None:
    """Show the database's revision and whether it is the newest."""
    url = prepare_url(db, create=False)
    with reporting_migration_errors():
        revision = migrations.current(url)
    head = migrations.head()
    document: dict[str, Any] = {"database": safe_url(url), "current": revision, "head": head,
                                "is_head": revision == head}
    if json_output:
        print_json(document)
    elif revision is None:
        out_console().print(f"{safe_url(url)}: <base> (not migrated; head is {head})",
                            highlight=False)
    elif revision == head:
        out_console().print(f"{safe_url(url)}: {revision} (head)", highlight=False)
    else:
        out_console().print(f"{safe_url(url)}: {revision} (head is {head})", highlight=False)
