"""Failures on purpose, so the example shows what the framework does about them.

An order's message may carry ``"fault"``:

- ``lose`` — ``FaultInjector`` (the outermost middleware) acknowledges its first delivery
  without running anything: the message is lost between relay and consumer. The consumer moves
  past it with no log row, so the resend rule sends it again, and the resent copy is billed.
- ``flaky`` — the billing handler fails on the first attempt and succeeds on the retry.
- ``poison`` — the billing handler always fails: retried, dead-lettered, and its stub voided
  with an alert.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from postbox.framework import ConsumeContext, Middleware, SkipMessage

LOSE = "lose"
FLAKY = "flaky"
POISON = "poison"


def fault_of(body: bytes) -> str | None:
    """The fault an order message asks for, if any."""
    try:
        payload: dict[str, Any] = json.loads(body)
    except ValueError:
        return None
    return payload.get("fault")


class FaultInjector(Middleware):
    """Drops the first delivery of each ``lose`` message (per process)."""

    def __init__(self) -> None:
        self._lost: set[str] = set()
        self._lock = threading.Lock()
        self.dropped = 0

    def before_consume(self, context: ConsumeContext) -> None:
        """Skip the first delivery of a ``lose`` message."""
        message = context.message
        if fault_of(message.body) != LOSE:
            return
        with self._lock:
            if message.msg_id in self._lost:
                return
            self._lost.add(message.msg_id)
            self.dropped += 1
        raise SkipMessage(f"fault injection: message {message.msg_id} lost on purpose")


__all__ = ["FLAKY", "LOSE", "POISON", "FaultInjector", "fault_of"]
