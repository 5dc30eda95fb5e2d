"""Reconciliation runs under ``--reports``: class counts per run, a trend chart, each run's
``report.html`` shown in place, and the alarming entries linked to their messages."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import Route

from postbox.spark_reconcile.classes import ALL_CLASSES

from .charts import line_chart
from .sources import SourceError, attempt, read_summary
from .web import Console

ALARMING = ("lost", "dead_lettered", "exhausted", "orphan_log", "dlq_without_stub")
TREND_CLASSES = ("confirmed", "lost", "dead_lettered", "exhausted", "in_flight", "pending")
ENTRIES_MAX = 200
RUN_FILES = ("report.html", "summary.json", "classification.csv")


def run_name(reports: Path, run: Path) -> str:
    """A run's name in URLs: its folder relative to ``--reports`` (``.`` for the folder)."""
    return str(run.relative_to(reports)) if run != reports else "."


def alarming_entries(run: Path) -> list[dict[str, str]]:
    """Rows of the alarming classes in the run's ``classification.csv`` (first
    ``ENTRIES_MAX``)."""
    path = run / "classification.csv"
    if not path.is_file():
        return []
    with path.open(newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("classification") in ALARMING]
    return rows[:ENTRIES_MAX]


def file_stamp(run: Path) -> tuple[int, int]:
    """(mtime ns, size) of the run's ``classification.csv`` ((0, 0) when there is none):
    its kept entries are used only while the file is unchanged."""
    try:
        stat = (run / "classification.csv").stat()
    except OSError:
        return (0, 0)
    return (stat.st_mtime_ns, stat.st_size)


def reports_page(console: Console, request: Request) -> Response:
    """Every run with its counts, the trend, and one run (``?run=``, default the last)."""
    runs = console.sources.report_runs()
    context: dict[str, Any] = {"runs": runs, "classes": ALL_CLASSES}
    if not isinstance(runs, SourceError):
        reports = console.settings.reports_dir or Path(".")
        rows: list[dict[str, Any]] = [{"name": run_name(reports, run),
                                       "summary": read_summary(run)} for run in runs]
        context["rows"] = rows
        context["trend"] = line_chart(
            [row["name"] for row in rows],
            {name: [row["summary"].get("counts", {}).get(name, 0) for row in rows]
             for name in TREND_CLASSES}, "classes per run")
        chosen = request.query_params.get("run") or (rows[-1]["name"] if rows else None)
        by_name = {run_name(reports, run): run for run in runs}
        if chosen in by_name:
            context["chosen"] = chosen
            context["entries"] = console.recent.get(
                ("alarming", str(by_name[chosen]), file_stamp(by_name[chosen])),
                lambda: attempt("reports", lambda: alarming_entries(by_name[chosen])))
    return console.render(request, "reports.html", "Reconciliation", **context)


def run_file(console: Console, request: Request) -> Response:
    """One output file of a run (``report.html`` is shown in place)."""
    runs = console.sources.report_runs()
    name = request.path_params["run"]
    file = request.path_params["file"]
    if isinstance(runs, SourceError) or file not in RUN_FILES:
        return HTMLResponse("<p class='error'>no such report file</p>", status_code=404)
    reports = console.settings.reports_dir or Path(".")
    for run in runs:
        if run_name(reports, run) == name and (run / file).is_file():
            return FileResponse(run / file)
    return HTMLResponse("<p class='error'>no such report file</p>", status_code=404)


def routes(console: Console) -> list[Route]:
    """The reconciliation page and its files."""
    return [Route("/reports", lambda request: reports_page(console, request)),
            Route("/reports/{run:path}/file/{file}",
                  lambda request: run_file(console, request))]
