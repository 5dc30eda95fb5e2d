"""The resend rule's settings (``outbox.resend.ResendRules``): backoff, horizons, the relay
options they imply, and the settings refused."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from postbox.framework import ConfigurationError
from postbox.outbox import RelayOptions
from postbox.outbox.resend import ResendRules, retention_horizon


def test_backoff_is_exponential_and_capped():
    rules = ResendRules(backoff_ms=60_000, backoff_multiplier=3, backoff_max_ms=300_000)
    assert [rules.backoff(n) for n in (0, 1, 2, 3, 4, 10)] == [
        timedelta(seconds=seconds) for seconds in (60, 60, 180, 300, 300, 300)]
    defaults = ResendRules()
    assert [defaults.backoff(n) for n in range(1, 8)] == [
        timedelta(minutes=minutes) for minutes in (1, 2, 4, 8, 16, 30, 30)]


def test_an_explicit_schedule_repeats_its_last_entry():
    rules = ResendRules(backoff_schedule_ms=(1_000, 5_000, 20_000))
    assert [rules.backoff(n) for n in (1, 2, 3, 4, 10)] == [
        timedelta(seconds=seconds) for seconds in (1, 5, 20, 20, 20)]


def test_horizon_and_retention_horizon_of_the_defaults():
    rules = ResendRules()
    # backoffs 1 + 2 + 4 + 8 + 16 min, and five 30 s grace periods
    assert rules.horizon() == timedelta(minutes=31, seconds=150)
    retry = timedelta(hours=4, minutes=45, seconds=40)
    assert retention_horizon(rules, retry) == timedelta(minutes=31, seconds=150) + 5 * retry + \
        timedelta(hours=1)
    scheduled = ResendRules(max_send_count=3, grace_ms=0, backoff_schedule_ms=(10_000,))
    assert scheduled.horizon() == timedelta(seconds=30)


def test_relay_options_carry_max_send_count_and_the_first_wait():
    rules = ResendRules(max_send_count=3, backoff_schedule_ms=(2_500, 9_000))
    options = rules.relay_options(RelayOptions(batch_size=7, lease_ms=1_234))
    assert (options.max_send_count, options.resend_check_ms) == (3, 2_500)
    assert (options.batch_size, options.lease_ms) == (7, 1_234)
    defaults = ResendRules().relay_options()
    assert (defaults.max_send_count, defaults.resend_check_ms) == (5, 60_000)
    assert defaults.batch_size == RelayOptions().batch_size


@pytest.mark.parametrize("settings", [
    {"max_send_count": 0}, {"batch_size": 0}, {"lease_ms": 0}, {"backoff_ms": 0},
    {"recheck_ms": 0}, {"grace_ms": -1}, {"backoff_ms": 10_000, "backoff_max_ms": 9_999},
    {"backoff_multiplier": 0.5}, {"backoff_schedule_ms": (1_000, 0)},
], ids=str)
def test_bad_rules_are_refused(settings: dict[str, Any]):
    with pytest.raises(ConfigurationError, match="ResendRules"):
        ResendRules(**settings)


def test_edge_rules_are_accepted():
    rules = ResendRules(grace_ms=0, backoff_multiplier=1, backoff_ms=5, backoff_max_ms=5,
                        max_send_count=1, recheck_ms=1, batch_size=1, lease_ms=1)
    assert rules.backoff(7) == timedelta(milliseconds=5)
    assert rules.horizon() == timedelta(milliseconds=5)
