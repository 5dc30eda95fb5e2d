"""Scraping a real metrics endpoint in tests: HTTP GET with urllib, parsed by
prometheus-client's own text parser."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

SCRAPE_TIMEOUT_S = 10.0
DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "postbox-dashboard.json"
ALERT_RULES = DASHBOARD.with_name("postbox-alert-rules.yml")
METRIC_NAME = re.compile(r"\bpostbox_[a-z_]+\b")


class Scrape:
    """One scrape: every sample by name (``_total``, ``_bucket`` … included), and the family
    names."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.families: set[str] = set()
        self.samples: dict[str, list[Sample]] = {}
        for family in text_string_to_metric_families(text):
            self.families.add(family.name)
            for sample in family.samples:
                self.samples.setdefault(sample.name, []).append(sample)

    def names(self) -> set[str]:
        """Family and sample names."""
        return self.families | set(self.samples)

    def value(self, name: str, **labels: str) -> float:
        """The one sample of ``name`` whose labels include ``labels`` (AssertionError if not
        exactly one)."""
        found = [s.value for s in self.samples.get(name, [])
                 if all(s.labels.get(key) == wanted for key, wanted in labels.items())]
        assert len(found) == 1, f"{name}{labels}: {len(found)} samples in\n{self.text}"
        return found[0]

    def total(self, name: str, **labels: str) -> float:
        """The sum of the samples of ``name`` whose labels include ``labels``."""
        return sum(s.value for s in self.samples.get(name, [])
                   if all(s.labels.get(key) == wanted for key, wanted in labels.items()))


def scrape(url: str) -> Scrape:
    """GET ``url`` and parse it."""
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return Scrape(response.read().decode())


def dashboard_metric_names() -> set[str]:
    """Every metric name the Grafana dashboard's expressions (and its variable query) use."""
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = [target["expr"] for panel in dashboard["panels"]
                   for target in panel.get("targets", [])]
    expressions += [variable["query"]["query"] for variable in dashboard["templating"]["list"]
                    if isinstance(variable.get("query"), dict)]
    return {name for expression in expressions for name in METRIC_NAME.findall(expression)}


def alert_rules() -> list[dict]:
    """Every rule of the Prometheus alert rules beside the dashboard (loaded as YAML)."""
    document = yaml.safe_load(ALERT_RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def alert_rule_metric_names() -> set[str]:
    """Every metric name the alert rules' expressions use."""
    return {name for rule in alert_rules() for name in METRIC_NAME.findall(rule["expr"])}
