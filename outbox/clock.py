"""Database time: naive UTC ``datetime`` values, read through an injectable function."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

NowFunction = Callable[[], datetime]


def utc_now() -> datetime:
    """The current time as naive UTC (what every outbox column stores)."""
    return datetime.now(UTC).replace(tzinfo=None)


__all__ = ["NowFunction", "utc_now"]
