"""UNIQ_KEY (``storage_engine.formats.message_id``, the producers' generator, re-exported by the
framework) as RocketMQ's ``MessageClientIDSetterTest`` does.

Clocks are injected (a constant or a list) except where the real wall clock is the point.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from postbox import framework
from postbox.storage_engine.formats import message_id
from postbox.storage_engine.formats.message_id import (
    UniqueKeyGenerator,
    UniqueKeyParts,
    choose_client_ip,
    decode_unique_key,
    month_start_ms,
    unique_key_timestamp_ms,
)

IP = bytes([10, 1, 2, 3])
NOW_MS = 1_700_000_123_456
DAY_MS = 86_400_000
HEX_UPPER = set("0123456789ABCDEF")


class ListClock:
    """Returns the given times in turn, then repeats the last one."""

    def __init__(self, *times_ms: int) -> None:
        self._times_ms = list(times_ms)

    def __call__(self) -> int:
        return self._times_ms.pop(0) if len(self._times_ms) > 1 else self._times_ms[0]


def next_month_start_ms(now_ms: int) -> int:
    return month_start_ms(month_start_ms(now_ms) + 32 * DAY_MS)


def test_keys_are_32_uppercase_hex_characters():
    key = UniqueKeyGenerator(lambda: NOW_MS, ip=IP, pid=42).next()
    assert len(key) == 32
    assert set(key) <= HEX_UPPER


def test_consecutive_keys_differ_by_one_in_the_last_four_hex_characters():
    generator = UniqueKeyGenerator(lambda: NOW_MS, ip=IP, pid=42)
    first, second = generator.next(), generator.next()
    assert int(second[-4:], 16) - int(first[-4:], 16) == 1
    assert first[:-4] == second[:-4]


def test_ip_pid_and_class_loader_hash_round_trip():
    generator = UniqueKeyGenerator(lambda: NOW_MS, ip=IP, pid=70_000, class_loader_hash=0xCAFEBABE)
    parts = decode_unique_key(generator.next())
    assert parts.ip == "10.1.2.3"
    assert parts.pid == 70_000 & 0xFFFF
    assert parts.class_loader_hash == 0xCAFEBABE - (1 << 32)  # a Java int, as the key holds it
    assert parts.counter == 0


def test_one_generator_family_its_fields_in_the_order_of_the_bytes():
    """MessageClientIDSetter's layout: IP, pid, class-loader hash, ms since month start,
    counter. The framework's generator is this one (no second family with its own order)."""
    assert framework.UniqueKeyGenerator is UniqueKeyGenerator
    assert UniqueKeyParts._fields == ("ip", "pid", "class_loader_hash", "ms_since_month_start",
                                      "counter")
    start_ms = month_start_ms(NOW_MS)
    generator = UniqueKeyGenerator(lambda: start_ms + 0x01020304, ip=IP, pid=0x0506,
                                   class_loader_hash=0x0708090A)
    generator.next()
    key = generator.next()
    assert key == "0A010203" "0506" "0708090A" "01020304" "0001"
    assert decode_unique_key(key) == ("10.1.2.3", 0x0506, 0x0708090A, 0x01020304, 1)


def test_prefix_is_fixed_per_generator_and_class_loader_hash_random_between_generators():
    keys = [UniqueKeyGenerator(lambda: NOW_MS, ip=IP, pid=1).next() for _ in range(8)]
    assert len({decode_unique_key(key).class_loader_hash for key in keys}) > 1
    generator = UniqueKeyGenerator(lambda: NOW_MS, ip=IP, pid=1)
    assert len({generator.next()[:20] for _ in range(10)}) == 1


def test_time_decodes_within_20_ms_of_the_wall_clock():
    generator = UniqueKeyGenerator(ip=IP)
    before_ms = time.time_ns() // 1_000_000
    key = generator.next()
    after_ms = time.time_ns() // 1_000_000
    decoded_ms = unique_key_timestamp_ms(key, after_ms)
    assert before_ms - 20 <= decoded_ms <= after_ms + 20


def test_time_decodes_exactly_with_an_injected_clock():
    key = UniqueKeyGenerator(lambda: NOW_MS, ip=IP, pid=1).next()
    assert unique_key_timestamp_ms(key, NOW_MS + 5_000) == NOW_MS
    assert unique_key_timestamp_ms(key, NOW_MS) == NOW_MS


@settings(deadline=None)
@given(now_ms=st.integers(1_000_000_000_000, 4_000_000_000_000),
       later_ms=st.integers(0, 27 * DAY_MS))
