"""Key-index file (RocketMQ's IndexFile, §4.1).

    header (40 bytes)                          entry (20 bytes)
     0  8  begin timestamp ms                   0  4  key hash (non-negative)
     8  8  end timestamp ms                     4  8  log position
    16  8  begin log position                  12  4  time diff, seconds since header begin
    24  8  end log position (start of newest)  16  4  previous entry number in the slot (0 = none)
    32  4  count of non-empty slots
    36  4  entry count, starting at 1 (entry 0 is never used)

File = header + slot_count × 4-byte slots (newest entry number, 0 = empty) + entry_count × 20.
Defaults 5 000 000 slots and 20 000 000 entries → 420 000 040 bytes. Files are named by their
creation time in local time, ``yyyyMMddHHmmssSSS``.
"""

from __future__ import annotations

import struct
import time

INDEX_HEADER = struct.Struct(">qqqqii")
INDEX_HEADER_SIZE_BYTES = 40
INDEX_SLOT = struct.Struct(">i")
INDEX_SLOT_SIZE_BYTES = 4
INDEX_ENTRY = struct.Struct(">iqii")
INDEX_ENTRY_SIZE_BYTES = 20
assert INDEX_HEADER.size == INDEX_HEADER_SIZE_BYTES
assert INDEX_SLOT.size == INDEX_SLOT_SIZE_BYTES
assert INDEX_ENTRY.size == INDEX_ENTRY_SIZE_BYTES

INDEX_QUERY_RESULT_MAX = 64  # maxMsgsNumBatch: a key query returns at most this many positions


def index_file_size(slot_count: int, entry_count: int) -> int:
    """Size in bytes of an index file with these capacities."""
    return INDEX_HEADER_SIZE_BYTES + slot_count * INDEX_SLOT_SIZE_BYTES + (
        entry_count * INDEX_ENTRY_SIZE_BYTES)


def slot_position(key_hash: int, slot_count: int) -> int:
    """Byte position of the slot for ``key_hash``."""
    return INDEX_HEADER_SIZE_BYTES + (key_hash % slot_count) * INDEX_SLOT_SIZE_BYTES


def entry_position(entry_number: int, slot_count: int) -> int:
    """Byte position of entry ``entry_number``."""
    return INDEX_HEADER_SIZE_BYTES + slot_count * INDEX_SLOT_SIZE_BYTES + (
        entry_number * INDEX_ENTRY_SIZE_BYTES)


def index_file_name(created_ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` in local time."""
    local = time.localtime(created_ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", local) + f"{created_ms % 1000:03d}"
