"""Small commit-log segments of every kind of record, intact or damaged, for the tests that
compare the native record loops (``walk_records``, ``scan_records``, ``decode_run``) with the
pure-Python reference."""

from __future__ import annotations

import struct

from hypothesis import strategies as st

from postbox.storage_engine.formats import engine, properties
from postbox.storage_engine.formats.record import (
    PROPERTY_CRC_PLACEHOLDER,
    encode_blank_record,
    encode_record_parts,
    seal_property_crc,
)

IPV4, IPV6 = bytes([10, 0, 0, 1, 0, 0, 0x13, 0x88]), bytes(range(16)) + b"\x00\x00\x13\x88"
DELIVERED = {"REAL_TOPIC": "orders", "REAL_QID": "1", "UNIQ_KEY": "U2"}
KINDS = {  # name -> (topic, properties, born host, store host, v2): a record of each kind
    "plain": ("orders", {"UNIQ_KEY": "U1", "TAGS": "t"}, IPV4, IPV4, False),
    "dlq": ("%DLQ%billing", {"UNIQ_KEY": "U3", "RETRY_TOPIC": "orders"}, IPV4, IPV4, False),
    "retry": ("%RETRY%billing", {"RECONSUME_TIME": "2"}, IPV4, IPV4, False),
    "delivered": ("orders", DELIVERED, IPV4, IPV4, False),
    "scheduled": ("SCHEDULE_TOPIC_XXXX", {**DELIVERED, "DELAY": "2"}, IPV4, IPV4, False),
    "no properties": ("orders", {}, IPV4, IPV4, False),
    "v2": ("%DLQ%v2", {"UNIQ_KEY": "U4"}, IPV4, IPV4, True),
    "born v6": ("%RETRY%v6", DELIVERED, IPV6, IPV4, False),
    "store v6": ("orders", DELIVERED, IPV4, IPV6, False),
}
COMMON = ("plain", "dlq", "retry", "delivered", "scheduled", "no properties")


def encoded(kind: str, *, crc_tail: bool = True, position: int = 0, body: bytes = b"b" * 40
            ) -> bytes:
    """One record of ``kind``, with the property CRC tail as the store writes it or without."""
    topic, values, born, store, v2 = KINDS[kind]
    raw = properties.encode_properties(values)
    if crc_tail:
        raw += PROPERTY_CRC_PLACEHOLDER
    one = encode_record_parts(topic.encode(), v2, body, raw, 1, 0, 7, position, 0, 11, born, 22,
                              store, 0, 0, engine.masked_crc32(body))
    return seal_property_crc(one) if crc_tail else one


def records(kinds: list[str], crc_tails: bool | None = True) -> list[bytes]:
    """Records of ``kinds``, each at its position: with property CRC tails, without, or (None)
    every third one without."""
    found: list[bytes] = []
    for number, kind in enumerate(kinds):
        tail = number % 3 != 2 if crc_tails is None else crc_tails
        found.append(encoded(kind, crc_tail=tail, position=sum(map(len, found))))
    return found


def segment(kinds: list[str], crc_tails: bool | None = True, tail_bytes: int = 64) -> bytes:
    """Records of ``kinds`` back to back, then a blank record filling ``tail_bytes``."""
    return b"".join(records(kinds, crc_tails)) + encode_blank_record(tail_bytes) + bytes(
        tail_bytes - 8)


def damage(how: str) -> tuple[bytes, int]:
    """``segment(MIDDLE)`` damaged in its third record; returns it and its limit."""
    data = bytearray(segment(MIDDLE))
    start = sum(map(len, records(MIDDLE)[:2]))
    end = start + len(records(MIDDLE)[2])
    if how == "body byte":
        data[start + 90] ^= 0x01
    elif how == "property CRC digit":
        data[end - 5] = ord("0") + (data[end - 5] - ord("0") + 1) % 10
    elif how == "torn tail":
        data[end - 30:end] = bytes(30)
    elif how == "pair end":
        data[end - 1] = ord("x")
    elif how == "magic":
        struct.pack_into(">i", data, start + 4, 0x12345678)
    elif how == "size":
        struct.pack_into(">i", data, start, end - start + 1)
    elif how == "truncated":
        return bytes(data[:end - 10]), end - 10
    elif how == "blank in the middle":
        data[start:start + 8] = encode_blank_record(len(data) - start)
    return bytes(data), len(data)


MIDDLE = ["plain", "dlq", "delivered", "retry", "delivered"]
DAMAGE = ["body byte", "property CRC digit", "torn tail", "pair end", "magic", "size",
          "truncated", "blank in the middle"]
CRC_DAMAGE = ("body byte", "property CRC digit", "torn tail", "pair end")  # lengths still hold


@st.composite
def mutated(draw) -> tuple[bytes, int, bool]:
    """A small segment of any kinds of record with bytes and fields overwritten and a limit
    anywhere (mostly the end)."""
    kinds = draw(st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=6))
    crc_tails = draw(st.sampled_from([True, False, None]))
    buf = bytearray(segment(kinds, crc_tails, draw(st.sampled_from([8, 16, 100]))))
    for _ in range(draw(st.integers(0, 3))):
        buf[draw(st.integers(0, len(buf) - 1))] = draw(st.integers(0, 255))
    written = records(kinds, crc_tails)
    starts = [sum(map(len, written[:n])) for n in range(len(kinds))]
    for start, field, value in draw(st.lists(st.tuples(
            st.sampled_from(starts), st.sampled_from([0, 4, 8, 36, 84, 128]),
            st.integers(-(1 << 31), (1 << 31) - 1)), max_size=2)):
        if start + field + 4 <= len(buf):
            struct.pack_into(">i", buf, start + field, value)
    limit = draw(st.one_of(st.just(len(buf)), st.integers(0, len(buf))))
    return bytes(buf), limit, draw(st.booleans())

