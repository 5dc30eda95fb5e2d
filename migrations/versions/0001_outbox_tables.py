"""Outbox tables: message_stub, message_log, message_processed.

Revision ID: 0001
Revises:
Create Date: 2026-11-21

Written by hand to mirror ``outbox/tables.py`` as of this revision; names are spelled out with
``op.f`` (as the naming convention renders them) so that a later change to the convention does
not change what this revision creates. MySQL/MariaDB get ``LONGBLOB``, ``MEDIUMTEXT`` and
``DATETIME(6)`` (their defaults would cap bodies at 64 KiB and drop microseconds).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

MYSQL = ("mysql", "mariadb")


def _timestamp() -> sa.types.TypeEngine:
    return sa.DateTime().with_variant(mysql.DATETIME(fsp=6), *MYSQL)


def upgrade() -> None:
    """Create the three outbox tables and their indexes."""
    op.create_table(
        "message_stub",
        sa.Column("message_id", sa.String(128), nullable=False),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("tags", sa.String(255), nullable=True),
        sa.Column("keys", sa.String(1024), nullable=True),
        sa.Column("content", sa.LargeBinary().with_variant(mysql.LONGBLOB(), *MYSQL),
                  nullable=False),
        sa.Column("properties", sa.Text().with_variant(mysql.MEDIUMTEXT(), *MYSQL),
                  nullable=True),
        sa.Column("delay_level", sa.SmallInteger(), nullable=True),
        sa.Column("status", sa.String(16), server_default="unconfirmed", nullable=False),
        sa.Column("send_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("queue_id", sa.Integer(), nullable=True),
        sa.Column("queue_offset", sa.BigInteger(), nullable=True),
        sa.Column("log_position", sa.BigInteger(), nullable=True),
        sa.Column("offset_msg_id", sa.String(64), nullable=True),
        sa.Column("published_at", _timestamp(), nullable=True),
        sa.Column("next_resend_at", _timestamp(), nullable=True),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        sa.Column("lease_until", _timestamp(), nullable=True),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.Column("confirmed_at", _timestamp(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.CheckConstraint("status IN ('unconfirmed', 'confirmed', 'void')",
                           name=op.f("ck_message_stub_status")),
        sa.CheckConstraint("send_count >= 0", name=op.f("ck_message_stub_send_count")),
        sa.PrimaryKeyConstraint("message_id", name=op.f("pk_message_stub")),
    )
    op.create_index(op.f("ix_message_stub_status_next_resend_at"), "message_stub",
                    ["status", "next_resend_at"])
    op.create_index(op.f("ix_message_stub_status_confirmed_at"), "message_stub",
                    ["status", "confirmed_at"])
    op.create_index(op.f("ix_message_stub_topic_queue_id_queue_offset"), "message_stub",
                    ["topic", "queue_id", "queue_offset"])

    op.create_table(
        "message_log",
        sa.Column("consumer_group", sa.String(255), nullable=False),
        sa.Column("message_id", sa.String(128), nullable=False),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("queue_id", sa.Integer(), nullable=True),
        sa.Column("queue_offset", sa.BigInteger(), nullable=True),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("consumer_group", "message_id", name=op.f("pk_message_log")),
    )
    op.create_index(op.f("ix_message_log_consumer_group_topic_queue_id_queue_offset"),
                    "message_log", ["consumer_group", "topic", "queue_id", "queue_offset"])
    op.create_index(op.f("ix_message_log_created_at"), "message_log", ["created_at"])

    op.create_table(
        "message_processed",
        sa.Column("consumer_group", sa.String(255), nullable=False),
        sa.Column("message_id", sa.String(128), nullable=False),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("processed_at", _timestamp(), nullable=False),
        sa.PrimaryKeyConstraint("consumer_group", "message_id",
                                name=op.f("pk_message_processed")),
    )
    op.create_index(op.f("ix_message_processed_processed_at"), "message_processed",
                    ["processed_at"])


def downgrade() -> None:
    """Drop the three outbox tables (and with them every stub, log and processed row)."""
    op.drop_index(op.f("ix_message_processed_processed_at"), table_name="message_processed")
    op.drop_table("message_processed")
    op.drop_index(op.f("ix_message_log_created_at"), table_name="message_log")
    op.drop_index(op.f("ix_message_log_consumer_group_topic_queue_id_queue_offset"),
                  table_name="message_log")
    op.drop_table("message_log")
    op.drop_index(op.f("ix_message_stub_topic_queue_id_queue_offset"), table_name="message_stub")
    op.drop_index(op.f("ix_message_stub_status_confirmed_at"), table_name="message_stub")
    op.drop_index(op.f("ix_message_stub_status_next_resend_at"), table_name="message_stub")
    op.drop_table("message_stub")
