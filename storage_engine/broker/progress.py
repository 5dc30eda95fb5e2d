"""``ProgressReader``: where a consumer group starts and how far behind it is.

``initial_offset`` answers "no committed offset yet" with the consume-from rules of reference
§12.2/§12.3, evaluated on the broker (RocketMQ splits them between broker and client):

* retry topics (``%RETRY%…``): LAST → 0, FIRST → 0, TIMESTAMP → the max offset;
* other topics: LAST → 0 when the queue's min offset is ≤ 0 and its first message is still "in
  memory" (RocketMQ 4.x's estimate: commit-log max position − that message's position ≤ 40 % of
  physical RAM; an empty queue also answers 0), else the max offset — so a new group on a young
  queue reads it from the start; FIRST → the min offset (RocketMQ answers 0 and lets the
  OFFSET_ILLEGAL path fix it later); TIMESTAMP → the first offset stored at or after it.

``check_offset``/``check_batch``: the arguments of a read by offset (an offset >= 0, a batch of
1..``PULL_BATCH_MAX``), checked before the broker reads.

``progress`` lists a group's committed offset against the min/max offsets of every queue of the
given topics (``postbox consumer progress``).

Thread-safety: reads only; safe from any thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from ..contract.message import GetStatus
from ..contract.model import ConsumeFrom, QueueProgress
from ..contract.rules import CONSUME_TIMESTAMP_DEFAULT_AGE_MS, PULL_BATCH_MAX
from ..errors import InvalidMessageError
from ..formats.topic_names import RETRY_TOPIC_PREFIX
from ..store.message_store import MessageStore
from .config_stores import TOPIC_GROUP_SEPARATOR, ConsumerOffsetTable

IN_MEMORY_RATIO_PERCENT = 40
"""RocketMQ's ``accessMessageInMemoryMaxRatio``: the share of RAM assumed to cache the log."""
MEMORY_BYTES_FALLBACK = 8 << 30


def physical_memory_bytes() -> int:
    """This machine's physical RAM (``SC_PAGE_SIZE * SC_PHYS_PAGES``); 8 GiB if unknown."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return MEMORY_BYTES_FALLBACK


class ProgressReader:
    """Start offsets and lag over one store and its consumer offset table."""

    def __init__(self, store: MessageStore, offsets: ConsumerOffsetTable,
                 memory_bytes: int) -> None:
        self._store = store
        self._offsets = offsets
        self._memory_bytes = memory_bytes

    def initial_offset(self, group: str, topic: str, queue_id: int,
                       consume_from: ConsumeFrom, timestamp_ms: int | None, now_ms: int) -> int:
        """The offset a group without a committed offset starts from (module docstring);
        ``timestamp_ms`` None means ``now_ms`` minus 30 minutes."""
        store = self._store
        if topic.startswith(RETRY_TOPIC_PREFIX):
            if consume_from is ConsumeFrom.TIMESTAMP:
                return store.max_offset(topic, queue_id)
            return 0
        if consume_from is ConsumeFrom.FIRST:
            return store.min_offset(topic, queue_id)
        if consume_from is ConsumeFrom.TIMESTAMP:
            if timestamp_ms is None:
                timestamp_ms = now_ms - CONSUME_TIMESTAMP_DEFAULT_AGE_MS
            return store.offset_by_time(topic, queue_id, timestamp_ms)
        if store.min_offset(topic, queue_id) <= 0 and self._first_in_memory(group, topic,
                                                                           queue_id):
            return 0
        return store.max_offset(topic, queue_id)

    def _first_in_memory(self, group: str, topic: str, queue_id: int) -> bool:
        """Whether the message at offset 0 is within the RAM share at the log's end (4.x
        ``checkInDiskByConsumeOffset`` negated); True for a queue with no message yet."""
        if self._store.max_offset(topic, queue_id) <= 0:
            return True
        result = self._store.get_message(group, topic, queue_id, 0, 1)
        if result.status is not GetStatus.FOUND:
            return False  # removed by retention: certainly not in memory
        behind_bytes = self._store.commit_log.max_position - result.messages[0].log_position
        return behind_bytes * 100 <= self._memory_bytes * IN_MEMORY_RATIO_PERCENT

    def committed_topics(self, group: str) -> set[str]:
        """Topics on which ``group`` committed offsets."""
        return {topic for topic, key_group in self._keys() if key_group == group}

    def committed_groups(self) -> set[str]:
        """Groups with committed offsets."""
        return {group for _, group in self._keys()}

    def _keys(self) -> Iterable[tuple[str, str]]:
        keys = self._offsets.keys()  # a list copy taken under the table's lock
        for key in keys:
            topic, separator, group = key.rpartition(TOPIC_GROUP_SEPARATOR)
            if separator and topic and group:
                yield topic, group

    def progress(self, group: str, topics: Iterable[str],
                 queue_ids: Callable[[str], list[int]]) -> list[QueueProgress]:
        """``QueueProgress`` of ``group`` on every queue of ``topics``: the configured queues,
        the queues with messages and the queues it committed on, sorted by (topic, queue)."""
        store_queues = self._store.topics()
        rows = []
        for topic in sorted(set(topics)):
            committed = self._offsets.offsets(topic, group)
            ids = set(committed) | set(queue_ids(topic)) | set(store_queues.get(topic, ()))
            for queue_id in sorted(ids):
                rows.append(QueueProgress(
                    topic, queue_id, committed.get(queue_id),
                    self._store.min_offset(topic, queue_id),
                    self._store.max_offset(topic, queue_id)))
        return rows


def check_offset(topic: str, offset: object) -> None:
    """``InvalidMessageError`` unless ``offset`` is an integer >= 0."""
    if type(offset) is not int or offset < 0:
        raise InvalidMessageError(f"offset must be an integer >= 0, got {offset!r}", topic=topic)


def check_batch(topic: str, offset: object, max_count: object) -> None:
    """``check_offset``, and ``max_count`` an integer in 1..``PULL_BATCH_MAX``."""
    check_offset(topic, offset)
    if type(max_count) is not int or not 1 <= max_count <= PULL_BATCH_MAX:
        raise InvalidMessageError(f"max_count must be an integer in 1..{PULL_BATCH_MAX}, "
                                  f"got {max_count!r}", topic=topic)


__all__ = ["CONSUME_TIMESTAMP_DEFAULT_AGE_MS", "IN_MEMORY_RATIO_PERCENT", "ProgressReader",
           "check_batch", "check_offset", "physical_memory_bytes"]
