"""The classification of ``classify`` / ``classify_groups`` over Arrow columns, by the shared
rules (``rules``): the Python engine's core. Each rule's condition is a boolean column, the
first that holds picks the class, and the first matching detail of that class writes the text
(filled only on the rows it explains); the joins of the Spark job are the lookups of
``python_facts``. The result has the columns of
``CLASSIFICATION_COLUMNS`` (``COLUMNS`` here; that module needs PySpark)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc

from .arrow_text import Column, as_array, fill_template
from .classes import ALL_CLASSES
from .classes import MessageClass as C
from .outputs import SAMPLE_CLASSES, SAMPLES_PER_CLASS
from .python_facts import Facts, Lookup, Tables, pair_keys
from .rules import (
    ALWAYS,
    DLQ_WITHOUT_STUB_DETAIL,
    GROUP_DETAILS,
    GROUP_RULES,
    ORPHAN_LOG_DETAIL,
    STUB_DETAILS,
    STUB_RULES,
    Detail,
    spark_text,
)
from .store_decode import DLQ, StoreRow
from .store_files import CommittedOffset

SCHEMA = pa.schema([
    ("message_id", pa.string()), ("classification", pa.string()), ("topic", pa.string()),
    ("consumer_group", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
    ("status", pa.string()), ("send_count", pa.int32()), ("created_at", pa.timestamp("us")),
    ("hour", pa.timestamp("us")), ("detail", pa.string()),
])
"""The classification's columns and types (the Spark job's)."""
COLUMNS = tuple(SCHEMA.names)
"""``classify.CLASSIFICATION_COLUMNS``."""

EPOCH = datetime.fromtimestamp(0, UTC).replace(tzinfo=None)

Holds = Mapping[str, Column]


def classify(tables: Tables, offsets: Iterable[CommittedOffset], store_rows: list[StoreRow],
             as_of: datetime, grace_ms: int, known_ids: Column | None = None) -> pa.Table:
    """Every output row: per stub (per expected group), orphan log, dead letter without stub.

    ``known_ids``: every stub id there is (default: those of ``tables.stubs``), for the rows
    without a stub — an incremental run reads only some stubs."""
    facts = Facts(tables, offsets, store_rows)
    cutoff = pa.scalar(as_of - timedelta(milliseconds=grace_ms), pa.timestamp("us"))
    stubs = _resolve_offsets(tables.stubs, facts.delivered)
    fanned = pc.is_valid(stubs["expected_groups"])
    ids = stubs["message_id"] if known_ids is None else known_ids
    parts = [_plain_rows(stubs.filter(pc.invert(fanned)), facts, cutoff),
             _group_rows(stubs.filter(fanned), facts, cutoff),
             _orphan_logs(tables.logs, ids), _dead_letters_without_stub(store_rows, ids)]
    rows = pa.concat_tables([part for part in parts if part.num_rows] or parts[:1])
    hour = pc.floor_temporal(rows["created_at"], unit="hour")
    return rows.add_column(COLUMNS.index("hour"), "hour", hour).select(COLUMNS)


def _resolve_offsets(stubs: pa.Table, delivered: Lookup) -> pa.Table:
    """A delayed stub without an offset takes its delivered copy's queue and offset."""
    if not len(delivered.keys):
        return stubs
    keys = pair_keys(stubs["message_id"], stubs["topic"])
    for name in ("queue_id", "queue_offset"):
        resolved = pc.coalesce(stubs[name], delivered.get(keys, name))
        stubs = stubs.set_column(stubs.schema.get_field_index(name), name, resolved)
    return stubs


def _since(stubs: pa.Table) -> Column:
    return pc.coalesce(stubs["overtaken_at"], stubs["published_at"], stubs["updated_at"],
                       stubs["created_at"])


def _pending_holds(stubs: pa.Table) -> dict[str, Column]:
    offset_missing = pc.is_null(stubs["queue_offset"])
    unsent = pc.or_kleene(pc.equal(stubs["send_count"], 0), pc.is_null(stubs["published_at"]))
    return {"unpublished": pc.and_kleene(offset_missing, unsent),
            "undelivered": offset_missing}


def _past(stubs: pa.Table, facts: Facts) -> Lookup:
    """Per unconfirmed stub with an offset: the first group committed past it without
    processing it, and the furthest such commit."""
    waiting = stubs.filter(pc.and_(pc.equal(stubs["status"], "unconfirmed"),
                                   pc.is_valid(stubs["queue_offset"])))
    joined = waiting.select(["message_id", "topic", "queue_id", "queue_offset"]).join(
        facts.offsets, keys=["topic", "queue_id"], join_type="inner")
    joined = joined.filter(pc.greater(joined["offset"], joined["queue_offset"]))
    processed = facts.processed(joined["message_id"])
    unprocessed = pc.invert(processed.has(pair_keys(joined["consumer_group"],
                                                    joined["message_id"])))
    past = joined.filter(unprocessed).group_by("message_id").aggregate(
        [("consumer_group", "min"), ("offset", "max")])
    return Lookup(past["message_id"].combine_chunks(),
                  {"group": past["consumer_group_min"].combine_chunks(),
                   "committed": past["offset_max"].combine_chunks()})


