"""Stored records in a broker's answer (pull, QUERY_MESSAGE, VIEW_MESSAGE_BY_ID) as views.

A body is records back to back, each exactly its TOTALSIZE (reference §2.6), in the commit-log
layout the store writes, so they decode with ``storage_engine.formats`` into the same
``MessageView`` the embedded broker returns. Each record is checked (``check_record``: magic,
sizes, field bounds) before it is decoded; a body that does not split into whole records raises
``RecordsError`` (the caller's request fails; nothing is skipped silently).

Records a Java producer compressed (sysFlag bit 0x1, ZLIB; reference §2.6) are inflated and the
compression bits cleared, as RocketMQ's clients do; LZ4/ZSTD records raise ``RecordsError``
naming the codec. With a namespace, the topic and the ``RETRY_TOPIC`` property come back without
it (``NS%orders`` → ``orders``), so the application sees its own names.

Pure; safe from any thread.
"""

from __future__ import annotations

import zlib

from storage_engine.formats import (
    PROPERTY_RETRY_TOPIC,
    MessageView,
    decode_properties,
    encode_properties,
)
from storage_engine.formats.record import RecordKind, check_record, unpack_record

from .errors import RemotingClientError
from .naming import Namespace

_COMPRESSED = 0x1
_COMPRESSION_TYPE = 0x700
_ZLIB_TYPES = (0x0, 0x300)
_TOPIC_FIELD = 15
_PROPERTIES_FIELD = 16
_BODY_FIELD = 14
_SYS_FLAG_FIELD = 7
_NO_NAMESPACE = Namespace("")


class RecordsError(RemotingClientError):
    """A broker's answer holds bytes that are not whole, well-formed records."""


def decode_records(body: bytes, namespace: Namespace = _NO_NAMESPACE) -> list[MessageView]:
    """Every record of ``body``, in order, as the application sees it."""
    views: list[MessageView] = []
    position, limit = 0, len(body)
    while position < limit:
        check = check_record(body, position, limit, check_crc=False)
        if check.kind != RecordKind.MESSAGE:
            raise RecordsError(f"record {len(views)} at byte {position} of a {limit}-byte "
                               f"answer: {check.kind} {check.reason}".rstrip())
        views.append(_view(body, position, namespace))
        position += check.size
    return views


def _view(body: bytes, position: int, namespace: Namespace) -> MessageView:
    fields = unpack_record(body, position)
    sys_flag = fields[_SYS_FLAG_FIELD]
    if not sys_flag & _COMPRESSED and not namespace.name:
        return MessageView(fields)
    values = list(fields)
    if sys_flag & _COMPRESSED:
        values[_BODY_FIELD] = _inflate(fields[_BODY_FIELD], sys_flag)
        values[_SYS_FLAG_FIELD] = sys_flag & ~(_COMPRESSED | _COMPRESSION_TYPE)
    if namespace.name:
        topic = fields[_TOPIC_FIELD].decode("utf-8")
        values[_TOPIC_FIELD] = namespace.unwrap(topic).encode("utf-8")
        properties = decode_properties(fields[_PROPERTIES_FIELD])
        retry_topic = properties.get(PROPERTY_RETRY_TOPIC)
        if retry_topic is not None and namespace.owns(retry_topic):
            properties[PROPERTY_RETRY_TOPIC] = namespace.unwrap(retry_topic)
            values[_PROPERTIES_FIELD] = encode_properties(properties)
    return MessageView(tuple(values))


def _inflate(data: bytes, sys_flag: int) -> bytes:
    codec = sys_flag & _COMPRESSION_TYPE
    if codec not in _ZLIB_TYPES:
        name = {0x100: "LZ4", 0x200: "ZSTD"}.get(codec, hex(codec))
        raise RecordsError(f"a record is compressed with {name}; only ZLIB is supported")
    try:
        return zlib.decompress(data)
    except zlib.error as error:
        raise RecordsError(f"a compressed record does not inflate: {error}") from error
