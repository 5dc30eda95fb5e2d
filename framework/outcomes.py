"""What a handler can say about a message besides "done": ``RetryLater`` and ``DeadLetter``.

A handler returns normally for success. Raising ``RetryLater`` (or any other exception) sends
the message back through ``%RETRY%group`` with the next delay level; raising ``DeadLetter`` puts
it straight into ``%DLQ%group``. ``ConsumeOutcome`` is the runner's record of what happened,
passed to middleware ``after_consume`` hooks.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class RetryLater(Exception):  # a control-flow signal, named for what it asks
    """Ask for redelivery; ``delay_level`` (1..18) overrides "3 + reconsume count"."""

    def __init__(self, delay_level: int | None = None, reason: str = "") -> None:
        super().__init__(reason or "retry later")
        if delay_level is not None and (type(delay_level) is not int or delay_level < 1):
            raise ValueError(f"RetryLater delay_level must be an int >= 1, got {delay_level!r}")
        self.delay_level = delay_level
        self.reason = reason


class DeadLetter(Exception):  # a control-flow signal, named for what it asks
    """Give up on the message now: it goes to ``%DLQ%group`` with ``reason``."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason or "dead-lettered by the handler")
        self.reason = reason


class OutcomeKind(enum.Enum):
    """How one consumption attempt ended."""

    SUCCESS = "success"
    RETRY = "retry"
    DEAD_LETTER = "dead_letter"


@dataclass(frozen=True, slots=True)
class ConsumeOutcome:
    """The result of running a handler on one message (or batch)."""

    kind: OutcomeKind
    error: BaseException | None = None
    delay_level: int = 0  # 0: the broker's rule (3 + reconsume count)
    reason: str = ""

    @classmethod
    def from_error(cls, error: BaseException) -> ConsumeOutcome:
        """Classify an exception a handler raised."""
        if isinstance(error, DeadLetter):
            return cls(OutcomeKind.DEAD_LETTER, error, reason=error.reason)
        if isinstance(error, RetryLater):
            return cls(OutcomeKind.RETRY, error, delay_level=error.delay_level or 0,
                       reason=error.reason)
        return cls(OutcomeKind.RETRY, error, reason=f"{type(error).__name__}: {error}")

    @property
    def succeeded(self) -> bool:
        """Whether the message is done."""
        return self.kind is OutcomeKind.SUCCESS


SUCCESS = ConsumeOutcome(OutcomeKind.SUCCESS)


class SkipMessage(Exception):  # a control-flow signal
    """Raised by middleware ``before_consume`` to finish a message without running the handler
    (e.g. it was already processed): counted as a success."""
