"""What a reconciliation is asked to do, and what a finished one returns (no PySpark here)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from .classes import MessageClass
from .results import ReconcileSummary
from .session import DEFAULT_MASTER

EXIT_OK = 0
EXIT_THRESHOLD_EXCEEDED = 1
EXIT_INCOMPLETE = 3
EXIT_INTERNAL_ERROR = 4
"""The job failed for a reason other than its inputs (a Spark task crashed, a bug): no verdict,
no report. Distinct from 1 so that cron never reads a crash as "messages lost"."""
ENGINES = ("auto", "spark", "python")
DEFAULT_THRESHOLDS = {MessageClass.LOST.value: 0, MessageClass.DEAD_LETTERED.value: 0}


@dataclass(frozen=True)
class ReconcileOptions:
    """What to reconcile and how."""

    store_dir: Path
    database_url: str
    out_dir: Path
    master: str = DEFAULT_MASTER
    grace_ms: int = 30_000
    """How long a consumer group must have been past a stub before it counts as lost."""
    as_of: datetime | None = None
    """The reconciliation's "now" (naive UTC); the current time when None."""
    thresholds: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    """Class → largest acceptable count; above it the exit code is 1."""
    jdbc_jars: Sequence[str] = ()
    """JDBC driver jars: when given, the tables are read through Spark JDBC, not exported."""
    export_chunk_rows: int = 50_000
    check_crc: bool = True
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    executor_python: str | None = None
    """Interpreter of the Spark Python workers (it must have Postbox installed); default: this
    interpreter on a local master, ``spark.pyspark.python`` or Spark's default on a cluster."""
    remote: str | None = None
    """A Spark Connect server (``sc://host:port``) to run on instead of ``master``."""
    engine: str = "spark"
    """``spark``, ``python`` (in this process, no JVM) or ``auto`` (``python`` when the input is
    small: at most ``python_max_stubs`` stubs and ``python_max_store_bytes`` of commit log)."""
    incremental: bool = False
    """Re-read only what changed since the last run plus what is still open, carry the rest
    over (``incremental``; Python engine only)."""
    python_max_stubs: int = 2_000_000
    python_max_store_bytes: int = 8 << 30

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {self.engine!r}")


@dataclass(frozen=True)
class ReconcileResult:
    """A finished run: its summary and where the outputs are."""

    summary: ReconcileSummary
    out_dir: Path

    @property
    def report_path(self) -> Path:
        """``report.html``."""
        return self.out_dir / "report.html"

    @property
    def exit_code(self) -> int:
        """0 fine; 1 a threshold exceeded; 3 some store file unreadable (report incomplete)."""
        if self.summary.exceeded:
            return EXIT_THRESHOLD_EXCEEDED
        return EXIT_OK if self.summary.complete else EXIT_INCOMPLETE


__all__ = [
    "DEFAULT_THRESHOLDS", "ENGINES", "EXIT_INCOMPLETE", "EXIT_INTERNAL_ERROR", "EXIT_OK",
    "EXIT_THRESHOLD_EXCEEDED",
    "ReconcileOptions", "ReconcileResult",
]
