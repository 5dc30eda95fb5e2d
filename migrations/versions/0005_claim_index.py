"""The relay's claim index: the unpublished stubs alone, in due order.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29

The relay claims unconfirmed, never-published stubs in ``next_resend_at`` order. Through the
``(status, next_resend_at)`` index a claim also walked every published stub whose resend check
was due (consumers lagging, a group that never confirms), a cost that grew with the table.
PostgreSQL and SQLite get a partial index on ``(status, next_resend_at)`` holding only the
unpublished stubs (its size follows the backlog, not the table; the constant ``status`` costs
PostgreSQL nothing and lets SQLite's planner prefer it); MySQL/MariaDB, without partial
indexes, ``(status, published_at, next_resend_at)``.

On PostgreSQL the index is built ``CONCURRENTLY`` (outside the migration's transaction), so
sends go on while it is built; a build that failed leaves an invalid index to drop by hand
(``DROP INDEX CONCURRENTLY ix_message_stub_unpublished``) before running the upgrade again.
MySQL/MariaDB add a secondary index in place without blocking writes. Downgrading drops it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

MYSQL = ("mysql", "mariadb")
PARTIAL = "ix_message_stub_unpublished"
COMPOSITE = "ix_message_stub_status_published_at_next_resend_at"
UNPUBLISHED = "status = 'unconfirmed' AND published_at IS NULL"


def upgrade() -> None:
    """Create the claim index this database supports."""
    name = op.get_bind().dialect.name
    if name in MYSQL:
        op.create_index(COMPOSITE, "message_stub", ["status", "published_at", "next_resend_at"])
    elif name == "postgresql":
        with op.get_context().autocommit_block():
            op.create_index(PARTIAL, "message_stub", ["status", "next_resend_at"],
                            postgresql_where=sa.text(UNPUBLISHED), postgresql_concurrently=True)
    else:
        op.create_index(PARTIAL, "message_stub", ["status", "next_resend_at"],
                        sqlite_where=sa.text(UNPUBLISHED))


def downgrade() -> None:
    """Drop it."""
    name = op.get_bind().dialect.name
    if name in MYSQL:
        op.drop_index(COMPOSITE, table_name="message_stub")
    elif name == "postgresql":
        with op.get_context().autocommit_block():
            op.drop_index(PARTIAL, table_name="message_stub", postgresql_concurrently=True)
    else:
        op.drop_index(PARTIAL, table_name="message_stub")
