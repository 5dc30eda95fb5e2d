"""Records received from outside the store (a PULL_MESSAGE answer's body), checked as they are read.

A broker answers a pull with its stored commit-log records back to back, each exactly its
TOTALSIZE bytes (reference §1.2; ``reference/rocketmq-remoting.md`` §2.6). They are input from
the network, so unlike the store's own reads (validated by ``record.check_record`` first),
``unpack_received_record`` checks every size before it reads: a record must fit before the end
of the body, have a known magic code and fields that add up to its TOTALSIZE, with the v1 topic
length read as a signed byte, as Java reads it (reference §17.4). Body CRCs are not checked.
It returns what ``record.unpack_record`` returns, so ``MessageView(fields)`` is the message.

The v1/IPv4 layout nearly every record has is checked and sliced with one header unpack;
anything else takes the general path, which names the fault. Pure.
"""

from __future__ import annotations

import struct
from typing import Any

from .constants import (
    MAGIC_V1,
    MAGIC_V2,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    TOPIC_V1_LENGTH_MAX,
)
from .record import RECORD_FIXED_OVERHEAD_BYTES, RECORD_HEADER_V4, RECORD_HEADERS, unpack_record

_SIZE = struct.Struct(">i")
_PROPS_LEN = struct.Struct(">h")


class RecordLayoutError(ValueError):
    """Received bytes that are not a well-formed record (the message says what and where)."""


def unpack_received_record(buf: bytes, position: int, end: int) -> tuple[Any, ...]:
    """The fields of the record at ``position`` of ``buf`` (records up to ``end``), as
    ``unpack_record`` returns them, once the record is known to fit and add up.

    Raises:
        RecordLayoutError: the record does not fit or does not add up.
    """
    fields = _common_fields(buf, position, end)
    return fields if fields is not None else _checked_fields(buf, position, end)


def _common_fields(buf: bytes, position: int, end: int) -> tuple[Any, ...] | None:
    """The fast path: a v1 record with IPv4 hosts that adds up exactly; None for anything else
    (``_checked_fields`` then decides, and names what is wrong)."""
    if end - position < RECORD_FIXED_OVERHEAD_BYTES:
        return None
    fields = RECORD_HEADER_V4.unpack_from(buf, position)
    size, body_length = fields[0], fields[14]
    if fields[1] != MAGIC_V1 or fields[7] & 0x30 or size > end - position or body_length < 0:
        return None
    body_start = position + RECORD_HEADER_V4.size
    topic_at = body_start + body_length
    record_end = position + size
    if topic_at + 3 > record_end:
        return None
    topic_length = buf[topic_at]
    props_at = topic_at + 1 + topic_length
    if topic_length > TOPIC_V1_LENGTH_MAX or props_at + 2 > record_end:
        return None  # a negative (signed byte) or overrunning topic length
    if props_at + 2 + _PROPS_LEN.unpack_from(buf, props_at)[0] != record_end:
        return None
    return (*fields[:14], buf[body_start:topic_at], buf[topic_at + 1:props_at],
            buf[props_at + 2:record_end])


def _checked_fields(buf: bytes, position: int, end: int) -> tuple[Any, ...]:
    """The fields of the record at ``position``, after checking that it fits and adds up."""
    if end - position < RECORD_FIXED_OVERHEAD_BYTES:
        raise RecordLayoutError(f"{end - position} bytes left at byte {position}, less than "
                                "the smallest record")
    size = _SIZE.unpack_from(buf, position)[0]
    if not RECORD_FIXED_OVERHEAD_BYTES <= size <= end - position:
        raise RecordLayoutError(f"record at byte {position} claims {size} bytes, "
                                f"{end - position} are left")
    try:
        fields = unpack_record(buf, position)
    except (struct.error, IndexError) as error:
        raise RecordLayoutError(f"record at byte {position} does not decode: {error}") from None
    magic, sys_flag = fields[1], fields[7]
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        raise RecordLayoutError(f"record at byte {position} has magic code "
                                f"{magic & 0xFFFFFFFF:#x}")
    header = RECORD_HEADERS[(bool(sys_flag & SYSFLAG_BORNHOST_V6),
                             bool(sys_flag & SYSFLAG_STOREHOST_V6))]
    if magic == MAGIC_V1 and buf[position + header.size + len(fields[14])] > TOPIC_V1_LENGTH_MAX:
        raise RecordLayoutError(f"record at byte {position} has a negative topic length")
    used = (header.size + len(fields[14]) + (2 if magic == MAGIC_V2 else 1) + len(fields[15])
            + 2 + len(fields[16]))
    if used != size:
        raise RecordLayoutError(f"record at byte {position} is {size} bytes but its fields "
                                f"take {used}")
    return fields


def unpack_received_records(buf: bytes, position: int, end: int) -> list[tuple[Any, ...]]:
    """Every record from ``position`` to ``end`` of ``buf``, back to back (a pull body), as
    ``unpack_received_record`` returns each.

    Raises:
        RecordLayoutError: a record does not fit or does not add up.
    """
    records = []
    while position < end:
        fields = unpack_received_record(buf, position, end)
        records.append(fields)
        position += fields[0]
    return records


__all__ = ["RecordLayoutError", "unpack_received_record", "unpack_received_records"]