def _plain_rows(stubs: pa.Table, facts: Facts, cutoff: pa.Scalar) -> pa.Table:
    ids, status = stubs["message_id"], stubs["status"]
    dlq_group, retry_group = facts.dead.get(ids, "group"), facts.retry.get(ids, "group")
    log_group = facts.logged.get(ids, "group")
    past = _past(stubs, facts)
    past_group = past.get(ids, "group")
    since = _since(stubs)
    holds = {"confirmed": pc.equal(status, "confirmed"), "dead_lettered": pc.is_valid(dlq_group),
             "void": pc.equal(status, "void"),
             "logged_or_retried": pc.or_(pc.is_valid(log_group), pc.is_valid(retry_group)),
             "lost": _lost(pc.is_valid(past_group), since, cutoff),
             "logged": pc.is_valid(log_group), "overtaken": pc.is_valid(past_group),
             **_pending_holds(stubs)}
    kind = first_class(STUB_RULES, holds)
    group = pc.case_when(_struct([pc.equal(kind, ALL_CLASSES.index(c)) for c in (
        C.DEAD_LETTERED, C.IN_FLIGHT, C.LOST, C.PENDING)]),
        dlq_group, pc.coalesce(log_group, retry_group), past_group, past_group)
    values = {name: stubs[name] for name in stubs.column_names} | {
        "dlq_group": dlq_group, "dlq_reason": facts.dead.get(ids, "reason"),
        "log_group": log_group, "retry_group": retry_group, "past_group": past_group,
        "past_committed": past.get(ids, "committed"), "since": since}
    return _rows(stubs, kind, group, details(STUB_DETAILS, kind, holds, values.__getitem__))


def _group_rows(stubs: pa.Table, facts: Facts, cutoff: pa.Scalar) -> pa.Table:
    """One row per (stub, expected group): the groups split at runs of spaces."""
    named = pc.split_pattern_regex(pc.utf8_trim_whitespace(stubs["expected_groups"]),
                                   pattern=" +")
    rows = stubs.take(pc.list_parent_indices(named)).append_column(
        "consumer_group", pc.list_flatten(named))
    rows = rows.join(facts.offsets, keys=["topic", "consumer_group", "queue_id"],
                     join_type="left outer").rename_columns(
        {"offset": "committed_offset"}).combine_chunks()
    keys = pair_keys(rows["consumer_group"], rows["message_id"])
    status, offset = rows["status"], rows["queue_offset"]
    committed = rows["committed_offset"]
    past = pc.fill_null(pc.greater(committed, offset), False)
    since = _since(rows)
    logged = facts.logged_pairs.has(keys)
    processed = facts.processed(rows["message_id"])
    holds = {"confirmed": pc.or_(processed.has(keys), pc.equal(status, "confirmed")),
             "dead_lettered": facts.dead_by_group.has(keys), "void": pc.equal(status, "void"),
             "logged_or_retried": pc.or_(logged, facts.retry_by_group.has(keys)),
             "lost": _lost(past, since, cutoff), "logged": logged, "overtaken": past,
             **_pending_holds(rows)}
    kind = first_class(GROUP_RULES, holds)
    values = {name: rows[name] for name in rows.column_names} | {
        "dlq_reason": facts.dead_by_group.get(keys, "reason"), "since": since}
    return _rows(rows, kind, rows["consumer_group"],
                 details(GROUP_DETAILS, kind, holds, values.__getitem__))


def _lost(past: Column, since: Column, cutoff: pa.Scalar) -> Column:
    return pc.fill_null(pc.and_(past, pc.less_equal(since, cutoff)), False)


def _struct(conditions: list[Column]) -> pa.StructArray:
    filled = [pc.fill_null(condition, False) for condition in conditions]
    return pc.make_struct(*filled, field_names=[str(n) for n in range(len(filled))])


def first_class(rules: tuple[tuple[C, str], ...], holds: Holds) -> Column:
    """For every row, the class of the first rule whose condition holds (``ALWAYS`` always
    does), as its number in ``ALL_CLASSES`` (``class_names`` turns numbers into names)."""
    conditions = [holds[condition] for _, condition in rules if condition != ALWAYS]
    codes = [pa.scalar(ALL_CLASSES.index(kind), pa.int8()) for kind, _ in rules]
    return pc.case_when(_struct(conditions), *codes)


def class_names(codes: Column) -> Column:
    """The class names of ``first_class``'s numbers."""
    return pc.take(pa.array([kind.value for kind in ALL_CLASSES], pa.string()), codes)


