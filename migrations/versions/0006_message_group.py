"""FIFO message groups: the stub's ``message_group`` and the index the relay's claims probe.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29

``outbox.send(message_group=)`` stores the group on the stub; the relay publishes a group's
stubs in order, claiming a grouped stub only while no earlier stub of its group is unpublished.
That check is one probe per candidate into ``(message_group, status, published_at,
created_at)``. Existing stubs have no group (NULL) and are published as before.

The column is nullable with no default: adding it rewrites nothing on PostgreSQL, MySQL 8 and
MariaDB (instant) or SQLite. On PostgreSQL the index is built ``CONCURRENTLY`` (outside the
migration's transaction), so sends go on while it is built; a build that failed leaves an
invalid index to drop by hand before running the upgrade again. Downgrading drops both.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

INDEX = "ix_message_stub_message_group_status_published_at_created_at"
COLUMNS = ["message_group", "status", "published_at", "created_at"]


def upgrade() -> None:
    """Add the column and its index."""
    op.add_column("message_stub", sa.Column("message_group", sa.String(128), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            op.create_index(INDEX, "message_stub", COLUMNS, postgresql_concurrently=True)
    else:
        op.create_index(INDEX, "message_stub", COLUMNS)


def downgrade() -> None:
    """Drop them (the stubs keep their place; their groups are forgotten)."""
    if op.get_bind().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            op.drop_index(INDEX, table_name="message_stub", postgresql_concurrently=True)
    else:
        op.drop_index(INDEX, table_name="message_stub")
    op.drop_column("message_stub", "message_group")
