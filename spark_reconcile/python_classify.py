"""The classification of ``classify`` / ``classify_groups`` over plain Python rows, by the
shared rules (``rules``): the Python engine's core. Rows are dicts with the columns of
``CLASSIFICATION_COLUMNS``; the joins of the Spark job are dict lookups here."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .classes import MessageClass as C
from .outputs import SAMPLE_CLASSES, SAMPLES_PER_CLASS
from .rules import (
    DLQ_WITHOUT_STUB_DETAIL,
    GROUP_DETAILS,
    GROUP_RULES,
    ORPHAN_LOG_DETAIL,
    STUB_DETAILS,
    STUB_RULES,
    detail_text,
    first_class,
    spark_text,
)
from .store_decode import DELIVERED, DLQ, RETRY
from .store_files import CommittedOffset

COLUMNS = ("message_id", "classification", "topic", "consumer_group", "queue_id",
           "queue_offset", "status", "send_count", "created_at", "hour", "detail")
"""``classify.CLASSIFICATION_COLUMNS`` (that module needs PySpark)."""


EPOCH = datetime.fromtimestamp(0, UTC).replace(tzinfo=None)


@dataclass
class Tables:
    """The outbox tables' rows (dicts of the exported columns)."""

    stubs: list[dict]
    logs: list[dict]
    processed: list[dict]


class _Facts:
    """What the joins of the Spark job find, as lookups."""

    def __init__(self, tables: Tables, offsets: Iterable[CommittedOffset], store_rows: list
                 ) -> None:
        self.delivered: dict[tuple, tuple] = {}
        self.dead: dict[str, tuple] = {}       # id -> (min group, max reason)
        self.retry: dict[str, tuple] = {}
        self.dead_by_group: dict[tuple, str | None] = {}   # (group, id) -> max reason
        self.retry_by_group: dict[tuple, str | None] = {}
        for row in store_rows:
            if row.kind == DELIVERED:
                key = (row.unique_key, row.topic)
                self.delivered[key] = max(self.delivered.get(key, (-1, -1)),
                                          (row.queue_offset, row.queue_id))
            elif row.kind in (DLQ, RETRY):
                by_id, by_group = ((self.dead, self.dead_by_group) if row.kind == DLQ
                                   else (self.retry, self.retry_by_group))
                for message_id in {row.unique_key, row.origin_message_id} - {None}:
                    _keep(by_id, message_id, row.consumer_group, row.reason)
                    key = (row.consumer_group, message_id)
                    by_group[key] = _max(by_group.get(key), row.reason)
        self.logged: dict[str, str] = {}
        for log in tables.logs:
            group = self.logged.get(log["message_id"])
            self.logged[log["message_id"]] = _min(group, log["consumer_group"])
        self.logged_pairs = {(log["consumer_group"], log["message_id"]) for log in tables.logs}
        self.processed = {(row["consumer_group"], row["message_id"]) for row in tables.processed}
        self.offsets: dict[tuple, list[tuple[str, int]]] = {}
        self.committed: dict[tuple, int] = {}
        for offset in offsets:
            self.offsets.setdefault((offset.topic, offset.queue_id), []).append(
                (offset.consumer_group, offset.offset))
            self.committed[(offset.topic, offset.consumer_group, offset.queue_id)] = offset.offset


def _keep(found: dict, message_id: str, group: str | None, reason: str | None) -> None:
    group_before, reason_before = found.get(message_id, (None, None))
    found[message_id] = (_min(group_before, group), _max(reason_before, reason))


def _min(a, b):
    return b if a is None else a if b is None else min(a, b)


def _max(a, b):
    return b if a is None else a if b is None else max(a, b)


def classify(tables: Tables, offsets: Iterable[CommittedOffset], store_rows: list,
             as_of: datetime, grace_ms: int, known_ids: set[str] | None = None) -> list[dict]:
    """Every output row: per stub (per expected group), orphan log, dead letter without stub.

    ``known_ids``: every stub id there is (default: those of ``tables.stubs``), for the rows
    without a stub — an incremental run reads only some stubs."""
    facts = _Facts(tables, offsets, store_rows)
    cutoff = as_of - timedelta(milliseconds=grace_ms)
    rows: list[dict] = []
    for stub in tables.stubs:
        stub = _resolve_offset(stub, facts)
        if stub["expected_groups"] is None:
            rows.append(_plain_row(stub, facts, cutoff))
        else:
            rows.extend(_group_row(stub, group, facts, cutoff)
                        for group in re.split(" +", stub["expected_groups"].strip()))
    stub_ids = ({stub["message_id"] for stub in tables.stubs} if known_ids is None
                else known_ids)
    rows.extend(_orphan_log(log) for log in tables.logs if log["message_id"] not in stub_ids)
    rows.extend(_dead_letters_without_stub(store_rows, stub_ids))
    for row in rows:
        created = row["created_at"]
        row["hour"] = None if created is None else created.replace(minute=0, second=0,
                                                                   microsecond=0)
    return rows


def _resolve_offset(stub: dict, facts: _Facts) -> dict:
    delivered = facts.delivered.get((stub["message_id"], stub["topic"]))
    if delivered is None:
        return stub
    return stub | {"queue_id": stub["queue_id"] if stub["queue_id"] is not None
                   else delivered[1],
                   "queue_offset": stub["queue_offset"] if stub["queue_offset"] is not None
                   else delivered[0]}


def _since(stub: dict) -> datetime | None:
    return next((stub[name] for name in ("overtaken_at", "published_at", "updated_at",
                                         "created_at") if stub[name] is not None), None)


def _pending_holds(stub: dict) -> dict[str, bool]:
    offset = stub["queue_offset"]
    return {"unpublished": offset is None and (stub["send_count"] == 0
                                               or stub["published_at"] is None),
            "undelivered": offset is None}


