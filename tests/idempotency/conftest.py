"""Fixtures for idempotency tests: an app on the test's store (a small real embedded store, or
the run's remote broker: ``tests/support/transports.py``), a real database with the outbox
tables and a ``ledger`` business table, and real Redis."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import func, select

from postbox import outbox
from postbox.framework import App, ConsumerOptions
from postbox.framework.tracing import TracingSetting
from postbox.storage_engine import FakeClock
from tests.support.consumer_process import BROKER_CONF
from tests.support.idempotent_consumer import MS_DELAY_LEVELS, business, ledger
from tests.support.transports import StoreUnderTest

__all__ = ["count_rows", "ledger"]


def count_rows(engine, table) -> int:
    with engine.connect() as connection:
        return connection.execute(select(func.count()).select_from(table)).scalar_one()


@pytest.fixture
def make_app(store: StoreUnderTest, migrated_database_url: str,
             redis_url: str) -> Iterator[Callable[..., App]]:
    """Factory: ``make_app(redis=..., clock=..., consumer_options=..., tracing=...)`` → an app
    on the test's store (``store``: a small embedded one under tmp_path, or the run's remote
    broker); stopped at teardown. The ledger table is created in the app's database."""
    apps: list[App] = []

    def factory(*, redis: str | None = redis_url, clock: FakeClock | None = None,
                name: str = "store", database: str = migrated_database_url,
                consumer_options: ConsumerOptions | None = None,
                tracing: TracingSetting = True) -> App:
        app = App(**store.app_options(name, broker_conf={
            **BROKER_CONF, "messageDelayLevel": MS_DELAY_LEVELS}), database_url=database,
                  redis_url=redis, clock=clock, consumer_options=consumer_options,
                  tracing=tracing)
        business.create_all(outbox.database_engine(app))
        apps.append(app)
        return app

    yield factory
    for app in reversed(apps):
        app.stop()
