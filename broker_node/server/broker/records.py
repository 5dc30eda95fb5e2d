"""Messages between the remoting wire and the store. Pure.

* ``message_from_wire``: a send's properties string (``name`` U+0001 ``value`` U+0002 …) and
  body become a ``storage_engine`` ``Message``: ``TAGS``, ``KEYS`` and ``UNIQ_KEY`` become its
  tags, keys and unique key; every other property is kept as sent (``WAIT``, ``DELAY``,
  ``RECONSUME_TIME`` …: RocketMQ's clients set them, the broker reads them), except the store's
  own integrity property, which only the store writes. The born host is the connection's peer.
* ``decode_batch``: the body of SEND_BATCH_MESSAGE (320), entries back to back (reference §2.6:
  TOTALSIZE, MAGICCODE, BODYCRC, FLAG, BODY with an int32 length, PROPERTIES with an int16
  length; the header's topic applies to all), every length checked against the bytes present,
  at most ``BATCH_ENTRIES_MAX`` entries.
* ``encode_view``: a stored message as the stored-record layout a pull, VIEW_MESSAGE_BY_ID or
  QUERY_MESSAGE body carries, byte for byte what the commit log holds.
"""

from __future__ import annotations

import struct

from postbox.network.protocol.codes import ResponseCode
from postbox.storage_engine.contract.message import Message
from postbox.storage_engine.formats import (
    PROPERTY_CRC_NAME,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    MessageView,
    decode_properties,
    encode_record_parts,
)

from ..errors import RequestRefusedError

BATCH_ENTRIES_MAX = 4096
"""Most entries in one SEND_BATCH_MESSAGE (the frame limit bounds the bytes)."""
_ENTRY_HEAD = struct.Struct(">iiiii")  # total size, magic, body crc, flag, body length
_I16 = struct.Struct(">h")


class BatchEntry:
    """One message of a batch body: its user flag, body and properties."""

    __slots__ = ("body", "flag", "properties")

    def __init__(self, flag: int, body: bytes, properties: dict[str, str]) -> None:
        self.flag, self.body, self.properties = flag, body, properties


def properties_from_wire(text: str | None) -> dict[str, str]:
    """The properties of a send header (``None``: none)."""
    if not text:
        return {}
    if "\x01" not in text:
        raise RequestRefusedError(ResponseCode.MESSAGE_ILLEGAL,
                                  "properties are not name\\u0001value\\u0002 pairs")
    return decode_properties(text)


def message_from_wire(topic: str, body: bytes, properties: dict[str, str], *, flag: int,
                      sys_flag: int, born_timestamp_ms: int, born_host: str,
                      reconsume_count: int) -> Message:
    """A ``Message`` to store from what a send carries."""
    user = dict(properties)
    user.pop(PROPERTY_CRC_NAME, None)
    tags = user.pop(PROPERTY_TAGS, None)
    keys = user.pop(PROPERTY_KEYS, None)
    unique_key = user.pop(PROPERTY_UNIQ_KEY, None)
    return Message(topic, body, tags=tags, keys=keys or None, properties=user,
                   unique_key=unique_key, flag=flag, born_timestamp_ms=born_timestamp_ms,
                   born_host=born_host, reconsume_count=reconsume_count,
                   sys_flag=sys_flag & ~0x30)


def decode_batch(body: bytes) -> list[BatchEntry]:
    """The entries of a batch body; ``RequestRefusedError`` (13 MESSAGE_ILLEGAL) on bad bytes."""
    entries: list[BatchEntry] = []
    view = memoryview(body)
    at = 0
    while at < len(view):
        if len(entries) >= BATCH_ENTRIES_MAX:
            raise _bad_batch(f"more than {BATCH_ENTRIES_MAX} entries")
        if len(view) - at < _ENTRY_HEAD.size + 2:
            raise _bad_batch(f"entry {len(entries)} is cut short at byte {at}")
        total, _magic, _crc, flag, body_length = _ENTRY_HEAD.unpack_from(view, at)
        body_start = at + _ENTRY_HEAD.size
        if not 0 <= body_length <= len(view) - body_start - 2:
            raise _bad_batch(f"entry {len(entries)}: body length {body_length} runs past the "
                             "batch")
        (properties_length,) = _I16.unpack_from(view, body_start + body_length)
        properties_start = body_start + body_length + 2
        end = properties_start + properties_length
        if properties_length < 0 or end > len(view) or total != end - at:
            raise _bad_batch(f"entry {len(entries)}: sizes do not add up (total {total})")
        try:
            text = bytes(view[properties_start:end]).decode()
        except UnicodeDecodeError:
            raise _bad_batch(f"entry {len(entries)}: properties are not UTF-8") from None
        entries.append(BatchEntry(flag, bytes(view[body_start:body_start + body_length]),
                                  properties_from_wire(text)))
        at = end
    if not entries:
        raise _bad_batch("the batch is empty")
    return entries


def _bad_batch(problem: str) -> RequestRefusedError:
    return RequestRefusedError(ResponseCode.MESSAGE_ILLEGAL, f"batch body: {problem}")


def encode_view(view: MessageView) -> bytes:
    """The stored record of ``view`` (the bytes the commit log holds)."""
    return encode_record_parts(
        view.topic.encode(), view.is_v2, view.body, view.properties_bytes, view.queue_id,
        view.flag, view.queue_offset, view.log_position, view.sys_flag,
        view.born_timestamp_ms, view.raw_born_host, view.store_timestamp_ms,
        view.raw_store_host, view.reconsume_count, view.prepared_transaction_position,
        view.body_crc)


def encode_views(views: list[MessageView]) -> bytes:
    """Stored records back to back."""
    return b"".join(encode_view(view) for view in views)
