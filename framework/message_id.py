"""UNIQ_KEY generation for producers, as RocketMQ's ``MessageClientIDSetter`` does (§2.2).

A UNIQ_KEY is 16 bytes shown as 32 uppercase hex characters::

    +--------+-------+-------------------+----------------------+---------+
    | IPv4   | pid   | class-loader hash | ms since month start | counter |
    | 4      | 2     | 4                 | 4                    | 2       |
    +--------+-------+-------------------+----------------------+---------+
      4 + 2 + 4 + 4 + 2 = 16 bytes → 32 hex characters

The byte layout itself lives in ``storage_engine.formats`` (one encoder for the engine, the CLI
and this module); this module adds what a producer process needs around it: finding the client
IP, the pid, a random per-generator "class-loader hash", and an injected clock.

Invariants:

* The first 10 bytes (IP, pid, class-loader hash) are fixed for the life of a generator.
* The time field is milliseconds since the start of the current month in local time; the month
  start is recomputed when the clock passes the next month start, and a clock that steps back a
  little (less than 1,000,000 ms, e.g. NTP) before the month start gives 0, never a negative.
* The counter rises by one per key (mod 65,536) across all threads of one generator, so keys
  are unique as long as fewer than 65,536 keys are made in one millisecond.

Thread-safety: ``UniqueKeyGenerator.next`` is safe from any thread (one lock; the clock is read
under it, so the time field never goes backwards relative to the counter). Nothing is persisted;
a restarted process makes a new generator with a new class-loader hash.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple

from postbox.storage_engine.formats import UniqueKeyGenerator as _KeyEncoder
from postbox.storage_engine.formats import decode_unique_key as _decode_key_fields

_INTERNAL_NETWORKS = tuple(
    ipaddress.IPv4Network(network) for network in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
)
_ROUTE_PROBE_ADDRESS = ("192.0.2.1", 9)  # TEST-NET-1; a UDP connect only picks a route
IPV4_SIZE_BYTES = 4
PID_MASK = 0xFFFF
CLASS_LOADER_HASH_BITS = 32


def wall_clock_ms() -> int:
    """The wall clock in epoch ms: the default clock of ``UniqueKeyGenerator``.

    Defined here rather than taken from ``storage_engine.SystemClock`` because importing the
    engine's package root pulls in its internals, which the import contract forbids.
    """
    return time.time_ns() // 1_000_000


class UniqueKeyParts(NamedTuple):
    """The fields of a UNIQ_KEY, with its creation time when a reference time was given."""

    ip: str
    pid: int
    timestamp_ms_approx: int | None
    counter: int
    class_loader_hash: int
    ms_since_month_start: int


class UniqueKeyGenerator:
    """Makes UNIQ_KEY values for one producer process.

    Args:
        clock_ms: returns the current time in epoch milliseconds (default: the wall clock).
        ip: the 4-byte IPv4 (or 16-byte IPv6) address to embed; default: the first public
            IPv4 address of this host, else a private one, else the low 4 bytes of the clock.
        pid: the process id to embed (its low 16 bits); default ``os.getpid()``.
        class_loader_hash: the 32-bit value Java fills with the class loader's hash code;
            default: random, fixed for this generator.
    """

    def __init__(self, clock_ms: Callable[[], int] = wall_clock_ms, *,
                 ip: bytes | None = None, pid: int | None = None,
                 class_loader_hash: int | None = None) -> None:
        self._clock_ms = clock_ms
        ip_bytes = ip if ip is not None else client_ip_or_fake(clock_ms)
        if len(ip_bytes) not in (4, 16):
            raise ValueError(f"ip must be 4 (IPv4) or 16 (IPv6) bytes, got {len(ip_bytes)}")
        if class_loader_hash is None:
            class_loader_hash = random.getrandbits(CLASS_LOADER_HASH_BITS)
        if not 0 <= class_loader_hash < 1 << CLASS_LOADER_HASH_BITS:
            raise ValueError(f"class_loader_hash must fit in 32 bits, got {class_loader_hash}")
        self._encoder = _KeyEncoder(str(ipaddress.ip_address(ip_bytes)),
                                    (os.getpid() if pid is None else pid) & PID_MASK,
                                    class_loader_hash)
        self._lock = threading.Lock()

    def next(self) -> str:
        """Return the next UNIQ_KEY (32 uppercase hex characters for an IPv4 address)."""
        with self._lock:
            return self._encoder.next_key(self._clock_ms())


def decode_unique_key(unique_key: str, reference_ms: int | None = None) -> UniqueKeyParts:
    """Split a UNIQ_KEY into its fields.

    The key holds only the milliseconds since a month start, so its creation time is known only
    relative to a reference time (usually now): ``timestamp_ms_approx`` is filled in when
    ``reference_ms`` is given (see ``unique_key_timestamp_ms``), else it is None.

    Raises:
        ValueError: the string is not 32 or 56 hex characters.
    """
    fields = _decode_key_fields(unique_key)
    timestamp_ms = None
    if reference_ms is not None:
        timestamp_ms = _timestamp_from_elapsed(fields.ms_since_month_start, reference_ms)
    loader_hash = fields.class_loader_hash & 0xFFFFFFFF
    return UniqueKeyParts(fields.ip, fields.pid, timestamp_ms, fields.counter, loader_hash,
                          fields.ms_since_month_start)


def unique_key_timestamp_ms(unique_key: str, reference_ms: int) -> int:
    """Approximate creation time (epoch ms) of a key made no later than ``reference_ms``.

    Like Java's ``getNearlyTimeFromID``: the elapsed time is added to the start of the month
    (local time) that contains ``reference_ms``; if that lands after ``reference_ms`` the key
    must be from the previous month. Exact for keys younger than a month, given the same zone.
    """
    return _timestamp_from_elapsed(_decode_key_fields(unique_key).ms_since_month_start,
                                   reference_ms)


def _timestamp_from_elapsed(ms_since_month_start: int, reference_ms: int) -> int:
    start_ms = local_month_start_ms(reference_ms)
    if start_ms + ms_since_month_start > reference_ms:
        start_ms = local_month_start_ms(start_ms - 1)
    return start_ms + ms_since_month_start


def local_month_start_ms(now_ms: int) -> int:
    """Epoch ms of 00:00:00.000 local time on the first day of the month containing ``now_ms``."""
    local = time.localtime(now_ms / 1000)
    return int(time.mktime((local.tm_year, local.tm_mon, 1, 0, 0, 0, 0, 0, -1)) * 1000)


def client_ip_or_fake(clock_ms: Callable[[], int]) -> bytes:
    """This host's client IP (see ``choose_client_ip``), else the low 4 bytes of the clock."""
    found = discover_client_ip()
    if found is not None:
        return found
    return (clock_ms() & 0xFFFFFFFF).to_bytes(IPV4_SIZE_BYTES, "big")


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
    "decode_unique_key", "discover_client_ip", "local_month_start_ms", "unique_key_timestamp_ms",
    "wall_clock_ms",
]
