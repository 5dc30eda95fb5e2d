"""The frame every message of Postbox's gRPC service carries, and typed reads of its fields.

A request or response is one byte string::

    offset size field
     0     4   HEADER LENGTH  H (unsigned, big-endian)
     4     H   HEADER         compact JSON object (UTF-8): the call's named values
     4+H   P   PAYLOAD        raw bytes: a message body, or commit-log records back to back

so values that are small and many (names, offsets, flags) stay readable JSON while bodies and
records travel as bytes, never base64. ``Fields`` reads a header's values with the type checks
that input from the network needs: a wrong or missing value raises ``InvalidMessageError``
(INVALID_ARGUMENT on the wire), never ``TypeError``. Pure; safe to share between threads.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

from storage_engine.errors import InvalidMessageError

HEADER_LENGTH = struct.Struct(">I")
assert HEADER_LENGTH.size == 4
HEADER_BYTES_MAX = 1 << 20
"""Largest JSON header accepted (1 MiB): a header holds names and numbers, never bodies."""

_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False)
_decode = json.JSONDecoder().decode


def pack(header: Mapping[str, Any], payload: bytes = b"") -> bytes:
    """One frame: the header as compact JSON, then ``payload``."""
    return pack_encoded(encode_json(header), payload)


def encode_json(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON (a header, or a part of one built by hand).

    Raises:
        InvalidMessageError: a value JSON cannot carry (bytes, objects, NaN is allowed).
    """
    try:
        return _encoder.encode(value).encode("utf-8")
    except (TypeError, ValueError) as error:
        raise InvalidMessageError(f"cannot encode {value!r} for the wire: {error}") from error


def pack_encoded(head: bytes, payload: bytes = b"") -> bytes:
    """One frame from an already encoded JSON header."""
    return b"".join((HEADER_LENGTH.pack(len(head)), head, payload))


def unpack(frame: bytes) -> tuple[Fields, bytes]:
    """Split a frame into its header fields and payload.

    Raises:
        InvalidMessageError: the frame is truncated or its header is not a JSON object.
    """
    if len(frame) < HEADER_LENGTH.size:
        raise InvalidMessageError(f"frame of {len(frame)} bytes has no header length")
    (length,) = HEADER_LENGTH.unpack_from(frame, 0)
    end = HEADER_LENGTH.size + length
    if length > HEADER_BYTES_MAX or end > len(frame):
        raise InvalidMessageError(f"frame header of {length} bytes does not fit a "
                                  f"{len(frame)}-byte frame (at most {HEADER_BYTES_MAX})")
    try:
        header = _decode(frame[HEADER_LENGTH.size:end].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise InvalidMessageError(f"frame header is not JSON: {error}") from error
    if not isinstance(header, dict):
        raise InvalidMessageError("frame header is not a JSON object")
    return Fields(header), frame[end:]


class Fields:
    """Typed, checked access to a frame header's values."""

    __slots__ = ("values",)

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def _get(self, name: str, kinds: tuple[type, ...], optional: bool) -> Any:
        value = self.values.get(name)
        if value is None and optional:
            return None
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            wanted = " or ".join(kind.__name__ for kind in kinds)
            raise InvalidMessageError(f"field {name!r} must be {wanted}, got {value!r}")
        return value

    def text(self, name: str) -> str:
        """A required string."""
        return self._get(name, (str,), False)

    def optional_text(self, name: str) -> str | None:
        """A string or None."""
        return self._get(name, (str,), True)

    def integer(self, name: str) -> int:
        """A required integer (not a bool)."""
        return self._get(name, (int,), False)

    def optional_integer(self, name: str) -> int | None:
        """An integer or None."""
        return self._get(name, (int,), True)

    def flag(self, name: str) -> bool:
        """A required bool."""
        return self._get(name, (bool,), False)

    def text_list(self, name: str) -> list[str]:
        """A required list of strings."""
        values = self._get(name, (list,), False)
        if not all(isinstance(value, str) for value in values):
            raise InvalidMessageError(f"field {name!r} must be a list of strings")
        return values

    def text_map(self, name: str) -> dict[str, str] | None:
        """A string-to-string object, or None."""
        values = self._get(name, (dict,), True)
        if values is not None and not all(isinstance(v, str) for v in values.values()):
            raise InvalidMessageError(f"field {name!r} must map strings to strings")
        return values

    def queue_list(self, name: str) -> list[tuple[str, int]]:
        """A required list of ``[topic, queue_id]`` pairs."""
        return [(topic, queue_id) for topic, queue_id, *_ in self._pairs(name, 2)]

    def queue_positions(self, name: str) -> dict[tuple[str, int], int]:
        """A required list of ``[topic, queue_id, offset]`` triples, as a mapping."""
        return {(topic, queue_id): offset for topic, queue_id, offset in self._pairs(name, 3)}

    def _pairs(self, name: str, width: int) -> list[list]:
        items = self._get(name, (list,), False)
        for item in items:
            if (not isinstance(item, list) or len(item) != width
                    or not isinstance(item[0], str)
                    or not all(type(part) is int for part in item[1:])):
                raise InvalidMessageError(f"field {name!r} must hold [topic, queue id"
                                          f"{', offset' if width == 3 else ''}] items, "
                                          f"got {item!r}")
        return items


__all__ = ["HEADER_BYTES_MAX", "HEADER_LENGTH", "Fields", "encode_json", "pack", "pack_encoded",
           "unpack"]
