"""The classic RocketMQ HA wire protocol (reference §14.1): byte layouts and pure helpers.

Slave → master, a report of the slave's log end (sent on connect, after applying data, and at
least every ``ha.heartbeat_interval_ms``)::

    +--------------------------+
    | max position (int64, BE) |   8 bytes
    +--------------------------+

Master → slave, a frame of raw commit-log bytes::

    +----------------------------+------------------------+------------------+
    | start position (int64, BE) | body size (int32, BE)  | body (size bytes)|
    +----------------------------+------------------------+------------------+
      8 bytes                    + 4 bytes                = 12-byte header

A body holds the log bytes at ``[start, start + size)``: at most ``ha.transfer_batch_bytes``
and never past the end of the segment holding ``start`` (blank tails are sent as they are). A
frame with size 0 is a heartbeat, sent after ``ha.heartbeat_interval_ms`` without data.

Pure: no sockets, no threads. ``FrameDecoder`` and ``ReportDecoder`` turn a byte stream (read in
whatever chunks the socket gives) back into frames and reports.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

REPORT = struct.Struct(">q")
FRAME_HEADER = struct.Struct(">qi")
REPORT_SIZE_BYTES = 8
FRAME_HEADER_SIZE_BYTES = 8 + 4
assert REPORT.size == REPORT_SIZE_BYTES
assert FRAME_HEADER.size == FRAME_HEADER_SIZE_BYTES

encode_report = REPORT.pack


def encode_frame_header(start_position: int, body_size: int) -> bytes:
    """The 12-byte header of a frame."""
    return FRAME_HEADER.pack(start_position, body_size)


def transfer_start(reported_position: int, master_max_position: int,
                   segment_size_bytes: int) -> int:
    """Where the master starts sending to a slave that first reported ``reported_position``.

    An empty slave (0) gets the master's last segment from its start (reference §14.1 and
    pitfall 19: not the whole history); any other slave continues from its own end.
    """
    if reported_position == 0:
        return master_max_position - master_max_position % segment_size_bytes
    return reported_position


def frame_body_size(position: int, segment_base_position: int, segment_readable_bytes: int,
                    batch_bytes: int) -> int:
    """Bytes of the next frame starting at ``position``: what the segment holding it has
    written after it, capped at ``batch_bytes`` (a frame never crosses a segment end)."""
    return max(0, min(batch_bytes, segment_base_position + segment_readable_bytes - position))


class FrameDecoder:
    """Splits the master's byte stream into ``(start_position, body)`` frames.

    ``body_size_max`` bounds a declared body size (a frame never exceeds one segment), so a
    garbled header is reported instead of making the slave buffer gigabytes.
    """

    def __init__(self, body_size_max: int) -> None:
        self._buffer = bytearray()
        self._body_size_max = body_size_max

    def feed(self, data: bytes) -> Iterator[tuple[int, bytes]]:
        """Add received bytes; yield every frame now complete, in order.

        Raises:
            ValueError: a header declares a negative or impossible body size.
        """
        buffer = self._buffer
        buffer += data
        taken = 0
        try:
            while len(buffer) - taken >= FRAME_HEADER_SIZE_BYTES:
                start, size = FRAME_HEADER.unpack_from(buffer, taken)
                if not 0 <= size <= self._body_size_max:
                    raise ValueError(f"frame at position={start} declares {size} body bytes "
                                     f"(at most {self._body_size_max})")
                end = taken + FRAME_HEADER_SIZE_BYTES + size
                if end > len(buffer):
                    break
                yield start, bytes(buffer[taken + FRAME_HEADER_SIZE_BYTES:end])
                taken = end
        finally:
            del buffer[:taken]

    @property
    def pending_bytes(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buffer)


class ReportDecoder:
    """Turns the slave's byte stream into its latest reported position."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> int | None:
        """Add received bytes; return the newest complete report, or None if none completed."""
        buffer = self._buffer
        buffer += data
        whole = len(buffer) - len(buffer) % REPORT_SIZE_BYTES
        if not whole:
            return None
        (position,) = REPORT.unpack_from(buffer, whole - REPORT_SIZE_BYTES)
        del buffer[:whole]
        return position
