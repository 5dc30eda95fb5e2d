"""From the classification and the inputs to the small figures the report shows."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from .inputs import Inputs
from .outputs import SAMPLE_CLASSES, SAMPLES_PER_CLASS, fill_counts
from .results import (
    ClassCount,
    GroupRetries,
    QueueLag,
    ReconcileSummary,
    Sample,
    StoreProblem,
    TopicResends,
)
from .store_decode import DLQ, PROBLEM, RETRY


def summarise(summary: ReconcileSummary, classified: DataFrame, inputs: Inputs) -> None:
    """Fill ``summary``'s counts, breakdowns, lag, resends, retries, samples and problems."""
    finest = classified.groupBy("classification", "topic", "consumer_group", "hour").count()
    fill_counts(summary, [
        ClassCount(row["classification"], row["count"], row["topic"], row["consumer_group"],
                   row["hour"]) for row in finest.collect()])
    summary.lag = _lag(inputs)
    summary.resends = _resends(inputs.stubs)
    summary.retries = _retries(inputs.store_rows)
    summary.samples = _samples(classified)
    summary.problems.extend(_problems(inputs))
    summary.complete = not summary.problems


def _lag(inputs: Inputs) -> list[QueueLag]:
    ends = inputs.extents.groupBy("topic", "queue_id").agg(F.max("max_offset").alias("end"))
    rows = (inputs.offsets.join(ends, ["topic", "queue_id"], "left")
            .orderBy("topic", "consumer_group", "queue_id").collect())
    return [QueueLag(row["topic"], row["consumer_group"], row["queue_id"],
                     row["committed_offset"],
                     row["end"] if row["end"] is not None else row["committed_offset"])
            for row in rows]


def _resends(stubs: DataFrame) -> list[TopicResends]:
    rows = (stubs.groupBy("topic").agg(
        F.count(F.lit(1)).alias("stubs"),
        F.sum(F.when(F.col("send_count") > 1, 1).otherwise(0)).alias("resent"),
        F.sum(F.greatest(F.col("send_count") - 1, F.lit(0))).alias("resends"),
        F.max("send_count").alias("send_count_max")).orderBy("topic").collect())
    return [TopicResends(row["topic"], row["stubs"], row["resent"] or 0, row["resends"] or 0,
                         row["send_count_max"] or 0) for row in rows]


def _retries(store_rows: DataFrame) -> list[GroupRetries]:
    rows = (store_rows.where(F.col("kind").isin(RETRY, DLQ)).groupBy("consumer_group").agg(
        F.sum(F.when(F.col("kind") == RETRY, 1).otherwise(0)).alias("retries"),
        F.sum(F.when(F.col("kind") == DLQ, 1).otherwise(0)).alias("dead"))
        .orderBy("consumer_group").collect())
    return [GroupRetries(row["consumer_group"], row["retries"], row["dead"]) for row in rows]


def _samples(classified: DataFrame) -> list[Sample]:
    wanted = classified.where(F.col("classification").isin(*(c.value for c in SAMPLE_CLASSES)))
    by_class = Window.partitionBy("classification").orderBy("created_at", "message_id")
    ranked = wanted.withColumn("rank", F.row_number().over(by_class))
    rows = (ranked.where(F.col("rank") <= SAMPLES_PER_CLASS)
            .orderBy("classification", "rank").collect())
    return [Sample(row["classification"], row["message_id"], row["topic"],
                   row["consumer_group"], row["queue_id"], row["queue_offset"], row["detail"])
            for row in rows]


def _problems(inputs: Inputs) -> list[StoreProblem]:
    segment_rows = inputs.store_rows.where(F.col("kind") == PROBLEM).collect()
    queue_rows = inputs.extents.where(F.col("problem").isNotNull()).collect()
    return ([StoreProblem(row["file"], row["reason"], row["log_position"])
             for row in segment_rows]
            + [StoreProblem(row["file"], row["problem"]) for row in queue_rows])


__all__ = ["summarise"]