def _plain_row(stub: dict, facts: _Facts, cutoff: datetime) -> dict:
    message_id = stub["message_id"]
    dlq_group, dlq_reason = facts.dead.get(message_id, (None, None))
    retry_group = facts.retry.get(message_id, (None, None))[0]
    log_group = facts.logged.get(message_id)
    past_group, past_committed = None, None
    if (stub["status"] == "unconfirmed" and stub["queue_offset"] is not None):
        for past, committed in facts.offsets.get((stub["topic"], stub["queue_id"]), ()):
            if committed > stub["queue_offset"] and (past, message_id) not in facts.processed:
                past_group = _min(past_group, past)
                past_committed = _max(past_committed, committed)
    since = _since(stub)
    holds = {"confirmed": stub["status"] == "confirmed", "dead_lettered": dlq_group is not None,
             "void": stub["status"] == "void",
             "logged_or_retried": log_group is not None or retry_group is not None,
             "lost": past_group is not None and since is not None and since <= cutoff,
             "logged": log_group is not None, "overtaken": past_group is not None,
             **_pending_holds(stub)}
    kind = first_class(STUB_RULES, holds)
    group: str | None = {C.DEAD_LETTERED: dlq_group, C.IN_FLIGHT: log_group or retry_group,
                          C.LOST: past_group, C.PENDING: past_group}.get(kind)
    values = stub | {"dlq_group": dlq_group, "dlq_reason": dlq_reason, "log_group": log_group,
                     "retry_group": retry_group, "past_group": past_group,
                     "past_committed": past_committed, "since": since}
    return _row(stub, kind, group, detail_text(STUB_DETAILS, kind, holds, values))


def _group_row(stub: dict, group: str, facts: _Facts, cutoff: datetime) -> dict:
    key = (group, stub["message_id"])
    committed = facts.committed.get((stub["topic"], group, stub["queue_id"]))
    past = (stub["queue_offset"] is not None and committed is not None
            and committed > stub["queue_offset"])
    since = _since(stub)
    holds = {"confirmed": key in facts.processed or stub["status"] == "confirmed",
             "dead_lettered": key in facts.dead_by_group, "void": stub["status"] == "void",
             "logged_or_retried": key in facts.logged_pairs or key in facts.retry_by_group,
             "lost": past and since is not None and since <= cutoff,
             "logged": key in facts.logged_pairs, "overtaken": past, **_pending_holds(stub)}
    kind = first_class(GROUP_RULES, holds)
    values = stub | {"consumer_group": group, "dlq_reason": facts.dead_by_group.get(key),
                     "committed_offset": committed, "since": since}
    return _row(stub, kind, group, detail_text(GROUP_DETAILS, kind, holds, values))


def _row(stub: dict, kind: C, group: str | None, detail: str) -> dict:
    return {"message_id": stub["message_id"], "classification": kind.value,
            "topic": stub["topic"], "consumer_group": group, "queue_id": stub["queue_id"],
            "queue_offset": stub["queue_offset"], "status": stub["status"],
            "send_count": stub["send_count"], "created_at": stub["created_at"],
            "detail": detail}


def _orphan_log(log: dict) -> dict:
    return {"message_id": log["message_id"], "classification": C.ORPHAN_LOG.value,
            "topic": log["topic"], "consumer_group": log["consumer_group"],
            "queue_id": log["queue_id"], "queue_offset": log["queue_offset"], "status": None,
            "send_count": None, "created_at": log["created_at"],
            "detail": ORPHAN_LOG_DETAIL % spark_text(log["consumer_group"])}


def _dead_letters_without_stub(store_rows: list, stub_ids: set[str]) -> list[dict]:
    rows: dict[tuple, dict] = {}
    for row in store_rows:
        if row.kind != DLQ or row.unique_key in stub_ids or row.origin_message_id in stub_ids:
            continue
        message_id = (row.unique_key or row.origin_message_id
                      or f"position {row.log_position}")
        rows.setdefault((message_id, row.consumer_group), {
            "message_id": message_id, "classification": C.DLQ_WITHOUT_STUB.value,
            "topic": row.original_topic or row.topic, "consumer_group": row.consumer_group,
            "queue_id": row.queue_id, "queue_offset": row.queue_offset, "status": None,
            "send_count": None,
            "created_at": utc_from_millis(row.store_timestamp_ms),
            "detail": DLQ_WITHOUT_STUB_DETAIL % (spark_text(row.consumer_group),
                                                 spark_text(row.reason, "no reason recorded"))})
    return list(rows.values())


def utc_from_millis(millis: int | None) -> datetime | None:
    """A store timestamp as a naive-UTC time (Spark's ``timestamp_millis`` in UTC)."""
    return None if millis is None else EPOCH + timedelta(milliseconds=millis)


def samples(rows: list[dict]) -> list:
    """The first ``SAMPLES_PER_CLASS`` rows of each alarming class, by (created, id)."""
    from .results import Sample

    wanted = {kind.value for kind in SAMPLE_CLASSES}
    chosen = sorted((row for row in rows if row["classification"] in wanted),
                    key=lambda row: (row["classification"], row["created_at"] is not None,
                                     row["created_at"] or datetime.min, row["message_id"]))
    found: list[Sample] = []
    taken: dict[str, int] = {}
    for row in chosen:
        if taken.get(row["classification"], 0) < SAMPLES_PER_CLASS:
            taken[row["classification"]] = taken.get(row["classification"], 0) + 1
            found.append(Sample(row["classification"], row["message_id"], row["topic"],
                                row["consumer_group"], row["queue_id"], row["queue_offset"],
                                row["detail"]))
    return found


__all__ = ["COLUMNS", "Tables", "classify", "samples", "utc_from_millis"]
