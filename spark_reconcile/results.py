"""What a reconciliation found, in plain Python values: the input of the HTML report and of
``summary.json``. Built by the job from the Spark results; small (aggregates, not rows)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from .classes import ALL_CLASSES


@dataclass(frozen=True)
class StoreProblem:
    """A store file that could not be read completely; the rest was reconciled without it."""

    file: str
    reason: str
    position: int | None = None
    """Commit-log position (or consume-queue byte) where reading stopped, when known."""


@dataclass(frozen=True)
class ClassCount:
    """How many rows of one class fall in one topic / consumer group / hour."""

    classification: str
    count: int
    topic: str | None = None
    consumer_group: str | None = None
    hour: datetime | None = None
    """Start of the UTC hour the message was created (its stub, log row or DLQ entry)."""


@dataclass(frozen=True)
class QueueLag:
    """One consumer group's position on one queue against the queue's end."""

    topic: str
    consumer_group: str
    queue_id: int
    committed_offset: int
    max_offset: int

    @property
    def lag(self) -> int:
        """Messages in the queue the group has not consumed yet (never negative)."""
        return max(self.max_offset - self.committed_offset, 0)


@dataclass(frozen=True)
class TopicResends:
    """How often the stubs of one topic had to be sent again."""

    topic: str
    stubs: int
    resent_stubs: int
    """Stubs sent more than once."""
    resends: int
    """Sends beyond each stub's first."""
    send_count_max: int


@dataclass(frozen=True)
class GroupRetries:
    """What the broker holds for one consumer group's failures."""

    consumer_group: str
    retry_messages: int
    """Messages in ``%RETRY%<group>`` (each redelivery attempt is one)."""
    dead_letters: int
    """Messages in ``%DLQ%<group>``."""


@dataclass(frozen=True)
class Sample:
    """One row of an alarming class, shown in the report so an operator can act on it."""

    classification: str
    message_id: str
    topic: str | None
    consumer_group: str | None
    queue_id: int | None
    queue_offset: int | None
    detail: str


@dataclass
class ReconcileSummary:
    """Everything the report shows."""

    as_of: datetime
    """The reconciliation's "now" (naive UTC): the grace period is measured back from it."""
    grace_ms: int
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ALL_CLASSES, 0))
    complete: bool = True
    """False when some store file could not be read: the counts then miss what it held."""
    problems: list[StoreProblem] = field(default_factory=list)
    thresholds: dict[str, int] = field(default_factory=dict)
    """Class → the largest count that is still acceptable."""
    exceeded: list[str] = field(default_factory=list)
    """Classes whose count is above their threshold."""
    by_topic: list[ClassCount] = field(default_factory=list)
    by_group: list[ClassCount] = field(default_factory=list)
    by_hour: list[ClassCount] = field(default_factory=list)
    by_topic_group_hour: list[ClassCount] = field(default_factory=list)
    lag: list[QueueLag] = field(default_factory=list)
    resends: list[TopicResends] = field(default_factory=list)
    retries: list[GroupRetries] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    inputs: dict[str, Any] = field(default_factory=dict)
    """Where the data came from and how much of it: store, database, source, row counts."""
    duration_s: float = 0.0

    @property
    def stubs(self) -> int:
        """Stubs classified (every class but the two without a stub)."""
        return sum(self.counts[name] for name in ALL_CLASSES[:6])

    def to_json(self) -> dict[str, Any]:
        """``summary.json``'s document: plain JSON types, times as ISO-8601 strings."""
        document = asdict(self)
        document["as_of"] = self.as_of.isoformat()
        for lag, row in zip(self.lag, document["lag"], strict=True):
            row["lag"] = lag.lag
        for key in ("by_topic", "by_group", "by_hour", "by_topic_group_hour"):
            for row in document[key]:
                if row["hour"] is not None:
                    row["hour"] = row["hour"].isoformat()
        document["stubs"] = self.stubs
        return document


__all__ = [
    "ClassCount", "GroupRetries", "QueueLag", "ReconcileSummary", "Sample", "StoreProblem",
    "TopicResends",
]
