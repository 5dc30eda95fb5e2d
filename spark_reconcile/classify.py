"""The classification (DESIGN §6) as Spark DataFrame transformations: every stub gets exactly
one class (see ``MessageClass`` for the rules and their order) — a stub that names its
consumer groups one per (message, group), see ``classify_groups`` — plus rows for log entries
and dead-lettered messages without a stub. Joins against the small inputs (offsets, dead letters,
retries) are broadcast; only stubs × logs is shuffled."""

from __future__ import annotations

from datetime import datetime, timedelta

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .classes import MessageClass as C
from .classify_groups import classify_per_group, copies_of
from .inputs import Inputs
from .rule_columns import detail_column, rule_column, text_column
from .rules import DLQ_WITHOUT_STUB_DETAIL, ORPHAN_LOG_DETAIL, STUB_DETAILS, STUB_RULES
from .store_decode import DELIVERED, DLQ, RETRY

CLASSIFICATION_COLUMNS = ("message_id", "classification", "topic", "consumer_group", "queue_id",
                          "queue_offset", "status", "send_count", "created_at", "hour", "detail")


def classify(inputs: Inputs, as_of: datetime, grace_ms: int) -> DataFrame:
    """One row per stub — per (stub, expected group) for a stub that names its groups
    (``classify_groups``) — log row without a stub, and dead letter without a stub.

    Confirmed stubs (most of them) are decided by their status alone: only the others go
    through the joins, and those joins are against small frames (broadcast), so the stub table
    is never shuffled."""
    every_stub = _resolve_offsets(inputs.stubs, inputs.store_rows)
    plain = every_stub.where(F.col("expected_groups").isNull())
    dead = _by_message(inputs.store_rows, DLQ, "dlq")
    logged = _logged(inputs.logs)
    unsettled = plain.where(F.col("status") != "confirmed")
    matched = (unsettled
               .join(F.broadcast(dead), "message_id", "left")
               .join(F.broadcast(_by_message(inputs.store_rows, RETRY, "retry")), "message_id",
                     "left")
               .join(F.broadcast(logged), "message_id", "left")
               .join(F.broadcast(_overtaken(unsettled, inputs)), "message_id", "left")
               .unionByName(plain.where(F.col("status") == "confirmed"),
                            allowMissingColumns=True))
    cutoff = _utc_literal(as_of - timedelta(milliseconds=grace_ms))
    since = F.coalesce("overtaken_at", "published_at", "updated_at", "created_at")
    holds = {"confirmed": F.col("status") == "confirmed",
             "dead_lettered": F.col("dlq_group").isNotNull(),
             "void": F.col("status") == "void",
             "logged_or_retried": F.col("log_group").isNotNull()
             | F.col("retry_group").isNotNull(),
             "lost": F.col("past_group").isNotNull() & (since <= cutoff)}
    classified = matched.withColumn("classification", rule_column(STUB_RULES, holds))
    # ids of the small sides that matched a stub: found from the stub side, so the (large)
    # stub table is never shuffled against them again
    known = inputs.stubs.select("message_id")
    fanout = every_stub.where(F.col("expected_groups").isNotNull())
    per_group = ([classify_per_group(fanout, inputs, cutoff)]
                 if fanout.select("message_id").limit(1).count() else [])
    return _unify(
        classified.withColumn("consumer_group", _group_column())
        .withColumn("detail", _detail_column(since)),
        *per_group,
        _orphan_logs(inputs.logs, known.join(F.broadcast(logged.select("message_id")),
                                             "message_id", "left_semi")),
        _dead_letters_without_stub(inputs.store_rows, known.join(
            F.broadcast(dead.select("message_id")), "message_id", "left_semi")))


def _utc_literal(moment: datetime) -> Column:
    """A naive-UTC time as a Spark literal. Not ``F.lit(moment)``: PySpark reads a naive
    datetime in the Python process's local time zone, which would move the cutoff off UTC."""
    return F.lit(moment.strftime("%Y-%m-%d %H:%M:%S.%f")).cast("timestamp_ntz")


def _resolve_offsets(stubs: DataFrame, store_rows: DataFrame) -> DataFrame:
    """A delayed stub's offset is recorded only once the delay service delivered it: find its
    copy in the real topic (it carries REAL_TOPIC) by UNIQ_KEY."""
    delivered = (store_rows.where(F.col("kind") == DELIVERED)
                 .groupBy(F.col("unique_key").alias("message_id"), "topic")
                 .agg(F.max(F.struct("queue_offset", "queue_id")).alias("delivered")))
    return (stubs.join(F.broadcast(delivered), ["message_id", "topic"], "left")
            .withColumn("queue_id", F.coalesce("queue_id", "delivered.queue_id"))
            .withColumn("queue_offset", F.coalesce("queue_offset", "delivered.queue_offset"))
            .drop("delivered"))


