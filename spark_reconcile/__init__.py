"""PySpark reconciliation: every outbox stub classified against consumer logs,
committed offsets and dead letters, with a report.

    from postbox.spark_reconcile import ReconcileOptions, run_reconciliation
    result = run_reconciliation(ReconcileOptions(store_dir=Path("store"),
                                                 database_url="sqlite:///app.db",
                                                 out_dir=Path("report")))
    result.summary.counts["lost"], result.report_path, result.exit_code

``reconcile(options)`` runs the same on the engine ``options.engine`` names: ``spark``,
``python`` (in this process, no JVM: small inputs) or ``auto``.

May import only ``storage_engine.formats`` (to decode store files) and ``outbox.tables``
(names). PySpark is imported lazily by the job, so importing this package needs only the
``spark`` extra's pyarrow for the export.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .classes import ALL_CLASSES, STUB_CLASSES, MessageClass
from .errors import (
    DatabaseUnavailableError,
    EmptyStoreError,
    MissingTableError,
    ReconcileError,
    SparkUnavailableError,
    StoreNotFoundError,
)
from .options import (
    DEFAULT_THRESHOLDS,
    ENGINES,
    EXIT_INCOMPLETE,
    EXIT_INTERNAL_ERROR,
    EXIT_OK,
    EXIT_THRESHOLD_EXCEEDED,
    ReconcileOptions,
    ReconcileResult,
)
from .results import ReconcileSummary
from .session import DEFAULT_MASTER

if TYPE_CHECKING:
    from .engines import choose_engine, reconcile
    from .job import run_reconciliation


def __getattr__(name: str) -> Any:
    """``run_reconciliation`` (it needs PySpark and pyarrow), ``reconcile`` and
    ``choose_engine`` (pyarrow), imported on first use.

    Raises:
        SparkUnavailableError: they are not installed.
    """
    if name not in ("run_reconciliation", "reconcile", "choose_engine"):
        raise AttributeError(name)
    try:
        if name == "run_reconciliation":
            from .job import run_reconciliation

            return run_reconciliation
        from . import engines
    except ImportError as error:
        raise SparkUnavailableError(f"the reconciliation needs PySpark and pyarrow ({error}): "
                                    "pip install 'postbox[spark]'") from error
    return getattr(engines, name)


__all__ = [
    "ALL_CLASSES", "DEFAULT_MASTER", "DEFAULT_THRESHOLDS", "ENGINES", "EXIT_INCOMPLETE",
    "EXIT_INTERNAL_ERROR", "EXIT_OK",
    "EXIT_THRESHOLD_EXCEEDED", "DatabaseUnavailableError", "EmptyStoreError",
    "MessageClass", "MissingTableError", "ReconcileError", "ReconcileOptions",
    "ReconcileResult", "ReconcileSummary", "STUB_CLASSES", "SparkUnavailableError",
    "StoreNotFoundError", "choose_engine", "reconcile", "run_reconciliation",
]
