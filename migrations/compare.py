"""Autogenerate's type comparison for the outbox tables (``compare_type=`` in ``env.py``).

Alembic's own comparison (``compare_type=True``) ignores fractional-second precision on
MySQL/MariaDB: a ``DATETIME`` column compares equal to ``DATETIME(fsp=6)`` in the metadata, so a
database whose timestamps silently drop microseconds would pass as "no drift". ``compare_type``
adds that one check and defers everything else to Alembic (it reports no spurious differences
on SQLite, PostgreSQL or MariaDB for these tables). Pure function; thread-safe.

``objects_for(dialect_name)`` is autogenerate's ``include_object`` filter for one database: an
index the tables declare for other databases only (``Index.ddl_if(dialect=…)``, as the relay's
claim index is) is neither expected nor created there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from alembic.runtime.migration import MigrationContext
from sqlalchemy.types import TypeEngine

MYSQL_DIALECTS = ("mysql", "mariadb")


def compare_type(context: MigrationContext, inspected_column: Any, metadata_column: Any,
                 inspected_type: TypeEngine, metadata_type: TypeEngine) -> bool | None:
    """``True`` when MySQL fractional-second precision differs, else ``None`` (Alembic decides).

    The metadata type is resolved for the dialect first, so ``with_variant`` types compare by
    their MySQL variant (``DATETIME(fsp=6)``) rather than the generic ``DateTime``.
    """
    if context.dialect.name not in MYSQL_DIALECTS:
        return None
    expected = metadata_type.dialect_impl(context.dialect)
    if not (hasattr(inspected_type, "fsp") or hasattr(expected, "fsp")):
        return None
    if getattr(inspected_type, "fsp", None) != getattr(expected, "fsp", None):
        return True
    return None


def applies_to(schema_item: Any, dialect_name: str) -> bool:
    """Whether ``schema_item`` (an index, a constraint) exists on ``dialect_name``'s databases:
    False only when its ``ddl_if(dialect=…)`` names other dialects."""
    condition = getattr(schema_item, "_ddl_if", None)
    dialects = getattr(condition, "dialect", None)
    if not dialects:
        return True
    names = (dialects,) if isinstance(dialects, str) else tuple(dialects)
    return dialect_name in names


def objects_for(dialect_name: str) -> Callable[..., bool]:
    """Autogenerate's ``include_object`` for a ``dialect_name`` database: every reflected
    object, and every metadata object that ``applies_to`` that database."""

    def include_object(schema_item: Any, name: str | None, type_: str, reflected: bool,
                       compare_to: Any) -> bool:
        return reflected or applies_to(schema_item, dialect_name)

    return include_object
