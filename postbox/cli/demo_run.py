"""What ``postbox demo`` runs: the payments example end to end on embedded defaults.

A fresh directory (``./.postbox/demo`` by default; deleted first, but only if an earlier demo
made it) gets an embedded store, a SQLite database and an embedded Redis. The order service
places ``--orders`` orders, one transaction each; some messages are lost on purpose, some
handlers fail once or always, and duplicates are published; the billing consumer and the
periodic outbox tasks run until every message is confirmed or void. The summary counts what
happened; the checks prove it is consistent. Then the Spark reconciliation classifies every
stub against the store and writes its report (``DIR/reconcile/report.html``); its counts must
agree with the demo's. Exit code 1 when a check fails.

The scenario dead-letters some messages on purpose, so the outbox raises alerts for them: those
alerts and dead-letter warnings are the demo's expected outcome, not failures. They are kept
off the console (``ExpectedOutcomes`` counts them) and reported as one line under the summary,
with a check that every void stub raised its alert; any other warning or error still prints.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from examples.payments.config import PaymentsConfig
from examples.payments.scenario import Check, ScenarioOptions, ScenarioReport, run_scenario
from postbox.framework.consume_service import DEAD_LETTER_LOG_ATTRIBUTE
from postbox.outbox.alerts import ALERT_LOG_ATTRIBUTE, AlertKind
from postbox.spark_reconcile import ReconcileError, ReconcileOptions, ReconcileResult

from .common import (
    EXIT_NOT_FOUND,
    err_console,
    logging_to,
    out_console,
    print_warning,
    step_progress,
)
from .reconcile_command import render_result, run_with_progress


def run_demo(root: Path, *, orders: int, redis: str | None, timeout: float, reconcile: bool,
             json_output: bool) -> None:
    """The scenario, its checks, the reconciliation and the rendering (``postbox demo``)."""
    config = PaymentsConfig(store_dir=root / "store",
                            database_url=f"sqlite:///{(root / 'payments.db').resolve()}",
                            redis_url=redis)
    scale = orders / 2_000
    options = ScenarioOptions(orders=orders, lose=max(2, round(20 * scale)),
                              flaky=max(2, round(40 * scale)),
                              poison=max(1, round(10 * scale)),
                              duplicates=max(2, round(50 * scale)), timeout_s=timeout)
    console = out_console()
    reconciliation = None
    # unexpected warnings print (on stderr with --json; above the progress bars otherwise); the
    # expected alerts and dead letters are counted and summed up instead
    expected = ExpectedOutcomes()
    if json_output:
        with logging_to(err_console(), logging.WARNING, "%(message)s", filters=[expected]):
            report = run_scenario(config, options)
            report.checks.append(expected.check(report))
            if reconcile and report.settled:
                reconciliation = reconcile_demo(root, config, report, None)
        console.print_json(json.dumps({
            **dataclasses.asdict(report), "passed": report.passed, "directory": str(root),
            "expected_alerts": {kind.value: count for kind, count in expected.alerts.items()},
            "reconciliation": reconciliation and {
                **reconciliation.summary.to_json(),
                "report": str(reconciliation.report_path)}}))
    else:
        with logging_to(console, logging.WARNING, "%(message)s", filters=[expected]):
            report = _run_with_progress(console, config, options)
            report.checks.append(expected.check(report))
            if reconcile and report.settled:
                reconciliation = reconcile_demo(root, config, report, console)
        render(console, report, root)
        console.print(expected.summary(as_expected=report.passed), highlight=False)
        if reconciliation is not None:
            render_result(console, reconciliation)
    if not report.passed:
        raise typer.Exit(EXIT_NOT_FOUND)


class ExpectedOutcomes(logging.Filter):
    """Keeps the scenario's intended alerts and dead-letter warnings off the console, counting
    them (by ``ALERT_LOG_ATTRIBUTE`` / ``DEAD_LETTER_LOG_ATTRIBUTE`` on the record)."""

    def __init__(self) -> None:
        super().__init__()
        self.alerts = {kind: 0 for kind in AlertKind}
        self.dead_lettered = 0

    def filter(self, record: logging.LogRecord) -> bool:
        """False (not printed) for an expected outcome, True for everything else."""
        alert = getattr(record, ALERT_LOG_ATTRIBUTE, None)
        if alert is not None:
            self.alerts[alert.kind] += 1
            return False
        if getattr(record, DEAD_LETTER_LOG_ATTRIBUTE, None) is not None:
            self.dead_lettered += 1
            return False
        return True

    def check(self, report: ScenarioReport) -> Check:
        """Every void stub raised its alert, and no other alert was raised."""
        dead, exhausted = (self.alerts[AlertKind.DEAD_LETTERED],
                           self.alerts[AlertKind.EXHAUSTED])
        void = report.void_dead_lettered + report.void_exhausted
        return Check("every void stub raised one alert",
                     (dead, exhausted) == (report.void_dead_lettered, report.void_exhausted),
                     f"{dead + exhausted} alerts for {void} void stubs")

    def summary(self, as_expected: bool) -> str:
        """The line that reports them: as what the demo set out to show when ``as_expected``
        (every check passed), plainly otherwise (the failed checks say what went wrong)."""
        dead, exhausted = (self.alerts[AlertKind.DEAD_LETTERED],
                           self.alerts[AlertKind.EXHAUSTED])
        lead = "as expected" if as_expected else "alerts"
        return (f"{lead}: {dead + exhausted} alert(s) raised ({dead} dead-lettered, "
                f"{exhausted} void after max sends) for the {self.dead_lettered} message(s) the "
                "billing handler refused on purpose; in production alerts go to the log, a "
                "webhook or email (POSTBOX_ALERT_*)")


def reconcile_demo(root: Path, config: PaymentsConfig, report: ScenarioReport,
                   console: Console | None) -> ReconcileResult | None:
    """Reconcile the demo's store and database; add the check that the counts agree.

    Returns None (after a warning) when Spark cannot run here: the payments checks stand alone.
    """
    from postbox import spark_reconcile
    options = ReconcileOptions(
        store_dir=config.store_dir, database_url=config.database_url, out_dir=root / "reconcile",
        master="local[2]", grace_ms=config.rules.grace_ms,
        thresholds={"lost": 0, "dead_lettered": report.void_dead_lettered})
    try:
        if console is None:
            result = spark_reconcile.run_reconciliation(options)
        else:
            result = run_with_progress(console, options)
    except spark_reconcile.SparkUnavailableError as error:
        print_warning(f"reconciliation skipped: {error}")
        return None
    except ReconcileError as error:
        report.checks.append(Check("the reconciliation ran", False, str(error)))
        return None
    report.checks.append(_agreement(report, result))
    return result


def _agreement(report: ScenarioReport, result: ReconcileResult) -> Check:
    counts = result.summary.counts
    expected = {"confirmed": report.confirmed, "dead_lettered": report.void_dead_lettered,
                "exhausted": report.void_exhausted, "in_flight": 0, "lost": 0, "pending": 0,
                "orphan_log": 0, "dlq_without_stub": 0}
    wrong = {name: (counts.get(name, 0), want) for name, want in expected.items()
             if counts.get(name, 0) != want}
    detail = ("; ".join(f"{name}: {got} (expected {want})" for name, (got, want)
                        in wrong.items()) or f"{result.summary.stubs} stubs classified as the "
              "demo counted them")
    return Check("the Spark reconciliation agrees with the demo", not wrong and
                 result.summary.complete, detail)


def _run_with_progress(console: Console, config: PaymentsConfig,
                       options: ScenarioOptions) -> ScenarioReport:
    with step_progress(console) as update:
        return run_scenario(config, options, update)


def render(console: Console, report: ScenarioReport, root: Path) -> None:
    """The summary and the checks."""
    summary = Table(title="Payments demo", box=box.SIMPLE_HEAVY, show_header=True)
    summary.add_column("", style="bold")
    summary.add_column("messages", justify="right")
    summary.add_column("what it means")
    rows = [
        ("sent", report.sent, "orders placed, one transaction each (order + outbox stub)"),
        ("confirmed", report.confirmed, "billed exactly once (ledger row + stub confirmed)"),
        ("retried", report.retried, "handler failures retried through %RETRY%billing"),
        ("resent", report.resent, "extra sends by the outbox (lost messages found again)"),
        ("void: dead-lettered", report.void_dead_lettered,
         "consumer gave up: in %DLQ%billing, stub void, alert raised"),
        ("void: exhausted", report.void_exhausted, "resent max times without a confirmation"),
        ("DLQ", report.dead_letters, "messages in %DLQ%billing"),
        ("lost on purpose", report.lost_on_purpose, "first deliveries dropped by the fault "
                                                     "injector"),
        ("duplicates", f"{report.duplicates_rejected}/{report.duplicates_injected}",
         "duplicate deliveries rejected / injected"),
        ("ledger rows", report.ledger_rows, "one per confirmed order"),
    ]
    for name, value, meaning in rows:
        summary.add_row(name, str(value), meaning)
    console.print(summary)
    checks = Table(box=box.SIMPLE, show_header=False)
    checks.add_column("")
    checks.add_column("check")
    checks.add_column("detail", style="dim")
    if not report.settled:
        checks.add_row(Text("FAIL", style="bold red"), "every message settled in time", "")
    for check in report.checks:
        mark = Text("ok", style="bold green") if check.passed else Text("FAIL", style="bold red")
        checks.add_row(mark, check.name, check.detail)
    console.print(checks)
    verdict = "[bold green]all checks passed[/]" if report.passed else \
        "[bold red]some checks failed[/]"
    console.print(f"{verdict} in {report.elapsed_s:.1f} s (orders placed in "
                  f"{report.place_s:.1f} s); store and database in {root}")


__all__ = ["run_demo"]
