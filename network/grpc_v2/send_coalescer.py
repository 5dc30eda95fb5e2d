"""``SendCoalescer``: concurrent sends of one client share ``SendBatch`` calls (group commit).

A unary gRPC call costs far more than storing a message, so when several threads send at once
their messages travel together, through the project's one leader/follower batcher
(``storage_engine.group_commit.GroupCommit``): each ``submit`` queues its message; a caller that
finds no call in flight takes the queued messages from the oldest on while they share its topic
— up to ``batch_count_max`` messages and ``batch_bytes_max`` body bytes (a larger message goes
alone) — and makes the call for all of them, then everyone whose message was in it returns its
own result. A lone sender makes a call of one at once, so no latency is added. One topic per
batch keeps access control exact (a denied topic fails only its own messages); the server stores
a batch's messages in order, and a thread's sends stay in its call order (each waits for its
result). One call is in flight at a time.

Thread-safety: ``submit`` may be called from any thread. Nothing is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from storage_engine.group_commit import GroupCommit

BATCH_COUNT_MAX = 256
BATCH_BYTES_MAX = 1 << 20


class _Entry(NamedTuple):
    topic: object
    header: bytes
    body: bytes


SendBatch = Callable[[list[bytes], list[bytes]], list[Any]]
"""(encoded headers, bodies) → one outcome per message (an answer, or an exception instance)."""


class SendCoalescer:
    """Batches concurrent sends; see the module docstring."""

    def __init__(self, send_batch: SendBatch, *, batch_count_max: int = BATCH_COUNT_MAX,
                 batch_bytes_max: int = BATCH_BYTES_MAX) -> None:
        self._send_batch = send_batch
        self._bytes_max = batch_bytes_max
        self._batch_bytes = 0  # body bytes of the batch the leader is taking
        self._calls: GroupCommit[_Entry, Any] = GroupCommit(
            self._call, max_items=batch_count_max, joins=self._joins)

    def submit(self, topic: object, header: bytes, body: bytes) -> Any:
        """Send one message (in some batch); its answer, or raise its error."""
        [outcome] = self._calls.run([_Entry(topic, header, body)])
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _joins(self, batch: list[_Entry], following: Sequence[_Entry]) -> bool:
        """Whether the next queued message may join ``batch``: same topic, within the bytes
        (called by the one leader only, in order: the batch's size is kept as it grows)."""
        if len(batch) == 1:
            self._batch_bytes = len(batch[0].body)
        size = self._batch_bytes + sum(len(entry.body) for entry in following)
        if size > self._bytes_max or any(entry.topic != batch[0].topic for entry in following):
            return False
        self._batch_bytes = size
        return True

    def _call(self, batch: list[_Entry]) -> list[Any]:
        """One ``SendBatch`` call (a failed call fails each of its messages)."""
        return self._send_batch([entry.header for entry in batch],
                                [entry.body for entry in batch])


__all__ = ["BATCH_BYTES_MAX", "BATCH_COUNT_MAX", "SendCoalescer"]
