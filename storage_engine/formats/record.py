"""Commit-log record layout (§1.2, §1.3): encode, size arithmetic, host fields."""

from __future__ import annotations

import mmap
import socket
import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

from .constants import (
    BLANK_MAGIC,
    END_FILE_MIN_BLANK_LENGTH,
    MAGIC_V1,
    MAGIC_V2,
    PROPERTIES_SIZE_MAX_BYTES,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_STOREHOST_V6,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_NOT,
    TOPIC_V1_LENGTH_MAX,
)
from .hashing import masked_crc32
from .properties import decode_properties

RecordBuffer = bytes | bytearray | memoryview | mmap.mmap
"""What the record readers take: file bytes, a mapped segment, or a view of either."""

# --------------------------------------------------------------------------------------------
# Hosts (born host / store host): 4-byte IPv4 or 16-byte IPv6 address + 4-byte port
# --------------------------------------------------------------------------------------------

class HostAddress(NamedTuple):
    """An IP address and port as stored in a record."""

    ip: str
    port: int

    def __str__(self) -> str:
        return f"[{self.ip}]:{self.port}" if ":" in self.ip else f"{self.ip}:{self.port}"


_PORT = struct.Struct(">i")


def encode_host(ip: str, port: int) -> bytes:
    """Encode a host as 8 bytes (IPv4) or 20 bytes (IPv6)."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    return socket.inet_pton(family, ip) + _PORT.pack(port)


def decode_host(raw: bytes) -> HostAddress:
    """Decode an 8- or 20-byte host field."""
    family = socket.AF_INET if len(raw) == 8 else socket.AF_INET6
    return HostAddress(socket.inet_ntop(family, raw[:-4]), _PORT.unpack_from(raw, len(raw) - 4)[0])


# --------------------------------------------------------------------------------------------
# Commit-log record (reference §1.2)
# --------------------------------------------------------------------------------------------
#
#   offset size field                           offset size field
#    0     4   TOTALSIZE                         56*   8   STORETIMESTAMP
#    4     4   MAGICCODE (v1/v2)                 64*   8   STOREHOST (20 if STOREHOST_V6)
#    8     4   BODYCRC (masked CRC32)            72*   4   RECONSUMETIMES
#   12     4   QUEUEID                           76*   8   PREPARED TRANSACTION POSITION
#   16     4   FLAG                              84*   4   BODYLENGTH
#   20     8   QUEUEOFFSET                       88*   B   BODY
#   28     8   PHYSICALOFFSET (= log position)   ..    1|2 TOPICLENGTH (v1 byte | v2 short)
#   36     4   SYSFLAG                           ..    T   TOPIC (UTF-8)
#   40     8   BORNTIMESTAMP                     ..    2   PROPERTIESLENGTH (signed short)
#   48     8   BORNHOST (20 if BORNHOST_V6)      ..    P   PROPERTIES (UTF-8)
#   (* shifted by 12 when the born host is IPv6, and again when the store host is)
#
# Fixed overhead, v1 with IPv4 hosts: 88 + 1 + 2 = 91 bytes, so TOTALSIZE = 91 + B + T + P.
# IPv6 born host +12, IPv6 store host +12, v2 +1.

def _header_struct(born_v6: bool, store_v6: bool) -> struct.Struct:
    born = "20s" if born_v6 else "8s"
    store = "20s" if store_v6 else "8s"
    return struct.Struct(f">iiiiiqqiq{born}q{store}iqi")


RECORD_HEADERS = {
    (False, False): _header_struct(False, False),
    (True, False): _header_struct(True, False),
    (False, True): _header_struct(False, True),
    (True, True): _header_struct(True, True),
}
RECORD_HEADER_V4 = RECORD_HEADERS[(False, False)]
RECORD_FIXED_OVERHEAD_BYTES = 91
assert RECORD_HEADER_V4.size == 88, "v1 IPv4 header is 88 bytes up to the body"
assert RECORD_HEADERS[(True, True)].size == 88 + 24

_TOPIC_LEN_V1 = struct.Struct(">b")
_TOPIC_LEN_V2 = struct.Struct(">h")
_PROPS_LEN = struct.Struct(">h")
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")
_SIZE_AND_MAGIC = struct.Struct(">ii")
_DISPATCH_HEADER_V4 = struct.Struct(">iiiiiqqi16xq20xi")
"""The v1/IPv4 header fields recovery and dispatch read: size, magic, body CRC, queue id, flag,
queue offset, log position, sys flag, store time, body length (hosts and born time skipped)."""
assert _DISPATCH_HEADER_V4.size == RECORD_HEADER_V4.size
_unpack_dispatch_header = _DISPATCH_HEADER_V4.unpack_from
_unpack_props_length = _PROPS_LEN.unpack_from
BLANK_RECORD = struct.Struct(">ii")
assert BLANK_RECORD.size == END_FILE_MIN_BLANK_LENGTH

OFFSET_QUEUE_ID = 12
OFFSET_QUEUE_OFFSET = 20
OFFSET_LOG_POSITION = 28
OFFSET_SYS_FLAG = 36
OFFSET_BODY_LENGTH_V4 = 84


def utf16_length(text: str) -> int:
    """Java ``String.length()``: the number of UTF-16 code units."""
    return len(text) if text.isascii() else len(text.encode("utf-16-le")) // 2


def uses_v2(topic: str, topic_bytes: bytes) -> bool:
    """Whether a topic needs the v2 record (two-byte topic length), §1.6.

    Java chooses v2 when the topic is longer than 127 UTF-16 units; we also choose it when the
    UTF-8 form is longer than 127 bytes, which a v1 length byte could not represent.
    """
    return len(topic_bytes) > TOPIC_V1_LENGTH_MAX or utf16_length(topic) > TOPIC_V1_LENGTH_MAX


def record_size(body_length: int, topic_length: int, properties_length: int, *,
                sys_flag: int = 0, is_v2: bool = False) -> int:
    """TOTALSIZE of a record with these field lengths."""
    size = RECORD_FIXED_OVERHEAD_BYTES + body_length + topic_length + properties_length
    if sys_flag & SYSFLAG_BORNHOST_V6:
        size += 12
    if sys_flag & SYSFLAG_STOREHOST_V6:
        size += 12
    return size + 1 if is_v2 else size


@dataclass(frozen=True, slots=True)
class RecordFields:
    """Everything needed to encode one commit-log record."""

    topic: str
    body: bytes
    properties: bytes
    queue_id: int
    queue_offset: int
    log_position: int
    born_timestamp_ms: int
    born_host: bytes
    store_timestamp_ms: int
    store_host: bytes
    flag: int = 0
    sys_flag: int = 0
    reconsume_count: int = 0
    prepared_transaction_position: int = 0
    body_crc: int | None = None


def encode_record(fields: RecordFields) -> bytes:
    """Encode one record; host lengths set the V6 bits of SYSFLAG, the topic picks v1 or v2.

    Raises:
        ValueError: properties longer than 32 767 bytes or a host of the wrong length.
    """
    topic_bytes = fields.topic.encode("utf-8")
    return encode_record_parts(
        topic_bytes, uses_v2(fields.topic, topic_bytes), fields.body, fields.properties,
        fields.queue_id, fields.flag, fields.queue_offset, fields.log_position, fields.sys_flag,
        fields.born_timestamp_ms, fields.born_host, fields.store_timestamp_ms, fields.store_host,
        fields.reconsume_count, fields.prepared_transaction_position,
        masked_crc32(fields.body) if fields.body_crc is None else fields.body_crc)


def encode_record_parts(topic_bytes: bytes, is_v2: bool, body: bytes, properties: bytes,
                        queue_id: int, flag: int, queue_offset: int, log_position: int,
                        sys_flag: int, born_timestamp_ms: int, born_host: bytes,
                        store_timestamp_ms: int, store_host: bytes, reconsume_count: int,
                        prepared_transaction_position: int, body_crc: int) -> bytes:
    """Positional fast path of :func:`encode_record` for the append hot path."""
    if len(properties) > PROPERTIES_SIZE_MAX_BYTES:
        raise ValueError(f"properties are {len(properties)} bytes; at most "
                         f"{PROPERTIES_SIZE_MAX_BYTES} fit the record")
    born_v6 = len(born_host) == 20
    store_v6 = len(store_host) == 20
    if not (born_v6 or len(born_host) == 8) or not (store_v6 or len(store_host) == 8):
        raise ValueError("a host field must be 8 (IPv4) or 20 (IPv6) bytes")
    sys_flag = (sys_flag & ~0x30) | (SYSFLAG_BORNHOST_V6 if born_v6 else 0) | (
        SYSFLAG_STOREHOST_V6 if store_v6 else 0)
    header = RECORD_HEADERS[(born_v6, store_v6)]
    if is_v2:
        topic_part = _TOPIC_LEN_V2.pack(len(topic_bytes)) + topic_bytes
    else:
        topic_part = _TOPIC_LEN_V1.pack(len(topic_bytes)) + topic_bytes
    total = header.size + len(body) + len(topic_part) + 2 + len(properties)
    return b"".join((
        header.pack(total, MAGIC_V2 if is_v2 else MAGIC_V1, body_crc, queue_id, flag,
                    queue_offset, log_position, sys_flag, born_timestamp_ms, born_host,
                    store_timestamp_ms, store_host, reconsume_count,
                    prepared_transaction_position, len(body)),
        body, topic_part, _PROPS_LEN.pack(len(properties)), properties))


def encode_blank_record(remaining_bytes: int) -> bytes:
    """The 8-byte end-of-segment header: ``[remaining][BLANK_MAGIC]`` (§1.3)."""
    return BLANK_RECORD.pack(remaining_bytes, BLANK_MAGIC)


# --------------------------------------------------------------------------------------------
# Decoding and validation (§1.9)
# --------------------------------------------------------------------------------------------

class RecordKind:
    """What :func:`check_record` found at a position."""

    MESSAGE = "message"
    BLANK = "blank"  # end-of-segment filler: continue at the next segment
    END = "end"  # zeros or too little room: the end of valid data
    CORRUPT = "corrupt"  # bad magic, CRC mismatch, or impossible length


class RecordCheck(NamedTuple):
    """Outcome of validating the bytes at one position."""

    kind: str
    size: int
    reason: str = ""


def _topic_field(buf: RecordBuffer, after_body: int, is_v2: bool) -> tuple[int, int]:
    """Return (topic start, topic length) given the position just after the body."""
    if is_v2:
        return after_body + 2, _TOPIC_LEN_V2.unpack_from(buf, after_body)[0]
    return after_body + 1, _TOPIC_LEN_V1.unpack_from(buf, after_body)[0]


# Property CRC (RocketMQ 5.x ``enabledAppendPropCRC``, §1.4): the last 20 bytes of the
# properties are ``__CRC32#`` U+0001, 10 ASCII digits (the masked CRC32 of every record byte
# before these 20, least-significant digit first, right-padded with '0') and U+0002. The body
# CRC covers only the body; this covers the header, topic and properties too, so a record whose
# tail was torn by a power loss is recognised.
PROPERTY_CRC_PREFIX = b"__CRC32#\x01"
PROPERTY_CRC_LENGTH = 20
PROPERTY_CRC_PLACEHOLDER = PROPERTY_CRC_PREFIX + b"0" * 10 + b"\x02"
assert len(PROPERTY_CRC_PLACEHOLDER) == PROPERTY_CRC_LENGTH


def seal_property_crc(record: bytes) -> bytes:
    """Fill the placeholder at the end of ``record`` with the CRC of everything before it."""
    digits = str(masked_crc32(memoryview(record)[:-PROPERTY_CRC_LENGTH]))[::-1].ljust(10, "0")
    return record[:-11] + digits.encode("ascii") + b"\x02"


def _property_crc_holds(buf: RecordBuffer, position: int, size: int) -> bool | None:
    """None when the record carries no property CRC, else whether it matches."""
    end = position + size
    tail_at = end - PROPERTY_CRC_LENGTH
    if buf[tail_at:tail_at + 9] != PROPERTY_CRC_PREFIX:
        return None
    digits = bytes(buf[end - 11:end - 1])
    if not digits.isdigit():
        return False
    return int(digits[::-1]) == masked_crc32(buf[position:tail_at])


def check_record(buf: RecordBuffer, position: int, limit: int, *,
                 check_crc: bool = True) -> RecordCheck:
    """Validate the record at ``position`` of ``buf`` without building a view.

    ``limit`` is the end of readable data in ``buf`` (the end of the segment). Mirrors RocketMQ's
    reader: fewer than 8 bytes left or a zero size is the end of data; a blank magic is a blank
    record; any other magic, a CRC mismatch or a size that disagrees with the field lengths is
    corruption.
    """
    remaining = limit - position
    if remaining < END_FILE_MIN_BLANK_LENGTH:
        return RecordCheck(RecordKind.END, 0)
    size, magic = _SIZE_AND_MAGIC.unpack_from(buf, position)
    if magic == BLANK_MAGIC:
        if size != remaining:
            return RecordCheck(RecordKind.CORRUPT, size, f"blank record of {size} bytes "
                               f"with {remaining} bytes left in the segment")
        return RecordCheck(RecordKind.BLANK, size)
    if size == 0 and magic == 0:
        return RecordCheck(RecordKind.END, 0)
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        return RecordCheck(RecordKind.CORRUPT, size, f"bad magic 0x{magic & 0xFFFFFFFF:08X}")
    if size < RECORD_FIXED_OVERHEAD_BYTES or size > remaining:
        return RecordCheck(RecordKind.CORRUPT, size, f"size {size} does not fit "
                           f"{remaining} remaining bytes")
    layout = _common_layout(buf, position, remaining)
    if layout is None:
        return _check_fields(buf, position, size, magic == MAGIC_V2, check_crc)
    if check_crc:
        fields, body_end, _props_at, props_length = layout
        reason = _crc_failure(buf, position, size, body_end - fields[9], body_end, props_length,
                              fields[2])
        if reason:
            return RecordCheck(RecordKind.CORRUPT, size, reason)
    return RecordCheck(RecordKind.MESSAGE, size)


def _common_layout(buf: RecordBuffer, position: int, remaining: int) -> tuple[Any, ...] | None:
    """Header fields and field bounds of a well-formed v1 record with IPv4 hosts, else None.

    The layout nearly every record has, checked with one header unpack: recovery and dispatch
    read millions of records. Returns ``(header fields, body end, properties-length position,
    properties length)``. None for any other layout *and* for any inconsistency; the caller then
    takes the general path, which names the fault.
    """
    if remaining < RECORD_FIXED_OVERHEAD_BYTES:
        return None
    fields = _unpack_dispatch_header(buf, position)
    size, body_length = fields[0], fields[9]
    if fields[1] != MAGIC_V1 or fields[7] & 0x30 or size < RECORD_FIXED_OVERHEAD_BYTES \
            or size > remaining or body_length < 0:
        return None
    body_end = position + 88 + body_length
    record_end = position + size
    if body_end + 3 > record_end:
        return None
    topic_length = buf[body_end]
    props_at = body_end + 1 + topic_length
    if topic_length > 127 or props_at + 2 > record_end:
        return None  # a negative (signed byte) or overrunning topic length
    props_length = _unpack_props_length(buf, props_at)[0]
    if props_length < 0 or props_at + 2 + props_length != record_end:
        return None
    return fields, body_end, props_at, props_length


def _crc_failure(buf: RecordBuffer, position: int, size: int, body_start: int, body_end: int,
                 props_length: int, stored_crc: int) -> str:
    """Why the record's checksums or framing fail ("" when they hold).

    A record CRC (property) that holds covers the body and the stored body CRC too, so the body
    is not checked again; only a failing record is told apart by its body CRC.
    """
    record_crc = _property_crc_holds(buf, position, size) if props_length >= \
        PROPERTY_CRC_LENGTH else None
    if record_crc and buf[position + size - 1] == 2:
        return ""
    if masked_crc32(buf[body_start:body_end]) != stored_crc:
        return "body CRC mismatch"
    if props_length and buf[position + size - 1] != 2:  # writers end every pair with it
        return "properties do not end with U+0002 (torn record tail)"
    if record_crc is False:
        return "record (property) CRC mismatch"
    return ""


def _check_fields(buf: RecordBuffer, position: int, size: int, is_v2: bool,
                  check_crc: bool) -> RecordCheck:
    sys_flag = _INT.unpack_from(buf, position + OFFSET_SYS_FLAG)[0]
    header = RECORD_HEADERS[(bool(sys_flag & SYSFLAG_BORNHOST_V6),
                             bool(sys_flag & SYSFLAG_STOREHOST_V6))]
    body_length = _INT.unpack_from(buf, position + header.size - 4)[0]
    body_start = position + header.size
    if body_length < 0 or body_start + body_length + 3 > position + size:
        return RecordCheck(RecordKind.CORRUPT, size, f"body length {body_length} overruns")
    topic_start, topic_length = _topic_field(buf, body_start + body_length, is_v2)
    props_at = topic_start + topic_length
    if topic_length < 0 or props_at + 2 > position + size:
        return RecordCheck(RecordKind.CORRUPT, size, f"topic length {topic_length} overruns")
    props_length = _PROPS_LEN.unpack_from(buf, props_at)[0]
    expected = record_size(body_length, topic_length, props_length, sys_flag=sys_flag,
                           is_v2=is_v2)
    if props_length < 0 or expected != size:
        return RecordCheck(RecordKind.CORRUPT, size, f"size field {size} but fields add up "
                           f"to {expected}")
    if check_crc:
        reason = _crc_failure(buf, position, size, body_start, body_start + body_length,
                              props_length, _INT.unpack_from(buf, position + 8)[0])
        if reason:
            return RecordCheck(RecordKind.CORRUPT, size, reason)
    return RecordCheck(RecordKind.MESSAGE, size)


def scan_records(buf: RecordBuffer, offset: int, limit: int, *,
                 check_crc: bool = True) -> tuple[int, int]:
    """Skip over consecutive valid records of the common layout, starting at ``offset``.

    The fast loop of recovery scans: returns ``(stop, last)``, where ``stop`` is the offset of
    the first record the loop did not accept and ``last`` the offset of the last one it did (-1:
    none). ``stop`` is not necessarily the end of data: :func:`check_record` at ``stop`` tells
    (a blank, the end, corruption, or a valid record of another layout to step over).
    """
    last = -1
    while True:
        layout = _common_layout(buf, offset, limit - offset)
        if layout is None:
            return offset, last
        fields, body_end, _props_at, props_length = layout
        if check_crc and _crc_failure(buf, offset, fields[0], body_end - fields[9], body_end,
                                      props_length, fields[2]):
            return offset, last
        last = offset
        offset += fields[0]


class DispatchRecord(NamedTuple):
    """What the dispatchers need from one record, without decoding the body.

    ``properties`` holds every property when the record was decoded from the log, and the
    caller's user properties when it came from the append feed (the dispatchers only read
    ``DELAY`` from it, which is a user property in both cases).
    """

    topic: str
    queue_id: int
    queue_offset: int
    log_position: int
    size: int
    sys_flag: int
    store_timestamp_ms: int
    tags: str | None
    keys: str | None
    unique_key: str | None
    properties: dict[str, str]


def decode_for_dispatch(buf: RecordBuffer, position: int,
                        limit: int) -> tuple[str, int, DispatchRecord | None]:
    """Validate (without CRC) and decode the record at ``position`` for the dispatchers.

    Returns ``(kind, size, record)``: ``record`` is set only for ``RecordKind.MESSAGE``. This is
    the read-back half of the pair check: :func:`check_record` re-checks the lengths. A topic
    that is not UTF-8 (CRCs are not checked here) is ``RecordKind.CORRUPT``.
    """
    layout = _common_layout(buf, position, limit - position)
    if layout is not None:
        record = _dispatch_record(buf, layout)
        if record is None:
            return RecordKind.CORRUPT, layout[0][0], None
        return RecordKind.MESSAGE, layout[0][0], record
    check = check_record(buf, position, limit, check_crc=False)
    if check.kind != RecordKind.MESSAGE:
        return check.kind, check.size, None
    (size, _magic, _crc, queue_id, _flag, queue_offset, log_position, sys_flag, _born_ts,
     _born_host, store_ts, _store_host, _reconsume, _prepared, _body, topic_bytes,
     properties_raw) = unpack_record(buf, position)
    try:
        topic = topic_bytes.decode("utf-8")
    except UnicodeDecodeError:
        return RecordKind.CORRUPT, size, None
    properties = decode_properties(properties_raw)
    return RecordKind.MESSAGE, size, DispatchRecord(
        topic, queue_id, queue_offset, log_position, size, sys_flag, store_ts,
        properties.get("TAGS"), properties.get("KEYS"), properties.get("UNIQ_KEY"), properties)


def decode_run(buf: RecordBuffer, offset: int, limit: int, count_max: int) -> list[DispatchRecord]:
    """Decode up to ``count_max`` consecutive records of the common layout from ``offset``.

    The fast loop of dispatch: stops early at the first record of another layout, a blank, the
    end or anything invalid, which :func:`decode_for_dispatch` then takes one at a time.
    """
    records: list[DispatchRecord] = []
    while len(records) < count_max:
        layout = _common_layout(buf, offset, limit - offset)
        record = None if layout is None else _dispatch_record(buf, layout)
        if record is None:
            break
        records.append(record)
        offset += record.size
    return records


def _dispatch_record(buf: RecordBuffer, layout: tuple[Any, ...]) -> DispatchRecord | None:
    """The record of a common-layout ``layout``; None when its topic is not UTF-8."""
    fields, body_end, props_at, props_length = layout
    try:
        topic = str(buf[body_end + 1:props_at], "utf-8")
    except UnicodeDecodeError:
        return None
    properties = decode_properties(buf[props_at + 2:props_at + 2 + props_length])
    return DispatchRecord(
        topic, fields[3], fields[5], fields[6], fields[0], fields[7], fields[8],
        properties.get("TAGS"), properties.get("KEYS"), properties.get("UNIQ_KEY"), properties)


def takes_queue_offset(sys_flag: int) -> bool:
    """Whether a record gets a queue offset and a consume-queue unit (§3.2).

    Normal and committed-transaction records do; prepared (half) and rolled-back ones do not.
    """
    return sys_flag & SYSFLAG_TRANSACTION_MASK in (SYSFLAG_TRANSACTION_NOT,
                                                    SYSFLAG_TRANSACTION_COMMIT)


def _header_for(buf: RecordBuffer, position: int) -> struct.Struct:
    sys_flag = _INT.unpack_from(buf, position + OFFSET_SYS_FLAG)[0]
    if not sys_flag & 0x30:
        return RECORD_HEADER_V4
    return RECORD_HEADERS[(bool(sys_flag & SYSFLAG_BORNHOST_V6),
                           bool(sys_flag & SYSFLAG_STOREHOST_V6))]


def topic_and_properties(buf: RecordBuffer, position: int) -> tuple[bytes, bytes]:
    """The raw topic and properties bytes of the (validated) record at ``position``.

    Cheaper than :func:`unpack_record` when only these are needed: the body is not copied. Lets
    a scanner pick the records it wants (by topic, or by a property name in the raw bytes)
    before decoding them.
    """
    header = _header_for(buf, position)
    body_length = _INT.unpack_from(buf, position + header.size - 4)[0]
    magic = _INT.unpack_from(buf, position + 4)[0]
    topic_start, topic_length = _topic_field(buf, position + header.size + body_length,
                                             magic == MAGIC_V2)
    props_at = topic_start + topic_length
    props_length = _PROPS_LEN.unpack_from(buf, props_at)[0]
    return (bytes(buf[topic_start:props_at]),
            bytes(buf[props_at + 2:props_at + 2 + props_length]))


def unpack_record(buf: RecordBuffer, position: int) -> tuple[Any, ...]:
    """Unpack a whole record into a flat tuple.

    Returns ``(size, magic, body_crc, queue_id, flag, queue_offset, log_position, sys_flag,
    born_timestamp_ms, born_host, store_timestamp_ms, store_host, reconsume_count,
    prepared_transaction_position, body, topic_bytes, properties_bytes)``.
    """
    fields = RECORD_HEADER_V4.unpack_from(buf, position)
    header_size = 88
    if fields[7] & 0x30:  # an IPv6 host shifts everything after it
        header = _header_for(buf, position)
        fields = header.unpack_from(buf, position)
        header_size = header.size
    body_start = position + header_size
    body_end = body_start + fields[14]
    topic_start, topic_length = _topic_field(buf, body_end, fields[1] == MAGIC_V2)
    props_at = topic_start + topic_length
    props_length = _PROPS_LEN.unpack_from(buf, props_at)[0]
    body = buf[body_start:body_end]
    topic = buf[topic_start:props_at]
    props = buf[props_at + 2:props_at + 2 + props_length]
    if type(body) is not bytes:  # memoryview / bytearray input
        body, topic, props = bytes(body), bytes(topic), bytes(props)
    return (*fields[:14], body, topic, props)
