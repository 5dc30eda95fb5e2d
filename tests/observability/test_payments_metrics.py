"""The issue's acceptance test: a real endpoint scraped while the payments example runs, its
values checked against the scenario's own counts (from the database, the broker's DLQ and the
consumer); and the Grafana dashboard's expressions checked against real scrapes: every metric
name they use exists in the payments app's endpoint or the broker's."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples.payments.billing import GROUP
from examples.payments.config import PaymentsConfig
from examples.payments.orders import TOPIC
from examples.payments.scenario import ScenarioOptions, ScenarioReport, run_scenario
from framework import App
from tests.support.broker_process import BrokerProcess, write_broker_conf
from tests.support.polling import wait_until

from .scrape import Scrape, scrape

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "postbox-dashboard.json"
OPTIONS = ScenarioOptions(orders=150, lose=3, flaky=4, poison=2, duplicates=6, timeout_s=45)


@pytest.fixture(scope="module")
def payments(tmp_path_factory: pytest.TempPathFactory) -> tuple[ScenarioReport, Scrape]:
    directory = tmp_path_factory.mktemp("payments")
    scraped: list[Scrape] = []

    def observe(app: App, report: ScenarioReport) -> None:
        scraped.append(scrape(app.metrics_server(0).url))

    report = run_scenario(PaymentsConfig(store_dir=directory / "store",
                                         database_url=f"sqlite:///{directory / 'db.sqlite'}"),
                          OPTIONS, observe=observe)
    assert report.passed, report
    return report, scraped[0]


@pytest.fixture(scope="module")
def broker_scrape(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scrape]:
    directory = tmp_path_factory.mktemp("broker")
    broker = BrokerProcess(directory / "store", broker_conf=write_broker_conf(directory),
                           extra=("--metrics", "127.0.0.1:0")).start()
    try:
        app = App(store_url=f"rocketmq://{broker.namesrv_address}")
        with app:
            app.producer.send("orders", b"one")
        url = f"http://{broker.metrics_address}/metrics"
        found = wait_until(lambda: _with_broker_families(scrape(url)),
                           what="the broker's families")
        assert found is not None
        yield found
    finally:
        broker.stop()


def _with_broker_families(result: Scrape) -> Scrape | None:
    return result if "postbox_broker_messages_total" in result.samples else None


def test_scrape_matches_the_scenarios_own_counts(
        payments: tuple[ScenarioReport, Scrape]) -> None:
    report, result = payments
    assert result.value("postbox_outbox_stubs_query_error") == 0
    assert result.value("postbox_outbox_stubs", status="confirmed") == report.confirmed
    assert result.value("postbox_outbox_stubs", status="void") == (
        report.void_dead_lettered + report.void_exhausted)
    assert result.value("postbox_outbox_stubs", status="unconfirmed") == 0
    assert result.value("postbox_consumer_dead_lettered_total", group=GROUP) == (
        report.dead_letters) > 0
    assert result.value("postbox_outbox_voids_total", reason="dead_lettered") == (
        report.void_dead_lettered)
    assert result.value("postbox_outbox_voids_total", reason="exhausted") == (
        report.void_exhausted)
    assert result.value("postbox_outbox_alerts_total", kind="dead_lettered") == (
        report.void_dead_lettered)
    assert result.value("postbox_consumer_retried_total", group=GROUP) == report.retried > 0
    assert result.total("postbox_idempotency_duplicates_total") == (
        report.duplicates_rejected) == report.duplicates_injected
    assert result.value("postbox_idempotency_processed_total") == report.confirmed == (
        report.ledger_rows)
    assert result.value("postbox_outbox_resends_total") == report.resent >= (
        report.lost_on_purpose) > 0
    assert result.value("postbox_outbox_published_total") == report.sent
    assert result.value("postbox_store_put_messages_total", topic=TOPIC) == (
        report.sent + report.resent + report.duplicates_injected)
    assert result.total("postbox_consumer_lag_messages", group=GROUP, topic=TOPIC) == 0
    assert result.value("postbox_outbox_publish_seconds_count") == report.sent + report.resent


def test_every_dashboard_metric_exists_in_a_real_scrape(
        payments: tuple[ScenarioReport, Scrape], broker_scrape: Scrape) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = [target["expr"] for panel in dashboard["panels"]
                   for target in panel.get("targets", [])]
    expressions.append(dashboard["templating"]["list"][1]["query"]["query"])
    used = {name for expression in expressions
            for name in re.findall(r"\bpostbox_[a-z_]+\b", expression)}
    assert len(used) >= 25
    served = payments[1].names() | broker_scrape.names()
    assert sorted(used - served) == []
