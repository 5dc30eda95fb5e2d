"""The reconciliation benchmark at its smallest size: all three ways (Spark, the Python engine,
one SQL query) classify the generated dataset to its planned counts, and the report has the
figures the README quotes (per-step seconds of both engines, the Python/SQL ratio's inputs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_a_small_run_reports_every_engine_with_the_planned_counts(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "bench.reconcile_bench", "--stubs", "1000", "--database-url",
         f"sqlite:///{tmp_path / 'app.db'}", "--dir", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=600, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    (size,) = json.loads(completed.stdout)["sizes"]
    assert size["stubs"] == 1000 and size["database"] == "sqlite"
    for engine in ("spark", "python", "sql"):
        assert size[engine]["counts"] == size["expected"], engine
        assert size[engine]["seconds"] > 0
    for engine in ("spark", "python"):
        steps = size[engine]["steps"]
        assert {"export", "scan store files", "classify", "write report"} <= set(steps), engine
        assert sum(steps.values()) <= size[engine]["seconds"] * 1.01
    assert size["python"]["peak_rss_mb"] > 0
    assert not list(tmp_path.glob("postbox-reconcile-bench-*"))  # its work dir is removed
