"""Checkpoint page (§5.1): a 4 KiB file of which the first 40 bytes mean something.

    offset size field
     0     8   log flushed timestamp ms       (physicMsgTimestamp)
     8     8   queue flushed timestamp ms     (logicsMsgTimestamp)
    16     8   key-index flushed timestamp ms (indexMsgTimestamp)
    24     8   master flushed position        (5.x)
    32     8   confirm position               (5.x)
    40     8   key-index entry count          (Postbox: entries of the index file that was
                                               flushed whole at the index timestamp; RocketMQ
                                               ignores bytes past 40)
    48..4095   zero
"""

from __future__ import annotations

import struct
from typing import NamedTuple

CHECKPOINT = struct.Struct(">qqqqqq")
CHECKPOINT_FILE_SIZE_BYTES = 4096
assert CHECKPOINT.size == 48


class CheckpointState(NamedTuple):
    """Decoded checkpoint fields."""

    log_flushed_timestamp_ms: int = 0
    queue_flushed_timestamp_ms: int = 0
    key_index_flushed_timestamp_ms: int = 0
    master_flushed_position: int = 0
    confirm_position: int = 0
    key_index_entry_count: int = 0


def encode_checkpoint(state: CheckpointState) -> bytes:
    """The whole 4 KiB page."""
    return CHECKPOINT.pack(*state).ljust(CHECKPOINT_FILE_SIZE_BYTES, b"\0")


def decode_checkpoint(page: bytes) -> CheckpointState:
    """Decode a checkpoint page (4.x pages have zeros in the 5.x fields)."""
    if len(page) < CHECKPOINT.size:
        raise ValueError(f"checkpoint is {len(page)} bytes; expected {CHECKPOINT_FILE_SIZE_BYTES}")
    return CheckpointState(*CHECKPOINT.unpack_from(page, 0))
