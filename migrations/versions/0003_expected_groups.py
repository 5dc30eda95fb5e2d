"""Several consumer groups per topic: ``message_stub.expected_groups`` and ``message_resend``.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29

``expected_groups`` is the list of consumer groups a stub must reach before it is confirmed
(NULL on every existing stub: they keep the meaning they were sent with, "the first group to
handle it confirms it"); ``message_resend`` records, per (consumer group, message), where the
resend rule sent a copy to that group alone. Downgrading drops both: stubs then go back to the
single-group meaning, and the resend records are forgotten (a group that was resent a message
is judged by its progress on the original queue again).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

MYSQL = ("mysql", "mariadb")


def _timestamp() -> sa.types.TypeEngine:
    return sa.DateTime().with_variant(mysql.DATETIME(fsp=6), *MYSQL)


def upgrade() -> None:
    """Add the stub's expected groups and the per-group resend table."""
    op.add_column("message_stub", sa.Column("expected_groups", sa.Text(), nullable=True))
    op.create_table(
        "message_resend",
        sa.Column("consumer_group", sa.String(255), nullable=False),
        sa.Column("message_id", sa.String(128), nullable=False),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("queue_id", sa.Integer(), nullable=True),
        sa.Column("queue_offset", sa.BigInteger(), nullable=True),
        sa.Column("resent_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("consumer_group", "message_id", name=op.f("pk_message_resend")),
    )
    op.create_index(op.f("ix_message_resend_resent_at"), "message_resend", ["resent_at"])


def downgrade() -> None:
    """Drop the resend table and the stub column."""
    op.drop_index(op.f("ix_message_resend_resent_at"), table_name="message_resend")
    op.drop_table("message_resend")
    op.drop_column("message_stub", "expected_groups")
