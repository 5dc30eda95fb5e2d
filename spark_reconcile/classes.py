"""The classes a reconciliation puts each message in."""

from __future__ import annotations

import enum


class MessageClass(enum.StrEnum):
    """One row of the classification: a stub, or a log row / DLQ message without a stub.

    A stub that names its consumer groups (``expected_groups``, the fan-out case) gets one row
    per (message, group), each judged for that group alone (``classify_groups``): handled by
    the group (or the stub confirmed), in its ``%DLQ%``, void, logged or in its ``%RETRY%``,
    past it unhandled beyond the grace period, else pending. Any other stub gets exactly one
    of the first six, tried in this order:

    - ``confirmed``: the stub says a consumer committed its effect.
    - ``dead_lettered``: its id (UNIQ_KEY) or ORIGIN_MESSAGE_ID is in a ``%DLQ%`` topic.
    - ``exhausted``: void (given up after the maximum sends, or by an operator).
    - ``in_flight``: a consumer group logged it (received, not yet confirmed), or the broker is
      retrying it through a ``%RETRY%`` topic.
    - ``lost``: a consumer group of its topic is past its queue offset, has neither logged nor
      processed it, and has been past it for longer than the grace period — a resend candidate.
    - ``pending``: not published yet, or no consumer group is past it yet (or not for long).

    And two kinds of rows without a stub:

    - ``orphan_log``: a ``message_log`` row whose message id has no stub.
    - ``dlq_without_stub``: a dead-lettered message that matches no stub (sent without the
      outbox, or its stub was deleted).
    """

    CONFIRMED = "confirmed"
    DEAD_LETTERED = "dead_lettered"
    EXHAUSTED = "exhausted"
    IN_FLIGHT = "in_flight"
    LOST = "lost"
    PENDING = "pending"
    ORPHAN_LOG = "orphan_log"
    DLQ_WITHOUT_STUB = "dlq_without_stub"


STUB_CLASSES = (MessageClass.CONFIRMED, MessageClass.DEAD_LETTERED, MessageClass.EXHAUSTED,
                MessageClass.IN_FLIGHT, MessageClass.LOST, MessageClass.PENDING)
"""The classes a stub can be in, in the order they are tried."""

ALL_CLASSES = (*STUB_CLASSES, MessageClass.ORPHAN_LOG, MessageClass.DLQ_WITHOUT_STUB)

__all__ = ["ALL_CLASSES", "STUB_CLASSES", "MessageClass"]
