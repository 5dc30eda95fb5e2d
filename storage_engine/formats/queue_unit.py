"""ConsumeQueue unit (§3.1): 20 bytes per queue offset.

    offset size field
     0     8   log position of the record (commit-log "physical offset")
     8     4   record size in bytes
    12     8   tag hash (Java hashCode of TAGS, sign-extended; deliver time for delay topics)

A unit is valid when position >= 0 and size > 0; an all-zero unit marks the end of data. Filler
units ``(0, 0x7FFFFFFF, 0)`` pad a queue whose first entry has offset k > 0 (pre-blank fill).
Files hold a whole number of units and are named by their start byte (= first offset × 20).
"""

from __future__ import annotations

import struct

CONSUME_QUEUE_UNIT = struct.Struct(">qiq")
CONSUME_QUEUE_UNIT_SIZE_BYTES = 20
assert CONSUME_QUEUE_UNIT.size == CONSUME_QUEUE_UNIT_SIZE_BYTES

FILLER_UNIT_SIZE = 0x7FFFFFFF
FILLER_UNIT = CONSUME_QUEUE_UNIT.pack(0, FILLER_UNIT_SIZE, 0)
EMPTY_UNIT = bytes(CONSUME_QUEUE_UNIT_SIZE_BYTES)
EXT_ADDRESS_MAX = -(1 << 31) - 1  # tag codes at or below this are ConsumeQueueExt addresses


def is_ext_address(tag_code: int) -> bool:
    """Whether a unit's tag code is a ConsumeQueueExt address rather than a tag hash (§3.7)."""
    return tag_code <= EXT_ADDRESS_MAX


def segment_file_name(base_position: int) -> str:
    """Commit-log and consume-queue file name: the start position as 20 decimal digits."""
    return f"{base_position:020d}"
