"""Errors the outbox raises."""

from __future__ import annotations

from postbox.framework import ConfigurationError, InvalidMessageError


class OutboxError(Exception):
    """Root of the outbox's own errors."""


class NoTransactionError(OutboxError):
    """``outbox.send`` was called outside an open transaction: nothing was written."""


class MissingTablesError(OutboxError):
    """The database lacks the outbox's tables or columns (never migrated, or migrated by an
    older version): the message says to run ``postbox db upgrade``. Nothing was written."""


class DatabaseDriverError(OutboxError, ConfigurationError):
    """A database URL names a dialect SQLAlchemy does not know or a driver that is not
    installed: the message names the URL forms that work and the extra to install."""


class BodyNotSerializableError(InvalidMessageError):
    """The body is neither bytes, text, nor JSON-serialisable: nothing was written."""


__all__ = ["BodyNotSerializableError", "DatabaseDriverError", "InvalidMessageError",
           "MissingTablesError", "NoTransactionError", "OutboxError"]
