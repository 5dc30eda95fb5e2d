"""``postbox reconcile``: classify every outbox stub against the store.

Reads ``message_stub``/``message_log`` from ``--db`` (a chunked Parquet export by default, Spark
JDBC with ``--jdbc-jar``) and the consumer offsets, consume queues and dead-letter/retry topics
from ``--store`` (read only; a copy of a live store works), runs the Spark job on ``--master``
(or through the Spark Connect server ``--remote sc://host:port``) and writes ``report.html``,
``classification/`` (Parquet), ``classification.csv`` and ``summary.json`` under ``--out``.
``--engine python`` (or ``auto``, the default, for up to ``--python-max-stubs`` stubs when no
Spark option is given) runs the same classification in this process, without a JVM;
``--incremental`` reads only what changed since the last run plus what is still open.

Exit codes: 0 every count within its threshold; 1 ``lost`` or ``dead_lettered`` above its
threshold (``--max-lost``, ``--max-dead-lettered``); 2 the inputs could not be read (no report
written); 3 some store file could not be read (report written, marked incomplete); 4 the job
itself failed (a Spark task crashed, e.g. executors without Postbox; no report, no verdict).

On a local master the Spark Python workers run this command's interpreter, wherever it is run
from; on a cluster they run ``--executor-python`` (else Spark's default, ``PYSPARK_PYTHON`` or
``python3``), which must have Postbox installed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from postbox import spark_reconcile
from postbox.spark_reconcile import (
    ALL_CLASSES,
    DEFAULT_MASTER,
    ENGINES,
    EXIT_INTERNAL_ERROR,
    ReconcileError,
    ReconcileOptions,
    ReconcileResult,
)

from .common import (
    DEFAULT_STORE_DIR,
    CliError,
    JsonOption,
    StoreDirOption,
    err_console,
    out_console,
    print_error,
    reports_errors,
    step_progress,
)
from .db_commands import DEFAULT_DATABASE_URL, DatabaseUrlOption, prepare_url

DEFAULT_OUT_DIR = Path(".postbox/reconcile")
_PYTHON_ERROR = re.compile(r"^\s*((?:\w+\.)*\w+(?:Error|Exception)): (.+)$", re.MULTILINE)
CLASS_MEANINGS = {
    "confirmed": "a consumer committed its effect",
    "dead_lettered": "in a %DLQ% topic: needs a human",
    "exhausted": "void: given up after the maximum sends",
    "in_flight": "received (logged) or being retried, not confirmed yet",
    "lost": "a consumer moved past it without it: a resend candidate",
    "pending": "not published, or no consumer past it yet",
    "orphan_log": "message_log row without a stub",
    "dlq_without_stub": "dead letter that matches no stub",
}


@reports_errors
def reconcile_command(
    store: StoreDirOption = None,
    db: DatabaseUrlOption = DEFAULT_DATABASE_URL,
    out: Annotated[Path, typer.Option(
        "--out", metavar="DIR", file_okay=False, help="Where the report and data go.")
    ] = DEFAULT_OUT_DIR,
    master: Annotated[str | None, typer.Option(
        "--master", metavar="URL",
        help=f"Spark master (local[N], spark://host:port, …) \\[default: {DEFAULT_MASTER}].")
    ] = None,
    engine: Annotated[str, typer.Option(
        "--engine", metavar="auto|spark|python",
        help="python: no JVM, for small inputs; auto: python up to --python-max-stubs stubs "
             "(and no Spark option given), else spark.")] = "auto",
    incremental: Annotated[bool, typer.Option(
        "--incremental/--full",
        help="Read only what changed since the last run in --out plus what is still open "
             "(Python engine); --full (the default) reads everything.")] = False,
    python_max_stubs: Annotated[int, typer.Option(
        "--python-max-stubs", min=0, help="The most stubs --engine auto runs in Python.")
    ] = 2_000_000,
    remote: Annotated[str | None, typer.Option(
        "--remote", metavar="URL",
        help="Run through a Spark Connect server (sc://host:port) instead of --master.")
    ] = None,
    grace_ms: Annotated[int, typer.Option(
        "--grace-ms", min=0, help="How long a consumer must be past a stub before it is lost.")
    ] = 30_000,
    max_lost: Annotated[int, typer.Option(
        "--max-lost", min=0, help="Largest acceptable number of lost stubs (else exit 1).")
    ] = 0,
    max_dead_lettered: Annotated[int, typer.Option(
        "--max-dead-lettered", min=0,
        help="Largest acceptable number of dead-lettered stubs (else exit 1).")] = 0,
    jdbc_jar: Annotated[list[Path] | None, typer.Option(
        "--jdbc-jar", metavar="JAR", exists=True, dir_okay=False,
        help="JDBC driver jar (repeatable): read the tables through Spark JDBC instead of the "
             "Parquet export.")] = None,
    chunk_rows: Annotated[int, typer.Option(
        "--chunk-rows", min=100, help="Rows per chunk of the Parquet export.")] = 50_000,
    executor_python: Annotated[str | None, typer.Option(
        "--executor-python", metavar="PATH",
        help="Python of the Spark workers, with Postbox installed \\[default: this interpreter "
             "on local masters; PYSPARK_PYTHON or python3 on a cluster].")] = None,
    json_output: JsonOption = False,
) -> None:
    """Reconcile outbox stubs against consumer logs, offsets and dead letters (Spark, or
    Python for small inputs).

    Exit codes: 0 every count within its threshold;
    1 lost or dead-lettered above its threshold;
    2 inputs unreadable (no report);
    3 some store file unreadable (report written, marked incomplete);
    4 the job itself failed, e.g. a Spark task crashed (no report, no verdict).
    """
    if engine not in ENGINES:
        raise CliError(f"--engine must be one of {', '.join(ENGINES)}")
    if engine == "auto" and not incremental and (master or remote or jdbc_jar
                                                 or executor_python):
        engine = "spark"  # a Spark option names the engine
    options = ReconcileOptions(
        store_dir=store or DEFAULT_STORE_DIR, database_url=prepare_url(db, create=False),
        out_dir=out, master=master or DEFAULT_MASTER, engine=engine,
        python_max_stubs=python_max_stubs, incremental=incremental,
        grace_ms=grace_ms, thresholds={"lost": max_lost, "dead_lettered": max_dead_lettered},
        jdbc_jars=tuple(str(jar) for jar in jdbc_jar or ()), export_chunk_rows=chunk_rows,
        executor_python=executor_python, remote=remote)
    run_and_report(options, json_output)


def run_and_report(options: ReconcileOptions, json_output: bool) -> None:
    """Run the reconciliation, print its result (JSON or tables) and exit with its code."""
    console = out_console()
    try:
        if json_output:
            result = spark_reconcile.reconcile(options)
        else:
            result = run_with_progress(err_console(), options)  # stdout: the result only
    except ReconcileError as error:
        raise CliError(str(error)) from error
    except Exception as error:  # no verdict: a crash must not read as "lost"
        print_error(f"the reconciliation failed (exit code {EXIT_INTERNAL_ERROR}, no report): "
                    f"{failure_summary(error)}")
        raise typer.Exit(EXIT_INTERNAL_ERROR) from error
    if json_output:
        console.print_json(json.dumps({**result.summary.to_json(),
                                       "report": str(result.report_path),
                                       "exit_code": result.exit_code}))
    else:
        render_result(console, result)
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def failure_summary(error: BaseException) -> str:
    """One line about an unexpected failure: the first Python error named in it (a Spark
    task's failure arrives wrapped in a long JVM trace), else its first line."""
    text = str(error)
    found = _PYTHON_ERROR.search(text)
    if found and found.group(1) not in ("py4j.protocol.Py4JJavaError",):
        return f"{found.group(1)}: {found.group(2).strip()}"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def run_with_progress(console: Console, options: ReconcileOptions) -> ReconcileResult:
    """Run the job with one progress bar per step, drawn on ``console``."""
    # bars on a terminal; nothing in a log file or pipe (cron reads the summary and exit code)
    with step_progress(console, label_width=24, transient=not console.is_terminal) as update:
        return spark_reconcile.reconcile(options, update)


def render_result(console: Console, result: ReconcileResult) -> None:
    """The counts, the verdict and where the report is."""
    summary = result.summary
    table = Table(title="Reconciliation", box=box.SIMPLE_HEAVY)
    table.add_column("class", style="bold")
    table.add_column("messages", justify="right")
    table.add_column("threshold", justify="right")
    table.add_column("what it means")
    for name in ALL_CLASSES:
        limit = summary.thresholds.get(name)
        count = summary.counts.get(name, 0)
        style = "bold red" if name in summary.exceeded else ""
        table.add_row(name, f"[{style}]{count:,}[/]" if style else f"{count:,}",
                      "" if limit is None else f"{limit:,}", CLASS_MEANINGS[name])
    console.print(table)
    for problem in summary.problems:
        where = f" at {problem.position}" if problem.position is not None else ""
        print_error(f"incomplete: {problem.file}{where}: {problem.reason}")
    if summary.exceeded:
        console.print(f"[bold red]above threshold:[/] {', '.join(summary.exceeded)}")
    elif summary.complete:
        console.print("[bold green]every count within its threshold[/]")
    console.print(f"{summary.stubs:,} stubs reconciled in {summary.duration_s:.1f} s; "
                  f"report: {result.report_path}")


__all__ = ["DEFAULT_OUT_DIR", "failure_summary", "reconcile_command", "render_result",
           "run_and_report",
           "run_with_progress"]