def test_time_decodes_exactly_for_any_reference_less_than_four_weeks_later(now_ms, later_ms):
    key = UniqueKeyGenerator(lambda: now_ms, ip=IP, pid=1).next()
    assert unique_key_timestamp_ms(key, now_ms + later_ms) == now_ms


@pytest.fixture(params=["UTC", "Asia/Kolkata", "America/St_Johns"])
def local_zone(request, monkeypatch):
    """Run the test with the process time zone set to each of a few offsets, then restore it."""
    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    yield request.param
    monkeypatch.undo()
    time.tzset()


def test_month_rollover_restarts_the_time_field(local_zone):
    month_end_ms = next_month_start_ms(NOW_MS)
    start_ms = month_start_ms(NOW_MS)
    generator = UniqueKeyGenerator(ListClock(month_end_ms - 1, month_end_ms + 7), ip=IP, pid=1)
    last_of_month, first_of_next = generator.next(), generator.next()

    assert decode_unique_key(last_of_month).ms_since_month_start == (
        month_end_ms - 1 - start_ms)
    assert decode_unique_key(first_of_next).ms_since_month_start == 7
    reference_ms = month_end_ms + DAY_MS
    assert unique_key_timestamp_ms(last_of_month, reference_ms) == month_end_ms - 1
    assert unique_key_timestamp_ms(first_of_next, reference_ms) == month_end_ms + 7


def test_month_start_is_local_midnight_on_the_first(local_zone):
    start = time.localtime(month_start_ms(NOW_MS) / 1000)
    assert (start.tm_mday, start.tm_hour, start.tm_min, start.tm_sec) == (1, 0, 0, 0)


def test_a_small_step_back_before_the_month_start_gives_zero():
    start_ms = month_start_ms(NOW_MS)
    generator = UniqueKeyGenerator(ListClock(start_ms + 10, start_ms - 500), ip=IP, pid=1)
    assert decode_unique_key(generator.next()).ms_since_month_start == 10
    assert decode_unique_key(generator.next()).ms_since_month_start == 0


def test_counter_wraps_at_65536():
    generator = UniqueKeyGenerator(lambda: NOW_MS, ip=IP, pid=1)
    counters = [decode_unique_key(generator.next()).counter for _ in range(65_538)]
    assert counters[-3:] == [65_535, 0, 1]


def test_100_000_keys_from_four_threads_are_unique():
    generator = UniqueKeyGenerator(ip=IP, pid=1)
    per_thread, results = 25_000, [[] for _ in range(4)]
    start = threading.Barrier(4)

    def produce(out: list[str]) -> None:
        start.wait()
        out.extend(generator.next() for _ in range(per_thread))

    threads = [threading.Thread(target=produce, args=(out,)) for out in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    keys = [key for out in results for key in out]
    assert len(keys) == 100_000
    assert len(set(keys)) == 100_000


# ---- client IP -----------------------------------------------------------------------------

@pytest.mark.parametrize(("candidates", "expected"), [
    (["127.0.1.1", "192.168.1.5", "8.8.8.8"], bytes([8, 8, 8, 8])),
    (["127.0.0.1", "10.0.0.2", "172.16.0.9"], bytes([10, 0, 0, 2])),
    (["172.32.0.1", "10.0.0.2"], bytes([172, 32, 0, 1])),  # outside 172.16/12: public
    (["::1", "fe80::1", "not an ip", "169.254.1.1", "0.0.0.0", "224.0.0.1"], None),
    ([], None),
])
def test_choose_client_ip_prefers_public_then_private_ipv4(candidates, expected):
    assert choose_client_ip(candidates) == expected


def test_without_an_address_the_ip_is_the_low_half_of_the_clock(monkeypatch):
    monkeypatch.setattr(message_id, "discover_client_ip", lambda: None)
    clock_ms = 0x0123_89AB_CDEF
    key = UniqueKeyGenerator(lambda: clock_ms, pid=1).next()
    assert key[:8] == "89ABCDEF"


def test_default_generator_uses_this_process_and_host():
    key = UniqueKeyGenerator().next()
    parts = decode_unique_key(key)
    assert len(key) == 32
    assert parts.pid == os.getpid() & 0xFFFF


def test_rejects_bad_ip_and_class_loader_hash():
    with pytest.raises(ValueError, match="ip must be 4"):
        UniqueKeyGenerator(ip=b"\x01\x02\x03")
    with pytest.raises(ValueError, match="class_loader_hash"):
        UniqueKeyGenerator(ip=IP, class_loader_hash=1 << 32)


def test_decode_rejects_malformed_keys():
    with pytest.raises(ValueError, match="UNIQ_KEY"):
        decode_unique_key("XYZ")