def _by_message(store_rows: DataFrame, kind: str, prefix: str) -> DataFrame:
    """Message id → the group (and reason) of its ``kind`` copies, by UNIQ_KEY or origin id."""
    return copies_of(store_rows, kind).groupBy("message_id").agg(
        F.min("consumer_group").alias(f"{prefix}_group"),
        F.max("reason").alias(f"{prefix}_reason"))


def _logged(logs: DataFrame) -> DataFrame:
    return logs.groupBy("message_id").agg(F.min("consumer_group").alias("log_group"))


def _overtaken(stubs: DataFrame, inputs: Inputs) -> DataFrame:
    """Unconfirmed stubs some consumer group of their topic has committed past without
    processing them (only they can be lost or pending)."""
    placed = stubs.where(F.col("queue_offset").isNotNull()
                         & (F.col("status") == "unconfirmed")).select(
        "message_id", "topic", "queue_id", "queue_offset")
    key = ["consumer_group", "message_id"]
    past = (placed.join(F.broadcast(inputs.offsets), ["topic", "queue_id"])
            .where(F.col("committed_offset") > F.col("queue_offset")))
    # the processed rows of these (group, message) pairs only: the processed table is scanned
    # once against a broadcast of the few overtaken pairs, never shuffled
    handled = inputs.processed.select(*key).join(F.broadcast(past.select(*key)), key,
                                                 "left_semi")
    past = past.join(F.broadcast(handled), key, "left_anti")
    return past.groupBy("message_id").agg(
        F.min("consumer_group").alias("past_group"),
        F.max("committed_offset").alias("past_committed"))


def _group_column() -> Column:
    kind = F.col("classification")
    return (F.when(kind == C.DEAD_LETTERED.value, F.col("dlq_group"))
            .when(kind == C.IN_FLIGHT.value, F.coalesce("log_group", "retry_group"))
            .when(kind.isin(C.LOST.value, C.PENDING.value), F.col("past_group")))


def _detail_column(since: Column) -> Column:
    offset = F.col("queue_offset")
    holds = {"logged": F.col("log_group").isNotNull(),
             "unpublished": offset.isNull() & ((F.col("send_count") == 0)
                                               | F.col("published_at").isNull()),
             "undelivered": offset.isNull(),
             "overtaken": F.col("past_group").isNotNull()}
    values = {name: F.col(name) for name in (
        "confirmed_at", "dlq_group", "dlq_reason", "send_count", "last_error", "log_group",
        "retry_group", "past_group", "past_committed", "queue_offset", "delay_level")}
    return detail_column(STUB_DETAILS, holds, values | {"since": since})


def _orphan_logs(logs: DataFrame, logged_stub_ids: DataFrame) -> DataFrame:
    return (logs.join(F.broadcast(logged_stub_ids), "message_id", "left_anti")
            .withColumn("classification", F.lit(C.ORPHAN_LOG.value))
            .withColumn("status", F.lit(None).cast("string"))
            .withColumn("send_count", F.lit(None).cast("int"))
            .withColumn("detail", F.format_string(ORPHAN_LOG_DETAIL, F.col("consumer_group"))))


def _dead_letters_without_stub(store_rows: DataFrame, dead_stub_ids: DataFrame) -> DataFrame:
    ids = F.broadcast(dead_stub_ids.withColumnRenamed("message_id", "stub_id"))
    dead = store_rows.where(F.col("kind") == DLQ)
    for column in ("unique_key", "origin_message_id"):  # null ids never match: kept
        dead = dead.join(ids, F.col(column) == F.col("stub_id"), "left_anti")
    created = F.timestamp_millis("store_timestamp_ms")
    return (dead.select(
        F.coalesce("unique_key", "origin_message_id",
                   F.concat(F.lit("position "), F.col("log_position").cast("string"))
                   ).alias("message_id"),
        F.lit(C.DLQ_WITHOUT_STUB.value).alias("classification"),
        F.coalesce("original_topic", "topic").alias("topic"), "consumer_group", "queue_id",
        "queue_offset", F.lit(None).cast("string").alias("status"),
        F.lit(None).cast("int").alias("send_count"), created.alias("created_at"),
        F.format_string(DLQ_WITHOUT_STUB_DETAIL, F.col("consumer_group"),
                        text_column(F.col("reason"), "reason")).alias("detail"))
        .dropDuplicates(["message_id", "consumer_group"]))


def _unify(*frames: DataFrame) -> DataFrame:
    """One frame; times as wall-clock UTC without a zone (``timestamp_ntz``), so they come back
    to Python as the naive UTC datetimes they are, whatever the local time zone."""
    columns = [name for name in CLASSIFICATION_COLUMNS if name != "hour"]
    unified = None
    for frame in frames:
        part = frame.withColumn("created_at", F.col("created_at").cast("timestamp_ntz"))
        unified = part.select(*columns) if unified is None else unified.unionByName(
            part.select(*columns))
    assert unified is not None  # called with the frames of every input
    hour = F.date_trunc("hour", F.col("created_at")).cast("timestamp_ntz")
    return unified.withColumn("hour", hour).select(*CLASSIFICATION_COLUMNS)


__all__ = ["CLASSIFICATION_COLUMNS", "classify"]
