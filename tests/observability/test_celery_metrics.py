"""The Celery worker's endpoint (``POSTBOX_METRICS_LISTEN``): a real worker and beat of the
payments example in subprocesses; the port the worker logs is scraped until the outbox tasks
it runs (in that same process: solo pool) have published and the consumer confirmed the
orders placed from here."""

from __future__ import annotations

import re

from sqlalchemy import Engine

from tests.examples.test_celery_payments import (  # noqa: F401 - fixtures
    Deployment,
    deployment,
    engine,
    place,
    smtp_server_fixture,
    webhook_server_fixture,
)

from .scrape import Scrape, scrape


def test_worker_serves_the_outbox_tasks_counts(deployment: Deployment,  # noqa: F811
                                               engine: Engine) -> None:  # noqa: F811
    deployment.env["POSTBOX_METRICS_LISTEN"] = "127.0.0.1:0"
    worker = deployment.start_worker()
    address = deployment.wait_for(
        lambda: re.search(r"metrics listening on (127\.0\.0\.1:\d+)", worker.output()),
        "the worker's metrics line").group(1)
    deployment.start_beat(1)
    place(engine, 4)

    def settled() -> Scrape | None:
        result = scrape(f"http://{address}/metrics")
        confirmed = result.total("postbox_outbox_stubs", status="confirmed")
        handled = result.total("postbox_consumer_handled_total", group="billing")
        return result if confirmed == handled == 4 else None  # handled: counted on return

    result = deployment.wait_for(settled, "4 stubs confirmed and handled, seen through the "
                                          "worker's endpoint")
    assert result.value("postbox_outbox_stubs_query_error") == 0
    assert result.value("postbox_outbox_published_total") == 4
    assert result.value("postbox_idempotency_processed_total") == 4
    assert result.value("postbox_consumer_handled_total", group="billing") == 4
    assert result.value("postbox_store_put_messages_total", topic="orders") == 4
