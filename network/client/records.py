"""Stored records in a pull body, decoded into the store's own ``MessageView``.

A PULL_MESSAGE answer carries the broker's stored records back to back, each exactly its
``TOTALSIZE`` bytes (``reference/rocketmq-remoting.md`` §2.6); they are the commit-log records
the embedded store reads, so ``MessageView`` decodes them unchanged. ``decode_records`` reads
them with the store's decoder of received records (``formats.received_record``: every size is
checked against the body before it is read; a record that does not fit, has no known magic
code or whose fields do not add up to its size raises ``RecordDecodeError``, and nothing of
that body is delivered), then adapts each view to the framework's numbering:

- ``queue_id`` becomes the framework's global queue id of the topic (``routes``: the broker's
  own queue id is only unique within one broker);
- with a namespace, the topic and a ``RETRY_TOPIC`` property lose their namespace prefix, so a
  handler sees the names the application used;
- a body compressed by the producer (sysFlag 0x1; the Java producer compresses bodies over
  4 KiB with zlib) is inflated and the compression bits cleared, as RocketMQ's clients inflate
  before delivering. LZ4 and zstd bodies (RocketMQ 5 options) are delivered as stored, with a
  warning: the standard library has no codec for them.

A client must still apply the exact tag check (``formats.TagFilter.accepts``: a broker filters
by tag hash only, §9.9). Pure functions and immutable values; safe from any thread.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable
from typing import Any

from postbox.storage_engine.formats import PROPERTY_RETRY_TOPIC, SYSFLAG_COMPRESSED, MessageView
from postbox.storage_engine.formats.engine import unpack_received_records
from postbox.storage_engine.formats.received_record import RecordLayoutError

from .errors import RemotingClientError

log = logging.getLogger(__name__)

_COMPRESSION_TYPE_MASK = 0x700
_ZLIB_TYPES = (0x0, 0x300)  # no type bits (RocketMQ 4.x) or ZLIB
_FIELD_BODY, _FIELD_TOPIC = 14, 15
_FIELD_QUEUE_ID, _FIELD_SYS_FLAG = 3, 7


class RecordDecodeError(RemotingClientError):
    """A pull body whose records do not decode (sizes, magic code, compressed body)."""


def subscription_expression(tags: str | None) -> str:
    """The ``subscription`` header of a pull: the tags, or ``*`` for everything."""
    return "*" if tags is None or not tags.strip() else tags


def decode_records(body: bytes, queue_id: int, *,
                   unwrap: Callable[[str], str] | None = None) -> list[MessageView]:
    """Every record of a pull body, as views numbered with the framework's ``queue_id``.

    ``unwrap`` maps a wire topic name to the application's (a namespace); None keeps names.

    Raises:
        RecordDecodeError: a record does not fit the body or does not decode.
    """
    views: list[MessageView] = []
    try:
        records = unpack_received_records(body, 0, len(body))
    except RecordLayoutError as error:
        raise RecordDecodeError(f"pull body: {error}") from None
    for fields in records:
        if (fields[_FIELD_QUEUE_ID] != queue_id or fields[_FIELD_SYS_FLAG] & SYSFLAG_COMPRESSED
                or unwrap is not None):
            fields = _adapted(fields, queue_id, unwrap)
        view = MessageView(fields)
        if unwrap is not None:
            _unwrap_retry_topic(view, unwrap)
        views.append(view)
    return views


def _adapted(fields: tuple[Any, ...], queue_id: int,
             unwrap: Callable[[str], str] | None) -> tuple[Any, ...]:
    """``fields`` with the global queue id, an inflated body and the application's topic."""
    values = list(fields)
    values[_FIELD_QUEUE_ID] = queue_id
    sys_flag = values[_FIELD_SYS_FLAG]
    if sys_flag & SYSFLAG_COMPRESSED:
        kind = sys_flag & _COMPRESSION_TYPE_MASK
        if kind in _ZLIB_TYPES:
            try:
                values[_FIELD_BODY] = zlib.decompress(values[_FIELD_BODY])
            except zlib.error as error:
                raise RecordDecodeError(f"pull body: message at queue offset {fields[5]} is "
                                        f"marked zlib-compressed but does not inflate: "
                                        f"{error}") from None
            values[_FIELD_SYS_FLAG] = sys_flag & ~(SYSFLAG_COMPRESSED | _COMPRESSION_TYPE_MASK)
        else:
            log.warning("[pull] message at queue offset %d is compressed with codec %#x "
                        "(LZ4/zstd): delivered as stored", fields[5], kind)
    if unwrap is not None:
        topic = values[_FIELD_TOPIC].decode("utf-8", "replace")
        values[_FIELD_TOPIC] = unwrap(topic).encode("utf-8")
    return tuple(values)


def _unwrap_retry_topic(view: MessageView, unwrap: Callable[[str], str]) -> None:
    """Strip the namespace from ``RETRY_TOPIC`` in the view's (lazily decoded) properties."""
    properties = view.properties  # the view's own dict: edited before anyone else sees it
    retry = properties.get(PROPERTY_RETRY_TOPIC)
    if retry:
        properties[PROPERTY_RETRY_TOPIC] = unwrap(retry)


__all__ = ["RecordDecodeError", "decode_records", "subscription_expression"]
