"""The issue's acceptance test: a real endpoint scraped while the payments example runs, its
values checked against the scenario's own counts (from the database, the broker's DLQ and the
consumer); and the Grafana dashboard's expressions checked against that scrape: every metric
name they use exists there (the broker's own names: ``test_broker_metrics``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from examples.payments.billing import GROUP
from examples.payments.config import PaymentsConfig
from examples.payments.orders import TOPIC
from examples.payments.scenario import ScenarioOptions, ScenarioReport, run_scenario
from postbox.framework import App
from postbox.storage_engine.formats.topic_names import retry_topic
from tests.support.filesystems import scratch_dir

from .scrape import Scrape, alert_rule_metric_names, dashboard_metric_names, scrape

OPTIONS = ScenarioOptions(orders=150, lose=3, flaky=4, poison=2, duplicates=6, timeout_s=45)


@pytest.fixture(scope="module")
def payments(tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[ScenarioReport, Scrape]]:
    scraped: list[Scrape] = []

    def observe(app: App, report: ScenarioReport) -> None:
        scraped.append(scrape(app.metrics_server(0).url))

    with scratch_dir(tmp_path_factory, "payments") as directory:
        report = run_scenario(PaymentsConfig(
            store_dir=directory / "store", database_url=f"sqlite:///{directory / 'db.sqlite'}"),
            OPTIONS, observe=observe)
        assert report.passed, report
        yield report, scraped[0]


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
    assert result.total("postbox_idempotency_duplicates_total", group=GROUP) == (
        report.duplicates_rejected) == report.duplicates_injected
    assert result.value("postbox_idempotency_processed_total", group=GROUP) == (
        report.confirmed) == report.ledger_rows
    assert result.value("postbox_outbox_resends_total") == report.resent >= (
        report.lost_on_purpose) > 0
    assert result.value("postbox_outbox_published_total") == report.sent
    # a resend goes to the group that lost the message alone, through its retry topic, where
    # every send-back is delivered too (after its delay)
    assert result.value("postbox_store_put_messages_total", topic=TOPIC) == (
        report.sent + report.duplicates_injected)
    assert result.value("postbox_store_put_messages_total", topic=retry_topic(GROUP)) == (
        report.resent + report.retried)
    assert result.total("postbox_consumer_lag_messages", group=GROUP, topic=TOPIC) == 0
    assert result.value("postbox_outbox_publish_seconds_count") == report.sent + report.resent


def test_every_dashboard_and_alert_rule_metric_exists_in_a_real_scrape(
        payments: tuple[ScenarioReport, Scrape]) -> None:
    used = dashboard_metric_names()
    assert len(used) >= 25
    rules = alert_rule_metric_names()
    assert len(rules) >= 8
    # the broker's own families are checked against the broker's endpoint in
    # test_broker_metrics; every other name is served by the payments app
    app_names = {name for name in used | rules if not name.startswith("postbox_broker_")}
    assert sorted(app_names - payments[1].names()) == []
