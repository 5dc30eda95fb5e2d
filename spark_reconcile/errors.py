"""Why a reconciliation could not run. Each carries the CLI exit code it maps to; none leaves a
report behind (a report is only written when the run finished)."""

from __future__ import annotations


class ReconcileError(Exception):
    """Base: the inputs could not be read, so there is no report."""

    exit_code = 2


class StoreNotFoundError(ReconcileError):
    """``--store`` is not a store directory."""


class EmptyStoreError(ReconcileError):
    """The store holds no commit log and no consume queue: nothing to reconcile against."""


class DatabaseUnavailableError(ReconcileError):
    """The database could not be reached or read."""


class MissingTableError(ReconcileError):
    """A table the reconciliation needs does not exist (``postbox db upgrade`` creates it)."""


class SparkUnavailableError(ReconcileError):
    """PySpark or Java is missing, or the Spark session could not start."""


__all__ = [
    "DatabaseUnavailableError", "EmptyStoreError", "MissingTableError", "ReconcileError",
    "SparkUnavailableError", "StoreNotFoundError",
]
