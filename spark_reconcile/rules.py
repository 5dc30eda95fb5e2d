"""The classification rules, stated once for both engines (no PySpark here).

A rule set is an ordered list of (class, condition): a row gets the class of the first
condition that holds. A detail list says, the same way, which sentence explains the row. The
conditions and the values the sentences quote are *named* here; each engine computes them its
own way — the Spark job as Spark columns (``classify``, ``classify_groups``), the Python
engine as Arrow columns (``python_classify``) — and both evaluate these same lists, so the
order of the rules and the wording of every detail exist in this module only.

Conditions of a stub (``STUB_RULES``):

- ``confirmed``: the stub's status is ``confirmed``.
- ``dead_lettered``: its id or ORIGIN_MESSAGE_ID is in a ``%DLQ%`` topic.
- ``void``: its status is ``void``.
- ``logged_or_retried``: a consumer group logged it, or it is in a ``%RETRY%`` topic.
- ``lost``: a group of its topic committed past its queue offset without processing it, for
  longer than the grace period (``overtaken`` and its time ``since`` at or before the cutoff).

The per-group rules (``GROUP_RULES``) judge one (message, expected group) row: ``confirmed`` is
then "the group processed it, or the stub is confirmed", the other conditions look at that
group only. Values quoted by the details are text, as Spark's ``CAST(... AS STRING)`` writes
it (``spark_text``): times ``YYYY-MM-DD HH:MM:SS[.ffffff]`` without trailing zeros.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from .classes import MessageClass as C

ALWAYS = "always"
"""The condition of the last rule: it always holds."""

STUB_RULES: tuple[tuple[C, str], ...] = (
    (C.CONFIRMED, "confirmed"),
    (C.DEAD_LETTERED, "dead_lettered"),
    (C.EXHAUSTED, "void"),
    (C.IN_FLIGHT, "logged_or_retried"),
    (C.LOST, "lost"),
    (C.PENDING, ALWAYS),
)
"""A stub without expected groups: one row, the first class whose condition holds."""

GROUP_RULES = STUB_RULES
"""A (message, expected group) row: the same order; the engines compute the conditions for
that group alone (``confirmed``: the group processed it or the stub is confirmed)."""


class Detail(NamedTuple):
    """The explanation of a row of ``classification`` whose ``condition`` also holds."""

    classification: C
    condition: str
    template: str
    """``%s`` placeholders, filled with ``values`` in order (``%%`` is a literal ``%``)."""
    values: tuple[str, ...] = ()


STUB_DETAILS: tuple[Detail, ...] = (
    Detail(C.CONFIRMED, ALWAYS, "confirmed at %s", ("confirmed_at",)),
    Detail(C.DEAD_LETTERED, ALWAYS, "in %%DLQ%%%s: %s", ("dlq_group", "dlq_reason")),
    Detail(C.EXHAUSTED, ALWAYS, "void after %s sends: %s", ("send_count", "last_error")),
    Detail(C.IN_FLIGHT, "logged", "logged by %s: received, not confirmed yet", ("log_group",)),
    Detail(C.IN_FLIGHT, ALWAYS, "being redelivered through %%RETRY%%%s", ("retry_group",)),
    Detail(C.LOST, ALWAYS, "group %s committed offset %s, past queue offset %s, without it "
           "since %s", ("past_group", "past_committed", "queue_offset", "since")),
    Detail(C.PENDING, "unpublished", "not published yet"),
    Detail(C.PENDING, "undelivered", "delayed (level %s): not delivered to its topic yet",
           ("delay_level",)),
    Detail(C.PENDING, "overtaken", "group %s is past it since %s: within the grace period",
           ("past_group", "since")),
    Detail(C.PENDING, ALWAYS, "no consumer group past it yet"),
)

GROUP_DETAILS: tuple[Detail, ...] = (
    Detail(C.CONFIRMED, ALWAYS, "handled by %s (stub %s)", ("consumer_group", "status")),
    Detail(C.DEAD_LETTERED, ALWAYS, "in %%DLQ%%%s: %s", ("consumer_group", "dlq_reason")),
    Detail(C.EXHAUSTED, ALWAYS, "void after %s sends, not handled by %s: %s",
           ("send_count", "consumer_group", "last_error")),
    Detail(C.IN_FLIGHT, "logged", "logged by %s: received, not handled yet",
           ("consumer_group",)),
    Detail(C.IN_FLIGHT, ALWAYS, "being redelivered through %%RETRY%%%s", ("consumer_group",)),
    Detail(C.LOST, ALWAYS, "group %s committed offset %s, past queue offset %s, without it "
           "since %s", ("consumer_group", "committed_offset", "queue_offset", "since")),
    Detail(C.PENDING, "unpublished", "not published yet"),
    Detail(C.PENDING, "undelivered", "delayed (level %s): not delivered to its topic yet",
           ("delay_level",)),
    Detail(C.PENDING, "overtaken", "group %s is past it since %s: within the grace period",
           ("consumer_group", "since")),
    Detail(C.PENDING, ALWAYS, "group %s is not past it yet", ("consumer_group",)),
)

ORPHAN_LOG_DETAIL = "logged by %s but no stub has this id"
DLQ_WITHOUT_STUB_DETAIL = "in %%DLQ%%%s with no stub: %s"

DEFAULT_TEXT = {"confirmed_at": "an unknown time", "dlq_reason": "no reason recorded",
                "last_error": "no error recorded", "reason": "no reason recorded",
                "delay_level": "0"}
"""What a detail says for a missing value (else Spark's ``null``)."""


def spark_text(value: object, default: str | None = None) -> str:
    """``value`` as Spark casts it to a string (``null`` when missing and no ``default``)."""
    if value is None:
        return "null" if default is None else default
    if isinstance(value, datetime):
        text = value.isoformat(" ")
        return text.rstrip("0") if "." in text else text
    return str(value)


__all__ = ["ALWAYS", "DLQ_WITHOUT_STUB_DETAIL", "DEFAULT_TEXT", "Detail", "GROUP_DETAILS",
           "GROUP_RULES", "ORPHAN_LOG_DETAIL", "STUB_DETAILS", "STUB_RULES", "spark_text"]
