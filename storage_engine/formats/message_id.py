"""Message ids (§2): offsetMsgId (store host + log position) and the client-side UNIQ_KEY.

offsetMsgId bytes = store IP (4|16) + port (int32) + log position (int64) → 32 or 56 uppercase hex
characters.

UNIQ_KEY, as RocketMQ's ``MessageClientIDSetter`` makes it (reference §2.2), the project's one
generator and decoder (the engine, the remote client, the framework and the CLI all use these)::

    +--------+-------+-------------------+----------------------+---------+
    | IP     | pid   | class-loader hash | ms since month start | counter |
    | 4 | 16 | 2     | 4 (Java int)      | 4                    | 2       |
    +--------+-------+-------------------+----------------------+---------+
      16 bytes (IPv4) → 32 uppercase hex characters; 28 (IPv6) → 56

``UniqueKeyParts`` holds the fields in that order. Invariants of ``UniqueKeyGenerator``:

* The first bytes (IP, pid, class-loader hash) are fixed for the life of a generator. The IP is
  the host's client address as Java picks it (the first public IPv4, else a private one, else
  the low 4 bytes of the clock), looked up once per process: this module's one I/O.
* The time field is milliseconds since the start of the current month in local time; the month
  start is recomputed when the clock passes the next month start, and a clock that steps back a
  little (less than 1,000,000 ms, e.g. NTP) before the month start gives 0, never a negative.
* The counter rises by one per key (mod 65,536) across all threads of one generator, so keys
  are unique as long as fewer than 65,536 keys are made in one millisecond.

Thread-safety: one lock per generator; ``next`` reads its clock under it, so the time field
never goes backwards relative to the counter. Nothing is persisted; a restarted process makes a
new generator with a new (random) class-loader hash.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import random
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple

from .record import HostAddress, decode_host

_POSITION = struct.Struct(">q")
_UNIQ_TAIL = struct.Struct(">HiIH")  # pid, class-loader hash, ms since month start, counter
assert _UNIQ_TAIL.size == 12

_HEX_DIGITS = frozenset("0123456789ABCDEFabcdef")
_INTERNAL_NETWORKS = tuple(
    ipaddress.IPv4Network(network) for network in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
)
_ROUTE_PROBE_ADDRESS = ("192.0.2.1", 9)  # TEST-NET-1; a UDP connect only picks a route


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
    """The fields of a UNIQ_KEY, in the order of its bytes."""

    ip: str
    pid: int
    class_loader_hash: int
    """A Java ``int``: signed, as the key holds it."""
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


def unique_key_timestamp_ms(unique_key: str, reference_ms: int) -> int:
    """Approximate creation time (epoch ms) of a key made no later than ``reference_ms``.

    Like Java's ``getNearlyTimeFromID``: the elapsed time is added to the start of the month
    (local time) that contains ``reference_ms``; if that lands after ``reference_ms`` the key
    must be from the previous month. Exact for keys younger than a month, given the same zone.
    """
    elapsed_ms = decode_unique_key(unique_key).ms_since_month_start
    start_ms = month_start_ms(reference_ms)
    if start_ms + elapsed_ms > reference_ms:
        start_ms = month_start_ms(start_ms - 1)
    return start_ms + elapsed_ms


def month_start_ms(now_ms: int) -> int:
    """Start of the month containing ``now_ms``, in the local time zone, as epoch ms."""
    local = time.localtime(now_ms / 1000)
    start = time.mktime((local.tm_year, local.tm_mon, 1, 0, 0, 0, 0, 0, -1))
    return int(start * 1000)


def wall_clock_ms() -> int:
    """The wall clock in epoch ms: the default clock of ``UniqueKeyGenerator``."""
    return time.time_ns() // 1_000_000


class UniqueKeyGenerator:
    """Makes UNIQ_KEY values for one producer process (see the module docstring).

    Args:
        clock_ms: returns the current time in epoch milliseconds, read by ``next``.
        ip: the address to embed, as text or as 4 (IPv4) or 16 (IPv6) packed bytes; default:
            ``client_ip_or_fake``.
        pid: the process id to embed (its low 16 bits); default ``os.getpid()``.
        class_loader_hash: the 32-bit value Java fills with the class loader's hash code, signed
            or unsigned; default: random, fixed for this generator.
    """

    def __init__(self, clock_ms: Callable[[], int] = wall_clock_ms, *,
                 ip: str | bytes | None = None, pid: int | None = None,
                 class_loader_hash: int | None = None) -> None:
        self._clock_ms = clock_ms
        if ip is None:
            ip = client_ip_or_fake(clock_ms)
        if isinstance(ip, str):
            ip = ipaddress.ip_address(ip).packed
        if len(ip) not in (4, 16):
            raise ValueError(f"ip must be 4 (IPv4) or 16 (IPv6) bytes, got {len(ip)}")
        if class_loader_hash is None:
            class_loader_hash = random.getrandbits(32)
        if not -(1 << 31) <= class_loader_hash < 1 << 32:
            raise ValueError(f"class_loader_hash must fit in 32 bits, got {class_loader_hash}")
        self._prefix = bytes(ip)
        self._pid = (os.getpid() if pid is None else pid) & 0xFFFF
        self._loader = class_loader_hash - (1 << 32) if class_loader_hash >= 1 << 31 else (
            class_loader_hash)
        self._counter = 0
        self._month_start_ms = -1
        self._next_month_start_ms = -1
        self._lock = threading.Lock()

    def next(self) -> str:
        """The next UNIQ_KEY, made now by the generator's clock."""
        with self._lock:
            return self._key(self._clock_ms())

    def next_key(self, now_ms: int) -> str:
        """The next UNIQ_KEY for a message made at ``now_ms`` (a caller's own clock)."""
        with self._lock:
            return self._key(now_ms)

    def _key(self, now_ms: int) -> str:
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


