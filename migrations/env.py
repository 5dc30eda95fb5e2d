"""Alembic environment for the outbox tables; Alembic runs this file, nothing imports it.

The database URL comes from ``config.attributes[URL_ATTRIBUTE]`` (set by ``migrations.api``),
falling back to the ``sqlalchemy.url`` option for a hand-written ``alembic.ini``. Online runs use
their own engine (``NullPool``, disposed at the end), so no connection outlives the command.
Offline runs (``alembic upgrade --sql``) render the DDL for the URL's dialect.

Autogenerate compares types with ``migrations.compare.compare_type`` (Alembic's comparison plus
MySQL's fractional-second precision, which Alembic ignores) and renders batch operations on
SQLite, whose ``ALTER TABLE`` cannot change or drop most things; it leaves out indexes declared
for other databases only (``compare.objects_for``).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool
from sqlalchemy.engine import make_url

from postbox.migrations.api import URL_ATTRIBUTE
from postbox.migrations.compare import compare_type, objects_for
from postbox.outbox.tables import metadata

target_metadata = metadata


def _database_url() -> str:
    url = context.config.attributes.get(URL_ATTRIBUTE) or context.config.get_main_option(
        "sqlalchemy.url")
    if not url:
        raise RuntimeError(f"no database URL: set config.attributes[{URL_ATTRIBUTE!r}] "
                           "or the sqlalchemy.url option")
    return str(url)


def run_migrations_offline() -> None:
    """Write the migration SQL for the URL's dialect instead of running it."""
    url = _database_url()
    context.configure(url=url, target_metadata=target_metadata,
                      literal_binds=True, dialect_opts={"paramstyle": "named"},
                      compare_type=compare_type,
                      include_object=objects_for(make_url(url).get_backend_name()))
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Connect to the database and run the migrations in one transaction where it can."""
    engine = create_engine(_database_url(), poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            context.configure(connection=connection, target_metadata=target_metadata,
                              compare_type=compare_type,
                              include_object=objects_for(connection.dialect.name),
                              render_as_batch=connection.dialect.name == "sqlite")
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
