"""Rebalance allocation: which message queues one consumer of a group reads (reference §12.5).

Every consumer of a group runs the same strategy over the same inputs (all queues of the topic,
all consumer ids of the group) and keeps only its own share, so no coordination is needed beyond
agreeing on those two lists. The strategies reproduce RocketMQ's client exactly, so a Postbox
consumer and a RocketMQ consumer of one group split the queues the same way.

Invariants (checked by the property tests):

* Both lists are sorted (queues by topic, broker name, queue id; ids lexicographically) and
  de-duplicated before allocating, so the result does not depend on the order of the inputs.
* Over all consumer ids the shares are disjoint and their union is exactly the queue set.
* A consumer id that is not in the list gets ``[]``; so does everyone when there are no queues.
* Each share is returned in queue order.

Thread-safety: the strategies hold no mutable state; ``MessageQueue`` is immutable. Nothing here
touches disk, so there is nothing to survive a crash.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

DEFAULT_BROKER_NAME = "postbox"
VIRTUAL_NODE_COUNT_DEFAULT = 10


@functools.total_ordering
@dataclass(frozen=True, slots=True)
class MessageQueue:
    """One queue of a topic on one broker.

    Ordered like RocketMQ's ``MessageQueue.compareTo``: by topic, then broker name, then queue
    id (not by field order, which is why the ordering is written out instead of ``order=True``).
    """

    topic: str
    queue_id: int
    broker_name: str = DEFAULT_BROKER_NAME

    def sort_key(self) -> tuple[str, str, int]:
        """``(topic, broker_name, queue_id)``, the order rebalancing sorts queues by."""
        return (self.topic, self.broker_name, self.queue_id)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, MessageQueue):
            return NotImplemented
        return self.sort_key() < other.sort_key()

    def java_string(self) -> str:
        """Java's ``MessageQueue.toString()``, the key the consistent-hash strategy hashes."""
        return (f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, "
                f"queueId={self.queue_id}]")


class AllocationStrategy(Protocol):
    """Chooses the queues one consumer of a group reads."""

    name: str

    def allocate(self, consumer_group: str, current_id: str, queues: Sequence[MessageQueue],
                 consumer_ids: Sequence[str]) -> list[MessageQueue]:
        """Return the share of ``queues`` that ``current_id`` reads, in queue order."""
        ...


def _sorted_inputs(current_id: str, queues: Sequence[MessageQueue],
                   consumer_ids: Sequence[str]) -> tuple[list[MessageQueue], list[str], int]:
    """Sorted, de-duplicated queues and ids, and the index of ``current_id`` (−1 if absent)."""
    sorted_queues = sorted(set(queues))
    sorted_ids = sorted(set(consumer_ids))
    index = bisect.bisect_left(sorted_ids, current_id)
    if index == len(sorted_ids) or sorted_ids[index] != current_id:
        index = -1
    return sorted_queues, sorted_ids, index


class Averaging:
    """RocketMQ's ``AllocateMessageQueueAveragely`` (the default): contiguous blocks.

    With n queues and c consumers, consumer i gets ⌊n/c⌋ queues and the first n mod c consumers
    one more; 10 queues over 4 consumers → 3, 3, 2, 2. With n < c, consumers i ≥ n get nothing.
    """

    name = "averaging"

    def allocate(self, consumer_group: str, current_id: str, queues: Sequence[MessageQueue],
                 consumer_ids: Sequence[str]) -> list[MessageQueue]:
        """Return the contiguous block of queues that belongs to ``current_id``."""
        sorted_queues, sorted_ids, index = _sorted_inputs(current_id, queues, consumer_ids)
        if index < 0 or not sorted_queues:
            return []
        start, size = averaging_range(len(sorted_queues), len(sorted_ids), index)
        return sorted_queues[start:start + size]


def averaging_range(queue_count: int, consumer_count: int, index: int) -> tuple[int, int]:
    """``(start, size)`` of consumer ``index``'s block, exactly as RocketMQ computes it."""
    remainder = queue_count % consumer_count
    gets_extra = remainder > 0 and index < remainder
    if queue_count <= consumer_count:
        size = 1
    else:
        size = queue_count // consumer_count + (1 if gets_extra else 0)
    start = index * size if gets_extra else index * size + remainder
    return start, max(0, min(size, queue_count - start))


