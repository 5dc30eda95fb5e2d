"""The overview's put/consume rates between samples, and the chart's sample count."""

from __future__ import annotations

from types import SimpleNamespace

from postbox.console.pages_overview import rates


def figures(at: float, stored: int, consumed: int) -> dict:
    return {"computed_at": at, "stored": stored, "consumed": consumed}


def test_rates_between_samples_and_the_count_in_words():
    console = SimpleNamespace(samples=[])
    first = rates(console, figures(10.0, 100, 40))
    assert (first["put"], first["consume"]) == (0.0, 0.0)  # one sample: no rate yet
    assert ">1 sample<" in first["chart"]
    assert rates(console, figures(10.0, 100, 40))["chart"] == first["chart"]  # same figures
    second = rates(console, figures(12.0, 300, 50))
    assert (second["put"], second["consume"]) == (100.0, 5.0)
    assert ">2 samples<" in second["chart"]
    lower = rates(console, figures(13.0, 250, 50))  # a count going back (retention): no minus
    assert lower["put"] == 0.0
