"""Run the outbox migrations from Python: ``upgrade``, ``downgrade``, ``current``, ``head``.

Everything is built on an ``alembic.config.Config`` made in code (``make_config``): no
``alembic.ini`` is read, ``script_location`` is this package's directory (so it works from an
installed wheel), and the database URL travels in ``config.attributes`` — never through an
option string (where ``%`` in a password would be interpolated) or an environment variable.

Each call opens its own engine (``NullPool``) and disposes of it before returning; nothing is
shared between calls, so the functions are safe to call from several threads. A migration runs
in one transaction on PostgreSQL and SQLite; MySQL/MariaDB commit each DDL statement, so a crash
mid-upgrade there can leave tables without a version row (``downgrade`` then ``upgrade`` again,
or drop the tables by hand).

URLs go through ``outbox.database.normalize_database_url`` (``postgres://`` and ``postgresql://``
mean ``postgresql+psycopg://``; ``mysql://`` means ``mysql+pymysql://``), as the app's engines do.

Failures raise ``MigrationError`` (the package's one exception) with the URL, password hidden,
chained from the Alembic or SQLAlchemy error.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import create_engine, make_url, pool
from sqlalchemy.exc import SQLAlchemyError

from postbox.outbox.database import normalize_database_url

SCRIPT_LOCATION = Path(__file__).resolve().parent
"""The Alembic script directory: ``env.py``, ``script.py.mako`` and ``versions/``."""
URL_ATTRIBUTE = "postbox.database_url"
"""Key of the database URL in ``Config.attributes`` (read by ``env.py``)."""


class MigrationError(Exception):
    """A migration could not run or the database's revision could not be read."""


def make_config(url: str | None = None) -> Config:
    """An Alembic ``Config`` for this package's scripts, with ``url`` as the target database.

    Useful for Alembic commands this module does not wrap, e.g.
    ``command.revision(make_config(url), autogenerate=True, rev_id="0002", message="…")``.
    """
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    config.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    if url is not None:
        config.attributes[URL_ATTRIBUTE] = normalize_database_url(url)
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` up to ``revision`` (default: the newest)."""
    _run(url, f"upgrade to {revision}", command.upgrade, revision)


def downgrade(url: str, revision: str = "base") -> None:
    """Migrate the database at ``url`` down to ``revision`` (default: no tables; ``-1``: one)."""
    _run(url, f"downgrade to {revision}", command.downgrade, revision)


def current(url: str) -> str | None:
    """The revision the database at ``url`` is at, or ``None`` when it was never migrated."""
    try:
        engine = create_engine(normalize_database_url(url), poolclass=pool.NullPool)
    except (SQLAlchemyError, ImportError, ValueError) as error:
        raise MigrationError(f"cannot read the revision of {safe_url(url)}: "
                             f"{describe(error)}") from error
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    except (SQLAlchemyError, CommandError) as error:
        raise MigrationError(f"cannot read the revision of {safe_url(url)}: "
                             f"{describe(error)}") from error
    finally:
        engine.dispose()


def head() -> str:
    """The newest revision id in this package."""
    revision = ScriptDirectory.from_config(make_config()).get_current_head()
    assert revision is not None, "migrations/versions holds no revision"
    return revision


def safe_url(url: str) -> str:
    """``url`` with the password hidden (as given when it does not parse)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (SQLAlchemyError, ValueError):
        return url


def describe(error: BaseException) -> str:
    """One line saying what went wrong: the driver's message when there is one."""
    reason = getattr(error, "orig", None) or error
    lines = [line.strip() for line in str(reason).splitlines() if line.strip()]
    return lines[0] if lines else type(reason).__name__


def _run(url: str, action: str, alembic_command: Callable[[Config, str], None],
         revision: str) -> None:
    try:
        alembic_command(make_config(url), revision)
    except (SQLAlchemyError, CommandError, ImportError) as error:
        raise MigrationError(f"cannot {action} on {safe_url(url)}: {describe(error)}") from error
