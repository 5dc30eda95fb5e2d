"""The outbox's settings: ``ResendRules`` (when a stub is sent again, and how many sends it
gets) and ``RelayOptions`` (relay tuning). Frozen, validated on creation.

One limit, one owner: ``max_send_count`` is a field of ``ResendRules``; ``RelayOptions`` carries
the rules it follows (``rules``) and reads the limit from them, so the relay's first-publish
attempts and the resend rule's resends can never be counted against two different limits.
``ResendRules.relay_options()`` (what ``OutboxWorker`` and the payments example use) builds
relay options that follow a given rule set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta

from postbox.framework import ConfigurationError


@dataclass(frozen=True)
class ResendRules:
    """When a published, unconfirmed stub is sent again (defaults documented in docs/outbox.md).

    The wait after the n-th send is ``backoff_schedule_ms[n-1]`` (the last entry repeating)
    when a schedule is given, else ``backoff_ms * backoff_multiplier ** (n-1)`` capped at
    ``backoff_max_ms``.
    """

    max_send_count: int = 5
    """Sends of a stub, first publish and resends together, before it becomes ``void``: the
    one limit the relay and the resend rule both apply. A publish that failed because the
    broker was unavailable is not a send (``RelayOptions.outage_backoff_ms``)."""
    grace_ms: int = 30_000
    """How long a group must have been past a stub without it before the stub is lost."""
    backoff_ms: int = 60_000
    backoff_multiplier: float = 2.0
    backoff_max_ms: int = 30 * 60_000
    backoff_schedule_ms: tuple[int, ...] = ()
    recheck_ms: int = 30_000
    """Wait before looking again at a stub no group has moved past yet."""
    consumer_groups: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Topic → consumer groups whose progress decides. Topics not listed use every group the
    broker knows consuming them that has logged or processed a message of the topic (an
    idempotent consumer); list the groups when one filters by tags the stubs do not carry."""
    batch_size: int = 200
    lease_ms: int = 60_000

    def __post_init__(self) -> None:
        for name in ("max_send_count", "batch_size", "lease_ms", "backoff_ms", "recheck_ms"):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"ResendRules.{name} must be at least 1")
        if self.grace_ms < 0 or self.backoff_max_ms < self.backoff_ms:
            raise ConfigurationError("ResendRules needs grace_ms >= 0 and "
                                     "backoff_max_ms >= backoff_ms")
        if self.backoff_multiplier < 1 or any(wait < 1 for wait in self.backoff_schedule_ms):
            raise ConfigurationError("ResendRules needs backoff_multiplier >= 1 and positive "
                                     "backoff_schedule_ms entries")
        for topic, groups in self.consumer_groups.items():
            if isinstance(groups, str) or not all(isinstance(group, str) for group in groups):
                raise ConfigurationError(f"ResendRules.consumer_groups[{topic!r}] must be a "
                                         f"list of group names, got {groups!r}")

    def backoff(self, send_count: int) -> timedelta:
        """The wait after the ``send_count``-th send before the rule looks again."""
        attempt = max(send_count, 1)
        if self.backoff_schedule_ms:
            schedule = self.backoff_schedule_ms
            return timedelta(milliseconds=schedule[min(attempt, len(schedule)) - 1])
        wait = self.backoff_ms * self.backoff_multiplier ** (attempt - 1)
        return timedelta(milliseconds=min(wait, self.backoff_max_ms))

    def relay_options(self, base: RelayOptions | None = None) -> RelayOptions:
        """``base`` (default ``RelayOptions()``) following these rules: their
        ``max_send_count``, and their first wait, so a stub's first resend check comes
        ``backoff(1)`` after its first publish."""
        return replace(base or RelayOptions(), rules=self,
                       resend_check_ms=int(self.backoff(1) / timedelta(milliseconds=1)))

    def horizon(self) -> timedelta:
        """The longest a stub can go on being resent: every backoff plus every grace period."""
        waits = sum((self.backoff(n) for n in range(1, self.max_send_count + 1)), timedelta())
        return waits + timedelta(milliseconds=self.grace_ms) * self.max_send_count


@dataclass(frozen=True)
class RelayOptions:
    """Relay tuning; the defaults suit one relay per application process."""

    batch_size: int = 100
    poll_interval_ms: int = 1_000
    lease_ms: int = 30_000
    """How long a claim holds a stub; a relay that dies holding it blocks it this long."""
    retry_delay_ms: int = 1_000
    """Wait before retrying a publish refused for a reason of the message's own (too large,
    invalid, no such topic, no permission: ``framework.SendFailure.MESSAGE``); doubles per
    attempt up to ``retry_delay_max_ms``. Such attempts count toward ``max_send_count``."""
    retry_delay_max_ms: int = 60_000
    outage_backoff_ms: int = 500
    """Wait after a pass whose publishes all failed because the broker was unavailable
    (unreachable, busy, no route yet: ``framework.SendFailure.TRANSIENT``); doubles with each
    such pass in a row up to ``outage_backoff_max_ms``. These failures never count toward
    ``max_send_count``: an outage of any length ends with every stub published, none void."""
    outage_backoff_max_ms: int = 30_000
    """The longest wait during an outage: once the broker is back, stubs go out within it."""
    outage_jitter_ratio: float = 0.5
    """Each outage wait is shortened by a random share of up to this (0: exact waits), so the
    relays of many processes do not all retry at once."""
    resend_check_ms: int = 60_000
    """After a publish, ``next_resend_at`` = now + this: the earliest the resend rule looks."""
    max_pending_notifications: int = 100_000
    """Ids handed over by the after-commit hook and not published yet, at most (beyond it
    they are left to the polling pass)."""
    rules: ResendRules = field(default_factory=ResendRules)
    """The rules whose ``max_send_count`` the relay applies (a publish refused for the
    message's own reason counts; one that failed because the broker was unavailable does
    not)."""
    send_batch_max: int = 32
    """Most stubs of one topic published by one batch send (``Producer.send_batch``: one
    call and one append at the broker, one queue for the batch); 1 publishes each stub alone.
    Delayed stubs always go alone."""

    def __post_init__(self) -> None:
        for name in ("batch_size", "send_batch_max", "outage_backoff_ms"):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"RelayOptions.{name} must be at least 1")
        if self.outage_backoff_max_ms < self.outage_backoff_ms:
            raise ConfigurationError("RelayOptions needs outage_backoff_max_ms >= "
                                     "outage_backoff_ms")
        if not 0 <= self.outage_jitter_ratio < 1:
            raise ConfigurationError("RelayOptions.outage_jitter_ratio must be in [0, 1), got "
                                     f"{self.outage_jitter_ratio!r}")

    @property
    def max_send_count(self) -> int:
        """``rules.max_send_count``: after this many counted attempts a stub is ``void``."""
        return self.rules.max_send_count


__all__ = ["RelayOptions", "ResendRules"]
