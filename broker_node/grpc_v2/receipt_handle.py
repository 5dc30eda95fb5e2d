"""Receipt handles: the token a consumer presents to ack, extend or dead-letter one delivery.

Text form (what ``ReceiveMessage`` hands out in ``system_properties.receipt_handle``)::

    pb1 <stored topic> <queue id> <queue offset> <lease token>

``stored topic`` is where the delivered record lives (``%RETRY%group`` for a redelivery), so
the handle names one consume-queue entry; ``lease token`` is 16 random hex digits drawn for
each lease (each receive and each ``ChangeInvisibleDuration``), so a handle is valid for one
lease only: after the lease expired (the message was redirected), was renewed under a new
token, or the server restarted, the old handle is refused (``INVALID_RECEIPT_HANDLE``). The
consumer group is not in the handle; the request names it and the lease is looked up under it.
Decoding checks every field (topic rules, integer ranges, token shape) before anything is
looked up. Pure.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from postbox.storage_engine.contract.topics import validate_topic
from postbox.storage_engine.errors import InvalidMessageError

from .protocol import Code
from .statuses import RequestError

VERSION = "pb1"
HANDLE_LENGTH_MAX = 400
_TOKEN = re.compile(r"[0-9a-f]{16}")
_INTEGER = re.compile(r"0|[1-9][0-9]{0,18}")


@dataclass(frozen=True)
class ReceiptHandle:
    """One lease on one consume-queue entry."""

    topic: str
    queue_id: int
    offset: int
    token: str

    def encode(self) -> str:
        """The text form."""
        return f"{VERSION} {self.topic} {self.queue_id} {self.offset} {self.token}"

    @classmethod
    def decode(cls, text: str) -> ReceiptHandle:
        """Parse a handle; ``RequestError(INVALID_RECEIPT_HANDLE)`` when malformed."""
        parts = text.split(" ") if len(text) <= HANDLE_LENGTH_MAX else []
        if len(parts) != 5 or parts[0] != VERSION or not _INTEGER.fullmatch(parts[2]) \
                or not _INTEGER.fullmatch(parts[3]) or not _TOKEN.fullmatch(parts[4]):
            raise RequestError(Code.INVALID_RECEIPT_HANDLE,
                               f"malformed receipt handle {text[:80]!r}")
        try:
            topic = validate_topic(parts[1])
        except InvalidMessageError as error:
            raise RequestError(Code.INVALID_RECEIPT_HANDLE,
                               f"receipt handle names an invalid topic: {error}") from error
        return cls(topic, int(parts[2]), int(parts[3]), parts[4])


def new_token() -> str:
    """A fresh lease token."""
    return secrets.token_hex(8)


__all__ = ["ReceiptHandle", "new_token"]
