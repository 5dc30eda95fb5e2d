"""Assembling the example: the Postbox ``App`` with the billing consumer, its outbox, and the
worker that runs the periodic outbox tasks."""

from __future__ import annotations

from datetime import timedelta

from postbox import migrations
from postbox.framework import App, ConsumerOptions
from postbox.outbox import Outbox
from postbox.outbox.cleanup import CleanupPolicy
from postbox.outbox.database import create_database_engine, sqlite_file
from postbox.outbox.worker import OutboxWorker

from .billing import register_billing
from .config import PaymentsConfig
from .faults import FaultInjector
from .models import business

FAST_CONSUMER_OPTIONS = ConsumerOptions(persist_interval_ms=200, long_polling_ms=200)


def prepare_database(config: PaymentsConfig) -> None:
    """Migrate the outbox tables and create the example's own tables."""
    database = sqlite_file(config.database_url)
    if database is not None:
        database.parent.mkdir(parents=True, exist_ok=True)
    migrations.upgrade(config.database_url)
    engine = create_database_engine(config.database_url)
    try:
        business.create_all(engine)
    finally:
        engine.dispose()


def build_app(config: PaymentsConfig, *, faults: FaultInjector | None = None) -> App:
    """The billing consumer's app; ``faults`` (outermost middleware) injects losses."""
    app = App(store_url=config.store_dir, database_url=config.database_url,
              redis_url=config.redis_url, broker_conf=config.broker_conf,
              consumer_options=FAST_CONSUMER_OPTIONS if config.fast else None)
    if faults is not None:
        app.add_middleware(faults)
    register_billing(app, reconsume_count_max=config.reconsume_count_max)
    return app


def build_outbox(app: App, config: PaymentsConfig) -> Outbox:
    """The app's outbox: sends through its database publish right after commit (and are
    first checked by the resend rule ``config.rules.backoff(1)`` later)."""
    return Outbox(app, options=config.rules.relay_options())


def build_worker(config: PaymentsConfig, app: App | None = None) -> OutboxWorker:
    """The periodic outbox tasks for ``app`` (built from ``config`` when not given)."""
    app = app if app is not None else build_app(config, faults=FaultInjector())
    retention = timedelta(days=7)
    return OutboxWorker(app, rules=config.rules,
                        schedule=config.schedule,
                        cleanup=CleanupPolicy(confirmed_retention=retention,
                                              log_retention=retention,
                                              processed_retention=retention,
                                              batch_size=config.cleanup_batch_size,
                                              max_batches=config.cleanup_max_batches))


__all__ = ["build_app", "build_outbox", "build_worker", "prepare_database"]
