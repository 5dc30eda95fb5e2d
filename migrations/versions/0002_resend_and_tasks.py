"""Resend and periodic tasks: ``message_stub.overtaken_at`` and the ``outbox_task`` table.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21

``overtaken_at`` starts a stub's grace period once a consumer group is seen past its offset
without it; ``outbox_task`` holds one lease (and a little state) per periodic outbox task so
that two beats or several workers never run one task twice at once.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

MYSQL = ("mysql", "mariadb")


def _timestamp() -> sa.types.TypeEngine:
    return sa.DateTime().with_variant(mysql.DATETIME(fsp=6), *MYSQL)


def upgrade() -> None:
    """Add the stub's grace-period column and the task table."""
    op.add_column("message_stub", sa.Column("overtaken_at", _timestamp(), nullable=True))
    op.create_table(
        "outbox_task",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        sa.Column("lease_until", _timestamp(), nullable=True),
        sa.Column("last_started_at", _timestamp(), nullable=True),
        sa.Column("last_finished_at", _timestamp(), nullable=True),
        sa.Column("last_scheduler", sa.String(128), nullable=True),
        sa.Column("runs", sa.Integer(), server_default="0", nullable=False),
        sa.Column("skipped", sa.Integer(), server_default="0", nullable=False),
        sa.Column("state", sa.Text().with_variant(mysql.MEDIUMTEXT(), *MYSQL), nullable=True),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_outbox_task")),
    )


def downgrade() -> None:
    """Drop the task table and the stub column."""
    op.drop_table("outbox_task")
    op.drop_column("message_stub", "overtaken_at")
