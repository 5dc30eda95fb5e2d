"""Values that cross the ``Broker`` API: permissions, consume-from modes, send and send-back
receipts, queue progress. Pure and immutable; safe to share between threads.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .message import PutStatus

PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4
PERM_READ_WRITE = PERM_READ | PERM_WRITE  # 6, RocketMQ's default and the retry/DLQ topics'


class ConsumeFrom(enum.Enum):
    """Where a group starts on a queue it never committed (reference §12.3)."""

    LAST = "last"  # CONSUME_FROM_LAST_OFFSET (a young queue still starts at 0, §12.2)
    FIRST = "first"  # CONSUME_FROM_FIRST_OFFSET
    TIMESTAMP = "timestamp"  # CONSUME_FROM_TIMESTAMP (default: now - 30 min)


class SendBackOutcome(enum.Enum):
    """Where ``Broker.send_back`` put a failed message."""

    RETRY = "retry"  # %RETRY%group, via the delay level
    DEAD_LETTER = "dead_letter"  # %DLQ%group queue 0
    DISCARDED = "discarded"  # the group's retry_queue_nums is 0: nothing stored (RocketMQ)


@dataclass(frozen=True, slots=True)
class SendResult:
    """Where a sent message was stored: what ``Broker.send`` and every ``BrokerClient`` return,
    and what ``framework.Producer.send`` returns (its ``SendResult``) — one type from the
    broker up; the store's own ``PutResult`` stays below it.

    ``topic``/``queue_id`` are the destination the sender asked for (after queue selection);
    ``stored_topic``/``stored_queue_id``/``queue_offset`` are where the record really went — the
    same unless the message was delayed (then ``SCHEDULE_TOPIC_XXXX`` queue ``level - 1``).
    """

    topic: str
    queue_id: int
    stored_topic: str
    stored_queue_id: int
    queue_offset: int
    log_position: int
    offset_msg_id: str
    unique_key: str | None
    store_timestamp_ms: int
    delay_level: int
    status: PutStatus

    @property
    def msg_id(self) -> str:
        """``UNIQ_KEY`` (the id consumers, the outbox and idempotency use) when the message
        has one, else the offsetMsgId."""
        return self.unique_key or self.offset_msg_id

    @property
    def delayed(self) -> bool:
        """Whether the message waits in the delay topic before reaching ``topic``."""
        return self.delay_level > 0



@dataclass(frozen=True, slots=True)
class SendBackResult:
    """What ``Broker.send_back`` did with a failed message."""

    outcome: SendBackOutcome
    receipt: SendResult | None
    reconsume_count: int  # the copy's reconsume count (original + 1)


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """A group's position on one queue (``postbox consumer progress``)."""

    topic: str
    queue_id: int
    committed_offset: int | None  # None: the group never committed on this queue
    min_offset: int
    max_offset: int

    @property
    def lag(self) -> int:
        """Messages not yet consumed (from the committed offset, else from the min offset)."""
        start = self.min_offset if self.committed_offset is None else self.committed_offset
        return max(0, self.max_offset - max(start, self.min_offset))
