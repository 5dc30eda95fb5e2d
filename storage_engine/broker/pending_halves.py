"""``PendingHalves``: the table of half messages whose transaction has not ended, indexed so that
every operation a send, an end or a check pass makes costs O(log n) however many are pending.

Each transaction has one entry, its latest copy, found by the copy's commit-log position and by
the transaction's key. Two heaps answer the check service: the earliest due time (which halves
to check, when to wake) and the lowest queue offset (how far the half progress offset may
advance). Entries leave the heaps lazily: a heap item is current while the table still holds
that position with that due time or queue offset; stale items are dropped when they reach the
top, and a heap grown past twice the table (plus ``_COMPACT_SLACK``) is rebuilt, so ended
transactions do not accumulate behind an old pending one.

Thread-safety: none; ``HalfMessages`` calls it under its lock.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

_COMPACT_SLACK = 1024


@dataclass
class PendingHalf:
    """A half message whose transaction has not ended: its latest copy."""

    queue_offset: int
    log_position: int
    key: str
    producer_group: str
    due_ms: int
    check_times: int


class PendingHalves:
    """The pending halves by position and key, with the due and queue-offset heaps."""

    def __init__(self) -> None:
        self._by_position: dict[int, PendingHalf] = {}
        self._by_key: dict[str, int] = {}
        self._due: list[tuple[int, int]] = []  # (due_ms, log_position)
        self._offsets: list[tuple[int, int]] = []  # (queue_offset, log_position)

    def __len__(self) -> int:
        return len(self._by_position)

    def __iter__(self) -> Iterator[PendingHalf]:
        return iter(self._by_position.values())

    def at(self, log_position: int) -> PendingHalf | None:
        """The pending half whose latest copy is at ``log_position``."""
        return self._by_position.get(log_position)

    def of_key(self, key: str) -> PendingHalf | None:
        """The pending half of the transaction ``key``."""
        position = self._by_key.get(key)
        return None if position is None else self._by_position.get(position)

    def put(self, half: PendingHalf) -> None:
        """Record ``half`` as the latest copy of its transaction (replacing an earlier copy)."""
        previous = self._by_key.get(half.key)
        if previous is not None:
            self._by_position.pop(previous, None)
        self._by_position[half.log_position] = half
        self._by_key[half.key] = half.log_position
        heapq.heappush(self._due, (half.due_ms, half.log_position))
        heapq.heappush(self._offsets, (half.queue_offset, half.log_position))
        if len(self._due) + len(self._offsets) > 4 * len(self._by_position) + _COMPACT_SLACK:
            self._compact()

    def remove(self, half: PendingHalf) -> None:
        """End ``half``'s transaction here (its heap items go stale)."""
        del self._by_position[half.log_position]
        del self._by_key[half.key]

    def due(self, now_ms: int, limit: int) -> list[PendingHalf]:
        """Up to ``limit`` halves due by ``now_ms``, earliest first (they stay pending)."""
        found: list[PendingHalf] = []
        while self._due and self._due[0][0] <= now_ms and len(found) < limit:
            due_ms, position = heapq.heappop(self._due)
            half = self._by_position.get(position)
            if half is not None and half.due_ms == due_ms and half not in found:
                found.append(half)
        for half in found:
            heapq.heappush(self._due, (half.due_ms, half.log_position))
        return found

    def next_due_ms(self) -> int | None:
        """When the earliest pending half falls due, or None when none is pending."""
        heap = self._due
        while heap and not self._current(heap[0][1], due_ms=heap[0][0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def lowest_queue_offset(self) -> int | None:
        """The lowest half-queue offset of a pending half, or None when none is pending."""
        heap = self._offsets
        while heap and not self._current(heap[0][1], queue_offset=heap[0][0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def _current(self, position: int, *, due_ms: int | None = None,
                 queue_offset: int | None = None) -> bool:
        half = self._by_position.get(position)
        return half is not None and (due_ms is None or half.due_ms == due_ms) and (
            queue_offset is None or half.queue_offset == queue_offset)

    def _compact(self) -> None:
        halves = self._by_position.values()
        self._due = [(half.due_ms, half.log_position) for half in halves]
        self._offsets = [(half.queue_offset, half.log_position) for half in halves]
        heapq.heapify(self._due)
        heapq.heapify(self._offsets)


__all__ = ["PendingHalf", "PendingHalves"]
