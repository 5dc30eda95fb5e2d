"""Properties string codec (§1.4): ``name\\x01value\\x02`` pairs, with RocketMQ's parse rules."""

from __future__ import annotations

from collections.abc import Mapping

from .constants import KEY_SEPARATOR
from .hashing import java_string_hashcode

# --------------------------------------------------------------------------------------------
# Properties (reference §1.4, VECTORS.md §7)
# --------------------------------------------------------------------------------------------

def encode_properties(properties: Mapping[str, str | None]) -> bytes:
    """Serialize ``name\\x01value\\x02`` for every entry whose value is not None, as UTF-8.

    Raises:
        ValueError: a name or value contains U+0001 or U+0002 (it would corrupt the framing).
    """
    parts = []
    for name, value in properties.items():
        if value is None:
            continue
        value = str(value)
        if "\x01" in name or "\x02" in name or "\x01" in value or "\x02" in value:
            raise ValueError(f"property {name!r} contains U+0001 or U+0002 in its name or value")
        parts.append(f"{name}\x01{value}\x02")
    return "".join(parts).encode("utf-8")


def decode_properties(text: str | bytes | bytearray | memoryview) -> dict[str, str]:
    """Parse a properties string with RocketMQ's rules; malformed segments are dropped.

    A segment ends at U+0002; segments shorter than 3 characters are skipped; a pair is kept only
    when its first U+0001 lies inside the segment with a non-empty name and a non-empty value;
    later duplicates win.
    """
    if isinstance(text, bytes | bytearray | memoryview):
        text = bytes(text).decode("utf-8", errors="replace")
    result: dict[str, str] = {}
    for segment in text.split("\x02"):
        if len(segment) >= 3:
            name, separator, value = segment.partition("\x01")
            if separator and name and value:
                result[name] = value
    return result


def split_keys(keys_property: str | None) -> list[str]:
    """Split the KEYS property on single spaces, dropping empty tokens."""
    if not keys_property:
        return []
    return [key for key in keys_property.split(KEY_SEPARATOR) if key]


def java_hashmap_order(names: list[str], capacity: int = 128) -> list[str]:
    """Order property names the way a Java ``HashMap`` of ``capacity`` buckets iterates them.

    Broker-written records store properties in this order (§1.4). Only needed for byte-exact
    reproduction of Java output; readers never depend on order.
    """
    def bucket(name: str) -> int:
        h = java_string_hashcode(name) & 0xFFFFFFFF  # as Java's unsigned shift sees it
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(names, key=bucket)  # sorted() is stable: insertion order within a bucket
