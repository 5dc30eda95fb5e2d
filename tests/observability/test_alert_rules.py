"""The Prometheus alert rules beside the Grafana dashboard (docs/grafana/postbox-alert-rules.yml):
they load, Prometheus's own ``promtool`` accepts them, its unit tests (alert_rules_test.yml) see
each alert fire on the series it is about and stay quiet on healthy ones, and they cover what
operators must hear about. That every metric they name is really exported is checked against
real scrapes: the payments app's (``test_payments_metrics``) and a broker process's
(``test_broker_metrics``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from .scrape import ALERT_RULES, alert_rule_metric_names, alert_rules

UNIT_TESTS = Path(__file__).with_name("alert_rules_test.yml")


def promtool() -> str:
    """The ``promtool`` command (Debian's ``prometheus`` package; ``scripts/services.sh
    test-tools`` installs it)."""
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed: scripts/services.sh test-tools "
                    "(apt-get install prometheus)")
    return found


def test_every_rule_is_an_alert_with_severity_and_text() -> None:
    rules = alert_rules()
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names)) >= 8
    for rule in rules:
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
    used = alert_rule_metric_names()
    for needed in ("postbox_broker_consumer_lag_messages", "postbox_outbox_stubs",
                   "postbox_consumer_dead_lettered_total", "postbox_store_disk_used_ratio",
                   "postbox_store_disk_warning_level_ratio", "postbox_store_disk_full"):
        assert needed in used  # lag growing, void stubs, dead letters, disk watermark


def test_promtool_accepts_the_rules() -> None:
    checked = subprocess.run([promtool(), "check", "rules", str(ALERT_RULES)],
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in checked.stdout


def test_each_alert_fires_in_promtools_unit_tests() -> None:
    tested = {case["alertname"] for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"]
              for case in test["alert_rule_test"] if case["exp_alerts"]}
    assert tested == {rule["alert"] for rule in alert_rules()}  # every alert seen firing
    run = subprocess.run([promtool(), "test", "rules", UNIT_TESTS.name], cwd=UNIT_TESTS.parent,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout
