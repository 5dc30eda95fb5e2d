"""The web console's audit trail: ``console_audit``.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29

One row per write action of ``postbox console`` (who, what, on what, when, and how it ended).
Downgrading drops the table and the trail with it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

MYSQL = ("mysql", "mariadb")


def _timestamp() -> sa.types.TypeEngine:
    return sa.DateTime().with_variant(mysql.DATETIME(fsp=6), *MYSQL)


def upgrade() -> None:
    """Create the audit table."""
    op.create_table(
        "console_audit",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", _timestamp(), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(1024), nullable=False),
        sa.Column("outcome", sa.String(1024), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_console_audit")),
    )
    op.create_index(op.f("ix_console_audit_at"), "console_audit", ["at"])


def downgrade() -> None:
    """Drop the audit table."""
    op.drop_index(op.f("ix_console_audit_at"), table_name="console_audit")
    op.drop_table("console_audit")
