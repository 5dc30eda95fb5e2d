"""Which engine runs a reconciliation: Spark, or the Python engine for inputs one machine holds.

``reconcile(options)`` is the entry point the CLI uses. With ``engine="auto"`` it counts the
stubs (one ``SELECT count(*)``) and sums the commit-log segment sizes, and runs the Python
engine — no JVM, no Spark session — when both are within ``python_max_stubs`` and
``python_max_store_bytes``; else Spark. Both engines write the same outputs. An incremental
run (``options.incremental``) always runs on the Python engine: it reads only what changed
since the last run and what is still open (see ``incremental``).
"""

from __future__ import annotations

import sqlalchemy as sa

from postbox.outbox.tables import message_stub

from .errors import ReconcileError, SparkUnavailableError
from .options import ReconcileOptions, ReconcileResult
from .store_files import list_store_files
from .table_export import Progress, present_tables, table_connection


def choose_engine(options: ReconcileOptions) -> str:
    """``spark`` or ``python``: ``options.engine`` unless it is ``auto``.

    Raises:
        ReconcileError: ``auto`` could not look at the inputs.
    """
    if options.incremental:
        if options.engine == "spark":
            raise ReconcileError("an incremental reconciliation runs on the Python engine: "
                                 "--engine python or auto")
        return "python"  # it reads what changed since the last run: small by design
    if options.engine != "auto":
        return options.engine
    files = list_store_files(options.store_dir)
    if sum(segment.size_bytes for segment in files.segments) > options.python_max_store_bytes:
        return "spark"
    present_tables(options.database_url)  # a missing table is named, not a failed count
    with table_connection(options.database_url) as connection:
        stubs = connection.execute(sa.select(sa.func.count()).select_from(message_stub)
                                   ).scalar_one()
    return "python" if stubs <= options.python_max_stubs else "spark"


def reconcile(options: ReconcileOptions, progress: Progress | None = None) -> ReconcileResult:
    """Run the reconciliation on the engine ``choose_engine`` picks.

    Raises:
        ReconcileError: an input could not be read (no outputs were written).
    """
    if choose_engine(options) == "python":
        from .python_engine import run_python_reconciliation

        return run_python_reconciliation(options, progress)
    try:
        from .job import run_reconciliation
    except ImportError as error:
        raise SparkUnavailableError(f"the reconciliation needs PySpark and pyarrow ({error}): "
                                    "pip install 'postbox[spark]'") from error
    return run_reconciliation(options, progress)


__all__ = ["choose_engine", "reconcile"]
