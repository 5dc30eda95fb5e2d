"""Errors the outbox raises."""

from __future__ import annotations

from framework import InvalidMessageError


class OutboxError(Exception):
    """Root of the outbox's own errors."""


class NoTransactionError(OutboxError):
    """``outbox.send`` was called outside an open transaction: nothing was written."""


class BodyNotSerializableError(InvalidMessageError):
    """The body is neither bytes, text, nor JSON-serialisable: nothing was written."""


__all__ = ["BodyNotSerializableError", "InvalidMessageError", "NoTransactionError",
           "OutboxError"]
