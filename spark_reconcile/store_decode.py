"""Decoding store files inside Spark tasks: one task per commit-log segment or consume-queue file.

Pure functions of a file path, run on the executors; they read through ``storage_engine.formats``
and never write. A commit-log scan validates every record (lengths and CRCs) and keeps only the
records the reconciliation needs, decoding their properties:

- ``dlq``: stored in ``%DLQ%<group>``; matched to stubs by UNIQ_KEY or ORIGIN_MESSAGE_ID.
- ``retry``: stored in ``%RETRY%<group>``: the broker is redelivering the message.
- ``delivered``: a delayed message the delay service moved to its real topic (it carries
  ``REAL_TOPIC``): gives a delayed stub its real queue offset.

The walk over the records is ``formats.engine.walk_records``: the native engine's when the
process runs it (every record validated and matched in one call per run of common-layout
records), the reference's otherwise; both give the same rows.

A record that fails validation ends the scan of its segment with a ``problem`` row (the records
after it cannot be located reliably); the other segments are scanned as usual.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from typing import NamedTuple

from postbox.storage_engine.formats import (
    CONSUME_QUEUE_UNIT_SIZE_BYTES,
    EMPTY_UNIT,
    NAME_VALUE_SEPARATOR,
    PROPERTY_DLQ_REASON,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RECONSUME_TIME,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_UNIQ_KEY,
    RecordKind,
    check_record,
    decode_properties,
    topic_and_properties,
    unpack_record,
)
from postbox.storage_engine.formats.engine import walk_records
from postbox.storage_engine.formats.topic_names import (
    DELAY_TOPIC,
    DLQ_TOPIC_PREFIX,
    RETRY_TOPIC_PREFIX,
)

DLQ = "dlq"
RETRY = "retry"
DELIVERED = "delivered"
PROBLEM = "problem"

_DLQ_PREFIX = DLQ_TOPIC_PREFIX.encode()
_RETRY_PREFIX = RETRY_TOPIC_PREFIX.encode()
_DELAY_TOPIC = DELAY_TOPIC.encode()
_REAL_TOPIC_MARK = (PROPERTY_REAL_TOPIC + NAME_VALUE_SEPARATOR).encode()
_TOPIC_PREFIXES = (_DLQ_PREFIX, _RETRY_PREFIX)


class StoreRow(NamedTuple):
    """One row of the store scan (the Spark schema is ``STORE_ROW_SCHEMA`` in ``inputs``)."""

    kind: str
    topic: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    log_position: int | None = None
    unique_key: str | None = None
    origin_message_id: str | None = None
    original_topic: str | None = None
    consumer_group: str | None = None
    store_timestamp_ms: int | None = None
    reconsume_times: int | None = None
    reason: str | None = None
    file: str | None = None


class QueueExtent(NamedTuple):
    """How far one consume-queue file is filled: ``max_offset`` is one past its last unit."""

    topic: str
    queue_id: int
    max_offset: int
    problem: str | None = None
    file: str | None = None


def scan_segment(path: str, base_position: int, check_crc: bool = True) -> Iterator[StoreRow]:
    """Yield the interesting records of one commit-log segment, then any problem found."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size == 0:
                return
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                yield from _scan(buf, size, path, base_position, check_crc)
    except OSError as error:
        yield StoreRow(PROBLEM, file=path, log_position=base_position,
                       reason=f"cannot read segment: {error}")


def _scan(buf, limit: int, path: str, base_position: int, check_crc: bool) -> Iterator[StoreRow]:
    """The rows of one segment: the walk (native when the engine is) passes over the records
    and collects the interesting ones; the record it stops at is checked here, and a message
    (one outside the walk's fast path) is taken here before the walk goes on."""
    position = 0
    while True:
        found, position = walk_records(buf, position, limit, check_crc, _TOPIC_PREFIXES,
                                       _REAL_TOPIC_MARK, _DELAY_TOPIC)
        for at in found:
            row = _interesting(buf, at)
            if row is not None:
                yield row
        check = check_record(buf, position, limit, check_crc=check_crc)
        if check.kind == RecordKind.MESSAGE:
            row = _interesting(buf, position)
            if row is not None:
                yield row
            position += check.size
        elif check.kind == RecordKind.CORRUPT:
            yield StoreRow(PROBLEM, file=path, log_position=base_position + position,
                           reason=f"corrupt record: {check.reason}; the rest of this segment "
                                  "was not read")
            return
        else:  # END or BLANK: no more records in this segment
            return


def _interesting(buf, position: int) -> StoreRow | None:
    topic, raw_properties = topic_and_properties(buf, position)
    if topic.startswith(_DLQ_PREFIX):
        kind, group = DLQ, topic[len(_DLQ_PREFIX):]
    elif topic.startswith(_RETRY_PREFIX):
        kind, group = RETRY, topic[len(_RETRY_PREFIX):]
    elif topic != _DELAY_TOPIC and _REAL_TOPIC_MARK in raw_properties:
        kind, group = DELIVERED, None
    else:
        return None
    fields = unpack_record(buf, position)
    properties = decode_properties(raw_properties)
    reconsume = properties.get(PROPERTY_RECONSUME_TIME)
    return StoreRow(
        kind, topic.decode("utf-8", "replace"), fields[3], fields[5], fields[6],
        properties.get(PROPERTY_UNIQ_KEY), properties.get(PROPERTY_ORIGIN_MESSAGE_ID) or None,
        properties.get(PROPERTY_RETRY_TOPIC), group.decode("utf-8", "replace") if group else None,
        fields[10], int(reconsume) if reconsume and reconsume.isdigit() else fields[12],
        properties.get(PROPERTY_DLQ_REASON))


def queue_extent(path: str, topic: str, queue_id: int, base_offset: int) -> QueueExtent:
    """The end of one consume-queue file: units are written in order, the tail is zeros."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        return QueueExtent(topic, queue_id, base_offset, f"cannot read: {error}", path)
    units = len(data) // CONSUME_QUEUE_UNIT_SIZE_BYTES
    problem = None
    if len(data) % CONSUME_QUEUE_UNIT_SIZE_BYTES:
        problem = f"size {len(data)} is not a multiple of {CONSUME_QUEUE_UNIT_SIZE_BYTES}"
    low, high = 0, units  # first empty unit, by bisection over the filled prefix
    while low < high:
        middle = (low + high) // 2
        start = middle * CONSUME_QUEUE_UNIT_SIZE_BYTES
        if data[start:start + CONSUME_QUEUE_UNIT_SIZE_BYTES] == EMPTY_UNIT:
            high = middle
        else:
            low = middle + 1
    return QueueExtent(topic, queue_id, base_offset + low, problem, path if problem else None)


__all__ = ["DELIVERED", "DLQ", "PROBLEM", "RETRY", "QueueExtent", "StoreRow", "queue_extent",
           "scan_segment"]
