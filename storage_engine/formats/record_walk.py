"""A walk over consecutive valid records that picks out a few by topic or by a property.

The loop of a scan that validates every record of a segment and keeps only a handful (the
reconciliation's store scan, ``spark_reconcile.store_decode``): :func:`walk_records` steps
from record to record while :func:`~.record.check_record` calls each one a message, and
collects the positions of those whose topic starts with one of the given prefixes, or whose
topic is not the skipped one and whose raw properties contain a given mark. The caller decodes
only the collected records.

The contract, which the native engine's ``walk_records`` (``native/src/record_walk.rs``)
shares: every record before ``stop`` is a message, and the positions returned are exactly the
matching records among them. This reference stops only at the first record that is not a
message (a blank, the end of data, corruption); a faster implementation may stop earlier, at
any record outside its fast path, so the caller checks the record at ``stop`` itself
(:func:`~.record.check_record`) and walks on from the next one when it is a message.

Pure: reads ``buf``, keeps no state; thread-safe.
"""

from __future__ import annotations

from .record import RecordBuffer, RecordKind, check_record, topic_and_properties


def walk_records(buf: RecordBuffer, position: int, limit: int, check_crc: bool,
                 topic_prefixes: tuple[bytes, ...], property_mark: bytes,
                 skip_topic: bytes) -> tuple[list[int], int]:
    """Walk the valid records from ``position``; return ``(matching positions, stop)``.

    A record matches when its topic starts with one of ``topic_prefixes``, or when its topic
    is not ``skip_topic`` and its raw properties contain ``property_mark``. ``stop`` is the
    position of the first record not walked: here, the first that is not a message.
    """
    found: list[int] = []
    while True:
        check = check_record(buf, position, limit, check_crc=check_crc)
        if check.kind != RecordKind.MESSAGE:
            return found, position
        topic, raw_properties = topic_and_properties(buf, position)
        if topic.startswith(topic_prefixes) or (
                topic != skip_topic and property_mark in raw_properties):
            found.append(position)
        position += check.size


__all__ = ["walk_records"]
