"""A store, an SQLite database and a reconciliation report for the console's tests, made by the
payments example's own scenario (orders through the outbox, a billing consumer with idempotent
handling in Redis, poison orders dead-lettered and their stubs voided)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.console_process import console_process as bench_console_process
from examples.payments.config import PaymentsConfig
from examples.payments.scenario import ScenarioOptions, run_scenario

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = ScenarioOptions(orders=30, lose=2, flaky=2, poison=3, duplicates=3, timeout_s=60.0)
CONSOLE_START_S = 120.0


@dataclasses.dataclass(frozen=True)
class Prepared:
    """Where the scenario left its store, database and reports."""

    store_dir: Path
    database_url: str
    redis_url: str
    reports_dir: Path


def prepare(base: Path, redis_url: str, spark: object | None) -> Prepared:
    """Run the payments scenario into ``base``; reconcile it when ``spark`` is given."""
    config = PaymentsConfig(store_dir=base / "store",
                            database_url=f"sqlite:///{base / 'app.db'}", redis_url=redis_url)
    report = run_scenario(config, OPTIONS)
    assert report.passed, [check for check in report.checks if not check.passed]
    reports = base / "reports"
    reports.mkdir()
    if spark is not None:
        from postbox.spark_reconcile.job import ReconcileOptions, run_reconciliation
        run_reconciliation(ReconcileOptions(store_dir=config.store_dir,
                                            database_url=config.database_url,
                                            out_dir=reports / "run-1", grace_ms=0),
                           spark=spark)
    return Prepared(config.store_dir, config.database_url, redis_url, reports)


@contextmanager
def console_process(arguments: list[str], env: dict[str, str] | None = None
                    ) -> Iterator[str]:
    """``postbox console ARGS --refresh 1`` as a real process (``bench.console_process``, run
    from the checkout); yields its URL once its ``/topics`` answers."""
    with bench_console_process(["--refresh", "1", *arguments], cwd=ROOT, env=env,
                               probe_path="/topics",
                               start_timeout_s=CONSOLE_START_S) as console:
        yield console.url


def publish_pending(prepared: Prepared) -> dict:
    """One run of the outbox relay over the prepared store and database (no consumer)."""
    from postbox.framework import App
    from postbox.outbox.worker import OutboxWorker

    config = PaymentsConfig(store_dir=prepared.store_dir, database_url=prepared.database_url)
    app = App(store_url=config.store_dir, database_url=config.database_url,
              broker_conf=config.broker_conf)
    worker = OutboxWorker(app, rules=config.rules, schedule=config.schedule)
    app.start()
    try:
        return worker.run("relay_pending", scheduled=False)
    finally:
        app.stop()