class ByCircle:
    """RocketMQ's ``AllocateMessageQueueAveragelyByCircle``: consumer i gets i, i+c, i+2c, …"""

    name = "circle"

    def allocate(self, consumer_group: str, current_id: str, queues: Sequence[MessageQueue],
                 consumer_ids: Sequence[str]) -> list[MessageQueue]:
        """Return every c-th queue starting at the index of ``current_id``."""
        sorted_queues, sorted_ids, index = _sorted_inputs(current_id, queues, consumer_ids)
        if index < 0:
            return []
        return sorted_queues[index::len(sorted_ids)]


@dataclass(frozen=True, slots=True)
class ConsistentHash:
    """RocketMQ's ``AllocateMessageQueueConsistentHash`` with its default MD5 hash.

    Each consumer id puts ``virtual_node_count`` nodes on a 32-bit ring, keyed
    ``"<id>-<k>"``; a queue goes to the first node at or after the hash of
    ``MessageQueue [topic=…, brokerName=…, queueId=…]``, wrapping to the lowest node. Adding or
    removing one consumer moves only the queues that land on its nodes. When two nodes hash
    alike, the one added later wins, as in Java's ``TreeMap.put`` (ids in sorted order, k rising).
    """

    virtual_node_count: int = VIRTUAL_NODE_COUNT_DEFAULT
    name = "consistent_hash"

    def __post_init__(self) -> None:
        if self.virtual_node_count < 1:
            raise ValueError(f"virtual_node_count must be >= 1, got {self.virtual_node_count}")

    def allocate(self, consumer_group: str, current_id: str, queues: Sequence[MessageQueue],
                 consumer_ids: Sequence[str]) -> list[MessageQueue]:
        """Return the queues whose ring successor is one of ``current_id``'s virtual nodes."""
        sorted_queues, sorted_ids, index = _sorted_inputs(current_id, queues, consumer_ids)
        if index < 0:
            return []
        ring_hashes, ring_owners = self._ring(sorted_ids)
        return [queue for queue in sorted_queues
                if _route(ring_hashes, ring_owners, md5_hash(queue.java_string())) == current_id]

    def _ring(self, sorted_ids: list[str]) -> tuple[list[int], list[str]]:
        """The ring as parallel lists: node hashes ascending, and the id owning each node."""
        owner_by_hash: dict[int, str] = {}
        for consumer_id in sorted_ids:
            for k in range(self.virtual_node_count):
                owner_by_hash[md5_hash(f"{consumer_id}-{k}")] = consumer_id
        ring_hashes = sorted(owner_by_hash)
        return ring_hashes, [owner_by_hash[node_hash] for node_hash in ring_hashes]


def _route(ring_hashes: list[int], ring_owners: list[str], key_hash: int) -> str:
    """Owner of the first node whose hash is >= ``key_hash``, wrapping to the first node."""
    position = bisect.bisect_left(ring_hashes, key_hash)
    return ring_owners[position % len(ring_owners)]


def md5_hash(key: str) -> int:
    """First 4 bytes of MD5(UTF-8 ``key``) as an unsigned big-endian int (RocketMQ's MD5Hash)."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


_STRATEGY_FACTORIES: dict[str, Callable[[], AllocationStrategy]] = {
    Averaging.name: Averaging,
    ByCircle.name: ByCircle,
    ConsistentHash.name: ConsistentHash,
}


def strategy_by_name(name: str) -> AllocationStrategy:
    """Return a new strategy for ``"averaging"``, ``"circle"`` or ``"consistent_hash"``.

    Raises:
        ValueError: ``name`` is none of those; the message lists the choices.
    """
    factory = _STRATEGY_FACTORIES.get(name)
    if factory is None:
        choices = ", ".join(repr(choice) for choice in _STRATEGY_FACTORIES)
        raise ValueError(f"unknown allocation strategy {name!r}: choose one of {choices}")
    return factory()


__all__ = [
    "AllocationStrategy", "Averaging", "ByCircle", "ConsistentHash", "MessageQueue",
    "averaging_range", "md5_hash", "strategy_by_name",
]
