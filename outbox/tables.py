"""The outbox's tables (DESIGN §5), in one SQLAlchemy ``MetaData`` that Alembic migrates.

- ``message_stub``: one row per message the application sent through ``outbox.send``, written in
  the application's own transaction. ``status`` goes ``unconfirmed`` → ``confirmed`` (every
  expected consumer group committed its effect) or ``void`` (given up, or dead-lettered by a
  group; an operator decides). The relay records where the message went (``queue_id``,
  ``queue_offset``, ``log_position``, ``offset_msg_id``) and counts attempts in
  ``send_count`` before each one.
  ``expected_groups`` names the consumer groups the message must reach (space-separated, as
  declared to the ``Outbox`` when it was sent): the stub is ``confirmed`` once every one of
  them has a ``message_processed`` row. NULL (nothing declared for the topic) keeps the
  single-group meaning: the first group that handles the message confirms it.
- ``message_log``: one row per (consumer group, message) received and not yet handled — the
  in-flight marker, deleted in the transaction that commits the group's effect.
- ``message_processed``: one row per (consumer group, message) whose handler committed. It is
  the per-group authority: "this group already did it" — for deduplication, for the stub's
  confirmation (every expected group has a row), and for the resend rule and reconciliation,
  which judge each (message, group) on its own.
- ``message_resend``: one row per (consumer group, message) the resend rule sent again to that
  group alone (through ``%RETRY%group``): where the copy went, so that the group's progress
  on that retry queue, not on the original queue, says whether it lost the copy too.
- ``outbox_task``: one row per periodic outbox task (``relay_pending``, ``resend_due``,
  ``cleanup``, ``dead_letters``): the lease that lets only one run act at a time however many
  beats or workers fire it, when runs started and finished, and the task's own small state
  (the dead-letter scan's cursors).

Indexes on ``message_stub`` serve the relay's claims (``ix_message_stub_unpublished``, partial,
on PostgreSQL and SQLite; ``ix_message_stub_status_published_at_next_resend_at`` on
MySQL/MariaDB: each index exists on its databases only, ``Index.ddl_if``), the resend scans,
cleanup and the per-queue lookups.

Stub columns for the relay and resends: ``delay_level``/``properties`` (the relay needs them to
publish; a timer is the ``TIMER_DELIVER_MS`` property), ``offset_msg_id`` and
``published_at`` (where and when the last attempt went),
``lease_owner``/``lease_until`` (the claim that keeps two relays from publishing one stub) and
``overtaken_at`` (when the resend check first saw a consumer group past the stub's offset
without it: the start of the grace period before the stub is declared lost) and
``expected_groups`` (above).
``message_group`` is the FIFO message group ``outbox.send(message_group=)`` gave (NULL: none):
the relay publishes a group's stubs one after another in ``(created_at, message_id)`` order
(``claims.group_head``); its index finds a group's unpublished stubs.
Times are naive UTC. Column and constraint names follow ``NAMING_CONVENTION`` so migrations
are stable across databases.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects import mysql

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

MESSAGE_ID_LENGTH = 128
TOPIC_LENGTH = 255
GROUP_LENGTH = 255
MESSAGE_GROUP_LENGTH = 128
"""Longest ``message_group`` (``Producer.send``'s limit, as the gRPC endpoint accepts)."""

metadata = MetaData(naming_convention=NAMING_CONVENTION)

PARTIAL_INDEX_DIALECTS = ("postgresql", "sqlite")
"""Databases with partial indexes (``CREATE INDEX … WHERE``)."""
MYSQL_DIALECTS = ("mysql", "mariadb")
UNPUBLISHED = "status = 'unconfirmed' AND published_at IS NULL"
"""The rows of the relay's claim index: unconfirmed stubs never published. Queries must spell
it with literals (``claims.unpublished_due``): a planner proves that a query may use a partial
index from the query's text, which a bound parameter hides."""


class StubStatus(enum.StrEnum):
    """Life of a stub."""

    UNCONFIRMED = "unconfirmed"
    CONFIRMED = "confirmed"
    VOID = "void"


def group_names_text(groups: object) -> str | None:
    """``expected_groups`` as stored: the names sorted, unique, space-separated (None for
    none)."""
    if groups is None:
        return None
    names = sorted(set(groups))  # type: ignore[call-overload]
    return " ".join(names) or None


def expected_group_names(text: str | None) -> tuple[str, ...] | None:
    """The groups of an ``expected_groups`` value (None: nothing was declared)."""
    if text is None or not text.strip():
        return None
    return tuple(text.split())


def _timestamp(**kwargs: Any) -> Column[datetime]:
    """A naive-UTC timestamp with microseconds on every database (MySQL's default drops them)."""
    name = kwargs.pop("name")
    kind = DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
    return Column(name, kind, **kwargs)


_body = LargeBinary().with_variant(mysql.LONGBLOB(), "mysql", "mariadb")
_long_text = Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")

message_stub = Table(
    "message_stub", metadata,
    Column("message_id", String(MESSAGE_ID_LENGTH), primary_key=True),
    Column("topic", String(TOPIC_LENGTH), nullable=False),
    Column("tags", String(255)),
    Column("keys", String(1024)),
    Column("content", _body, nullable=False),
    Column("properties", _long_text),
    Column("delay_level", SmallInteger),
    Column("status", String(16), nullable=False, server_default=StubStatus.UNCONFIRMED.value),
    Column("send_count", Integer, nullable=False, server_default="0"),
    Column("queue_id", Integer),
    Column("queue_offset", BigInteger),
    Column("log_position", BigInteger),
    Column("offset_msg_id", String(64)),
    _timestamp(name="published_at"),
    _timestamp(name="next_resend_at"),
    Column("lease_owner", String(64)),
    _timestamp(name="lease_until"),
    _timestamp(name="created_at", nullable=False),
    _timestamp(name="updated_at", nullable=False),
    _timestamp(name="confirmed_at"),
    Column("last_error", Text),
    _timestamp(name="overtaken_at"),
    Column("expected_groups", Text),
    Column("message_group", String(MESSAGE_GROUP_LENGTH)),
    CheckConstraint("status IN ('unconfirmed', 'confirmed', 'void')", name="status"),
    CheckConstraint("send_count >= 0", name="send_count"),
    # resend scans: due unconfirmed stubs
    Index("ix_message_stub_status_next_resend_at", "status", "next_resend_at"),
    # relay claims: the unpublished stubs alone, in due order, however many published ones
    # are due for a resend check. PostgreSQL and SQLite: a partial index holding only those
    # rows (its size follows the backlog, not the table; ``status`` leads so that SQLite's
    # planner weighs it against the index above); MySQL/MariaDB have no partial indexes and
    # reach them through (status, published_at IS NULL)
    Index("ix_message_stub_unpublished", "status", "next_resend_at",
          postgresql_where=text(UNPUBLISHED), sqlite_where=text(UNPUBLISHED)).ddl_if(
        dialect=PARTIAL_INDEX_DIALECTS),  # type: ignore[arg-type]  # a tuple works (SQLAlchemy 2)
    Index("ix_message_stub_status_published_at_next_resend_at", "status", "published_at",
          "next_resend_at").ddl_if(dialect=MYSQL_DIALECTS),  # type: ignore[arg-type]
    # relay claims of grouped stubs: is an earlier stub of the group still unpublished
    # (``claims.group_head``: one probe per candidate, the group's unpublished stubs alone)
    Index("ix_message_stub_message_group_status_published_at_created_at", "message_group",
          "status", "published_at", "created_at"),
    # cleanup: confirmed stubs past retention
    Index("ix_message_stub_status_confirmed_at", "status", "confirmed_at"),
    # resend rule and reconciliation: stubs of one queue by offset
    Index("ix_message_stub_topic_queue_id_queue_offset", "topic", "queue_id", "queue_offset"),
)

message_log = Table(
    "message_log", metadata,
    Column("consumer_group", String(GROUP_LENGTH), nullable=False),
    Column("message_id", String(MESSAGE_ID_LENGTH), nullable=False),
    Column("topic", String(TOPIC_LENGTH), nullable=False),
    Column("queue_id", Integer),
    Column("queue_offset", BigInteger),
    _timestamp(name="created_at", nullable=False),
    PrimaryKeyConstraint("consumer_group", "message_id"),
    # resend rule: the group's highest logged offset per queue
    Index("ix_message_log_consumer_group_topic_queue_id_queue_offset",
          "consumer_group", "topic", "queue_id", "queue_offset"),
    # cleanup: stale rows
    Index("ix_message_log_created_at", "created_at"),
)

message_processed = Table(
    "message_processed", metadata,
    Column("consumer_group", String(GROUP_LENGTH), nullable=False),
    Column("message_id", String(MESSAGE_ID_LENGTH), nullable=False),
    Column("topic", String(TOPIC_LENGTH), nullable=False),
    _timestamp(name="processed_at", nullable=False),
    PrimaryKeyConstraint("consumer_group", "message_id"),
    # cleanup: rows past retention
    Index("ix_message_processed_processed_at", "processed_at"),
)

message_resend = Table(
    "message_resend", metadata,
    Column("consumer_group", String(GROUP_LENGTH), nullable=False),
    Column("message_id", String(MESSAGE_ID_LENGTH), nullable=False),
    Column("topic", String(TOPIC_LENGTH), nullable=False),
    Column("queue_id", Integer),
    Column("queue_offset", BigInteger),
    _timestamp(name="resent_at", nullable=False),
    PrimaryKeyConstraint("consumer_group", "message_id"),
    # cleanup: rows past retention
    Index("ix_message_resend_resent_at", "resent_at"),
)

outbox_task = Table(
    "outbox_task", metadata,
    Column("name", String(64), primary_key=True),
    Column("lease_owner", String(64)),
    _timestamp(name="lease_until"),
    _timestamp(name="last_started_at"),
    _timestamp(name="last_finished_at"),
    Column("last_scheduler", String(128)),
    Column("runs", Integer, nullable=False, server_default="0"),
    Column("skipped", Integer, nullable=False, server_default="0"),
    Column("state", _long_text),
    _timestamp(name="updated_at", nullable=False),
)

console_audit = Table(
    # one row per write action of the operator's web console (``postbox console``)
    "console_audit", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    _timestamp(name="at", nullable=False),
    Column("actor", String(255), nullable=False),
    Column("action", String(64), nullable=False),
    Column("target", String(1024), nullable=False),
    Column("outcome", String(1024), nullable=False),
    Index("ix_console_audit_at", "at"),
)

__all__ = [
    "GROUP_LENGTH", "MESSAGE_GROUP_LENGTH", "MESSAGE_ID_LENGTH", "MYSQL_DIALECTS",
    "NAMING_CONVENTION", "PARTIAL_INDEX_DIALECTS", "TOPIC_LENGTH", "UNPUBLISHED", "StubStatus",
    "console_audit", "message_log", "message_processed", "message_resend", "message_stub",
    "metadata", "outbox_task", "expected_group_names", "group_names_text",
]