# --------------------------------------------------------------------------------------------
# The client IP (reference §2.2)
# --------------------------------------------------------------------------------------------

def client_ip_or_fake(clock_ms: Callable[[], int]) -> bytes:
    """This host's client IP (see ``choose_client_ip``), else the low 4 bytes of the clock."""
    found = discover_client_ip()
    if found is not None:
        return found
    return (clock_ms() & 0xFFFFFFFF).to_bytes(4, "big")


@functools.cache
def discover_client_ip() -> bytes | None:
    """This host's client IPv4 address, looked up once per process (None if none is found)."""
    return choose_client_ip(_local_ipv4_candidates())


def choose_client_ip(candidates: Iterable[str]) -> bytes | None:
    """Pick the address RocketMQ would: the first public IPv4, else the first private one.

    Loopback, link-local, unspecified, multicast, reserved and non-IPv4 entries are skipped;
    "private" means 10/8, 172.16/12 and 192.168/16, as in Java's ``UtilAll.isInternalIP``.
    """
    first_private: bytes | None = None
    for text in candidates:
        try:
            address = ipaddress.IPv4Address(text)
        except ValueError:
            continue
        if (address.is_loopback or address.is_link_local or address.is_unspecified
                or address.is_multicast or address.is_reserved):
            continue
        if not any(address in network for network in _INTERNAL_NETWORKS):
            return address.packed
        if first_private is None:
            first_private = address.packed
    return first_private


def _local_ipv4_candidates() -> list[str]:
    """IPv4 addresses of this host: its name's addresses, then the default route's source."""
    candidates: list[str] = []
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
        candidates.extend(str(info[4][0]) for info in infos)
    except OSError:
        pass
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(_ROUTE_PROBE_ADDRESS)  # sends nothing; picks the outgoing interface
            candidates.append(str(probe.getsockname()[0]))
    except OSError:
        pass
    return candidates


__all__ = [
    "UniqueKeyGenerator", "UniqueKeyParts", "choose_client_ip", "client_ip_or_fake",
    "decode_offset_msg_id", "decode_unique_key", "discover_client_ip", "encode_offset_msg_id",
    "month_start_ms", "unique_key_timestamp_ms", "wall_clock_ms",
]