def details(details: tuple[Detail, ...], kind: Column, holds: Holds,
            value: Callable[[str], Column]) -> Column:
    """For every row (``kind``: ``first_class``'s numbers), the first detail of its class
    whose condition holds, its ``%s`` filled with the named values as ``rules.spark_text``
    writes them; each detail's text is built only on the rows it explains."""
    text: Column = pa.nulls(len(kind), pa.string())
    for detail in details:
        mask = pc.equal(kind, pa.scalar(ALL_CLASSES.index(detail.classification), pa.int8()))
        if detail.condition != ALWAYS:
            mask = pc.and_(mask, pc.fill_null(holds[detail.condition], False))
        mask = as_array(pc.and_(pc.fill_null(mask, False), pc.is_null(text)))
        count = pc.sum(mask).as_py() or 0
        if count:
            values = {name: value(name).filter(mask) for name in detail.values}
            text = pc.replace_with_mask(as_array(text), mask, as_array(
                fill_template(detail.template, detail.values, values, count)))
    return text


def _rows(source: pa.Table, kind: Column, group: Column, detail: Column) -> pa.Table:
    return _table({"message_id": source["message_id"], "classification": class_names(kind),
                   "topic": source["topic"], "consumer_group": group,
                   "queue_id": source["queue_id"], "queue_offset": source["queue_offset"],
                   "status": source["status"], "send_count": source["send_count"],
                   "created_at": source["created_at"], "detail": detail}, source.num_rows)


def _table(columns: Mapping[str, Column | None], length: int) -> pa.Table:
    """The classification's columns but ``hour``, cast to their types (None: all null)."""
    fields = [f for f in SCHEMA if f.name != "hour"]
    return pa.table([pa.nulls(length, f.type) if columns[f.name] is None
                     else pc.cast(columns[f.name], f.type) for f in fields],
                    schema=pa.schema(fields))


def _present(ids: Column, stub_ids: Column) -> Column:
    """Which of ``ids`` are stub ids; the set hashed is ``ids`` (few), not every stub id."""
    unique = pc.unique(ids)
    found = pc.filter(stub_ids, pc.is_in(stub_ids, value_set=unique))
    return pc.is_in(ids, value_set=found)


def _orphan_logs(logs: pa.Table, stub_ids: Column) -> pa.Table:
    orphans = logs.filter(pc.invert(_present(logs["message_id"], stub_ids)))
    group = orphans["consumer_group"]
    return _table({"message_id": orphans["message_id"],
                   "classification": pa.array([C.ORPHAN_LOG.value] * orphans.num_rows),
                   "topic": orphans["topic"], "consumer_group": group,
                   "queue_id": orphans["queue_id"], "queue_offset": orphans["queue_offset"],
                   "status": None, "send_count": None, "created_at": orphans["created_at"],
                   "detail": fill_template(ORPHAN_LOG_DETAIL, ("consumer_group",),
                                           {"consumer_group": group}, orphans.num_rows)},
                  orphans.num_rows)


def _dead_letters_without_stub(store_rows: list[StoreRow], stub_ids: Column) -> pa.Table:
    named = sorted({message_id for row in store_rows if row.kind == DLQ
                    for message_id in (row.unique_key, row.origin_message_id) if message_id})
    found = pa.array(named, pa.string())
    known = set(found.filter(_present(found, stub_ids)).to_pylist())
    rows: dict[tuple, dict] = {}
    for row in store_rows:
        if row.kind != DLQ or row.unique_key in known or row.origin_message_id in known:
            continue
        message_id = (row.unique_key or row.origin_message_id
                      or f"position {row.log_position}")
        rows.setdefault((message_id, row.consumer_group), {
            "message_id": message_id, "classification": C.DLQ_WITHOUT_STUB.value,
            "topic": row.original_topic or row.topic, "consumer_group": row.consumer_group,
            "queue_id": row.queue_id, "queue_offset": row.queue_offset, "status": None,
            "send_count": None, "created_at": utc_from_millis(row.store_timestamp_ms),
            "detail": DLQ_WITHOUT_STUB_DETAIL % (spark_text(row.consumer_group),
                                                 spark_text(row.reason, "no reason recorded"))})
    listed = list(rows.values())
    return _table({f.name: pa.array([row[f.name] for row in listed], f.type)
                   for f in SCHEMA if f.name != "hour"}, len(listed))


def utc_from_millis(millis: int | None) -> datetime | None:
    """A store timestamp as a naive-UTC time (Spark's ``timestamp_millis`` in UTC)."""
    return None if millis is None else EPOCH + timedelta(milliseconds=millis)


def samples(rows: pa.Table) -> list:
    """The first ``SAMPLES_PER_CLASS`` rows of each alarming class, by (created, id)."""
    from .results import Sample

    found: list[Sample] = []
    for kind in sorted(c.value for c in SAMPLE_CLASSES):
        chosen = rows.filter(pc.equal(rows["classification"], kind))
        chosen = chosen.append_column("dated", pc.is_valid(chosen["created_at"])).sort_by(
            [("dated", "ascending"), ("created_at", "ascending"), ("message_id", "ascending")]
        ).slice(0, SAMPLES_PER_CLASS)
        found += [Sample(row["classification"], row["message_id"], row["topic"],
                         row["consumer_group"], row["queue_id"], row["queue_offset"],
                         row["detail"]) for row in chosen.to_pylist()]
    return found


__all__ = ["COLUMNS", "SCHEMA", "Tables", "classify", "details", "first_class", "samples",
           "utc_from_millis"]
