"""Message ids (§2): offsetMsgId (store host + log position) and the client-side UNIQ_KEY.

offsetMsgId bytes = store IP (4|16) + port (int32) + log position (int64) → 32 or 56 uppercase hex
characters. UNIQ_KEY bytes = client IP (4|16) + pid (uint16) + class-loader hash (int32) +
milliseconds since the start of the month in local time (uint32) + counter (uint16, wraps).
``UniqueKeyGenerator`` is thread-safe (one lock per instance).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import NamedTuple

from .record import HostAddress, decode_host

_POSITION = struct.Struct(">q")
_UNIQ_TAIL = struct.Struct(">HiIH")  # pid, class-loader hash, ms since month start, counter
assert _UNIQ_TAIL.size == 12

_HEX_DIGITS = frozenset("0123456789ABCDEFabcdef")


def encode_offset_msg_id(store_host: bytes, log_position: int) -> str:
    """offsetMsgId from the raw store-host field (8 or 20 bytes) and a log position."""
    return (store_host + _POSITION.pack(log_position)).hex().upper()


def _hex_bytes(text: str, lengths: tuple[int, ...], what: str) -> bytes:
    if not isinstance(text, str) or len(text) not in lengths or not set(text) <= _HEX_DIGITS:
        raise ValueError(f"malformed {what} {text!r}: expected "
                         f"{' or '.join(map(str, lengths))} hex characters")
    return bytes.fromhex(text)


def decode_offset_msg_id(msg_id: str) -> tuple[HostAddress, int]:
    """Return (store host, log position) from an offsetMsgId.

    Raises:
        ValueError: the string is not 32 or 56 hex characters, or the position is negative.
    """
    raw = _hex_bytes(msg_id, (32, 56), "offsetMsgId")
    position = _POSITION.unpack_from(raw, len(raw) - 8)[0]
    if position < 0:
        raise ValueError(f"malformed offsetMsgId {msg_id!r}: negative log position")
    return decode_host(raw[:-8]), position


class UniqueKeyParts(NamedTuple):
    """Decoded fields of a UNIQ_KEY."""

    ip: str
    pid: int
    class_loader_hash: int
    ms_since_month_start: int
    counter: int


def decode_unique_key(unique_key: str) -> UniqueKeyParts:
    """Split a UNIQ_KEY into its fields.

    Raises:
        ValueError: the string is not 32 or 56 hex characters.
    """
    raw = _hex_bytes(unique_key, (32, 56), "UNIQ_KEY")
    ip_length = len(raw) - 12
    family = socket.AF_INET if ip_length == 4 else socket.AF_INET6
    pid, loader, elapsed_ms, counter = _UNIQ_TAIL.unpack_from(raw, ip_length)
    return UniqueKeyParts(socket.inet_ntop(family, raw[:ip_length]), pid, loader, elapsed_ms,
                          counter)


def month_start_ms(now_ms: int) -> int:
    """Start of the month containing ``now_ms``, in the local time zone, as epoch ms."""
    local = time.localtime(now_ms / 1000)
    start = time.mktime((local.tm_year, local.tm_mon, 1, 0, 0, 0, 0, 0, -1))
    return int(start * 1000)


class UniqueKeyGenerator:
    """Generates UNIQ_KEY values the way RocketMQ producers do (§2.2)."""

    def __init__(self, ip: str, pid: int, class_loader_hash: int = 0x18B4AAC2) -> None:
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        self._prefix = socket.inet_pton(family, ip)
        self._pid = pid & 0xFFFF
        self._loader = class_loader_hash if class_loader_hash < 1 << 31 else (
            class_loader_hash - (1 << 32))
        self._counter = 0
        self._month_start_ms = -1
        self._next_month_start_ms = -1
        self._lock = threading.Lock()

    def next_key(self, now_ms: int) -> str:
        """Return the next UNIQ_KEY for a message created at ``now_ms``."""
        with self._lock:
            if now_ms >= self._next_month_start_ms or now_ms < self._month_start_ms - 1_000_000:
                self._month_start_ms = month_start_ms(now_ms)
                self._next_month_start_ms = _next_month_start_ms(now_ms)
            elapsed = max(0, now_ms - self._month_start_ms) & 0xFFFFFFFF
            counter = self._counter
            self._counter = (counter + 1) & 0xFFFF
        tail = _UNIQ_TAIL.pack(self._pid, self._loader, elapsed, counter)
        return (self._prefix + tail).hex().upper()


def _next_month_start_ms(now_ms: int) -> int:
    local = time.localtime(now_ms / 1000)
    if local.tm_mon == 12:
        year, month = local.tm_year + 1, 1
    else:
        year, month = local.tm_year, local.tm_mon + 1
    return int(time.mktime((year, month, 1, 0, 0, 0, 0, 0, -1)) * 1000)


__all__ = [
    "UniqueKeyGenerator", "UniqueKeyParts", "decode_offset_msg_id", "decode_unique_key",
    "encode_offset_msg_id", "month_start_ms",
]
