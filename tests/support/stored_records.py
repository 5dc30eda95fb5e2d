"""Stored records as remoting answers carry them (a pull, view or query body), decoded by the
independent ``rmq_decoder``."""

from __future__ import annotations

import struct
from typing import Any

from tests.support.rmq_decoder import _decode_record


def decode_records(body: bytes) -> list[Any]:
    """Stored records back to back (a pull, view or query body), decoded by the independent
    ``rmq_decoder``; asserts each is well formed."""
    records = []
    at = 0
    while at < len(body):
        (size,) = struct.unpack_from(">i", body, at)
        (position,) = struct.unpack_from(">q", body, at + 28)
        problems: list[str] = []
        record = _decode_record(body[at:at + size], 0, position, problems)
        assert record is not None and not problems, problems
        records.append(record)
        at += size
    assert at == len(body)
    return records
