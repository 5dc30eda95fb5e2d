"""The classification of stubs that name their consumer groups (``expected_groups``): one row
per (message, expected group), each judged on its own — the fan-out case, where one group may
have handled a message that another dead-lettered or lost.

For the row of message m and group g, the first that holds:

- ``confirmed``: g has its ``message_processed`` row for m, or the stub is confirmed (which
  means every expected group did; their processed rows may already be cleaned up).
- ``dead_lettered``: m is in ``%DLQ%g`` (by UNIQ_KEY or ORIGIN_MESSAGE_ID).
- ``exhausted``: the stub is void (an operator must act) and g neither did it nor
  dead-lettered it.
- ``in_flight``: g logged m (received, not handled yet), or m is in ``%RETRY%g`` (a retry, or
  the resend rule's copy for g alone).
- ``lost``: g committed an offset past m's queue offset without handling it, for longer than
  the grace period.
- ``pending``: otherwise (not published yet, or g not past it yet, or not for long).

Joins against the small inputs (offsets, dead letters, retries) are broadcast; the exploded
stubs are joined with the log and processed rows by (group, message id).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .inputs import Inputs
from .rule_columns import detail_column, rule_column
from .rules import GROUP_DETAILS, GROUP_RULES
from .store_decode import DLQ, RETRY

KEY = ["consumer_group", "message_id"]


def classify_per_group(stubs: DataFrame, inputs: Inputs, cutoff: Column) -> DataFrame:
    """``stubs`` (with ``expected_groups``) classified per (message, expected group)."""
    rows = stubs.withColumn("consumer_group",
                            F.explode(F.split(F.trim(F.col("expected_groups")), " +")))
    done = inputs.processed.select(*KEY).distinct().withColumn("done", F.lit(True))
    logged = inputs.logs.select(*KEY).distinct().withColumn("logged", F.lit(True))
    offsets = inputs.offsets.select("topic", "consumer_group", "queue_id", "committed_offset")
    matched = (rows.join(done, KEY, "left").join(logged, KEY, "left")
               .join(F.broadcast(_by_group(inputs.store_rows, DLQ, "dlq")), KEY, "left")
               .join(F.broadcast(_by_group(inputs.store_rows, RETRY, "retry")), KEY, "left")
               .join(F.broadcast(offsets), ["topic", "consumer_group", "queue_id"], "left"))
    past = F.col("queue_offset").isNotNull() & (F.col("committed_offset") > F.col("queue_offset"))
    since = F.coalesce("overtaken_at", "published_at", "updated_at", "created_at")
    holds = {"confirmed": F.col("done").isNotNull() | (F.col("status") == "confirmed"),
             "dead_lettered": F.col("dlq_hit").isNotNull(),
             "void": F.col("status") == "void",
             "logged_or_retried": F.col("logged").isNotNull() | F.col("retry_hit").isNotNull(),
             "lost": past & (since <= cutoff)}
    classification = rule_column(GROUP_RULES, holds)
    classified = matched.withColumn("past", past).withColumn("classification", classification)
    return classified.withColumn("detail", _detail(since))


def copies_of(store_rows: DataFrame, kind: str) -> DataFrame:
    """(message id, group, reason) of every ``kind`` copy, by UNIQ_KEY and by origin id."""
    rows = store_rows.where(F.col("kind") == kind)
    return (rows.select(F.col("unique_key").alias("message_id"), "consumer_group", "reason")
            .unionByName(rows.select(F.col("origin_message_id").alias("message_id"),
                                     "consumer_group", "reason"))
            .where(F.col("message_id").isNotNull()))


def _by_group(store_rows: DataFrame, kind: str, prefix: str) -> DataFrame:
    """(group, message id) of every ``kind`` copy, with a reason."""
    return copies_of(store_rows, kind).groupBy(*KEY).agg(F.max("reason").alias(f"{prefix}_reason"),
                                 F.lit(True).alias(f"{prefix}_hit"))


def _detail(since: Column) -> Column:
    offset = F.col("queue_offset")
    holds = {"logged": F.col("logged").isNotNull(),
             "unpublished": offset.isNull() & ((F.col("send_count") == 0)
                                               | F.col("published_at").isNull()),
             "undelivered": offset.isNull(),
             "overtaken": F.col("past")}
    values = {name: F.col(name) for name in (
        "consumer_group", "status", "dlq_reason", "send_count", "last_error",
        "committed_offset", "queue_offset", "delay_level")}
    return detail_column(GROUP_DETAILS, holds, values | {"since": since})


__all__ = ["classify_per_group", "copies_of"]
