"""``ConsumptionFloor``: the lowest log position some subscribed group still has to consume.

The broker gives it to its store (``MessageStore.set_consumption_floor``) so that disk pressure
deletes only segments every group has consumed past. For each non-empty queue the
position still needed is that of the unit at:

* the smallest committed offset among the groups that committed on the queue's topic, when
  every one of them committed on this queue and no live member of another group subscribes to
  the topic;
* ``SCHEDULE_TOPIC_XXXX`` queue q: the delay service's next offset for level q + 1;
* otherwise the queue's first offset: a queue nobody committed on (a topic without consumers
  yet, a dead-letter queue, a group that has not started) keeps all its messages, because a
  group may still come to read them.

A queue consumed to its end needs nothing. The floor is the smallest of these positions (the
log's end when nothing is needed). It is computed on demand, only when retention cleans under
pressure: one pass over the queues and the offset table.

Thread-safety: reads the tables through their locked accessors and the queues' published
bounds; safe from the retention thread while others commit offsets (an offset committed during
the pass only makes the floor conservative).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from ..formats.topic_names import DELAY_TOPIC
from ..store.message_store import MessageStore
from .config_stores import TOPIC_GROUP_SEPARATOR, ConsumerOffsetTable, DelayOffsetTable

Subscriptions = Callable[[], dict[str, set[str]]]
"""Live subscriptions: group -> topics its members subscribe to."""


class ConsumptionFloor:
    """Callable: the lowest log position some group still needs."""

    def __init__(self, store: MessageStore, offsets: ConsumerOffsetTable,
                 delay_offsets: DelayOffsetTable, subscriptions: Subscriptions) -> None:
        self._store = store
        self._offsets = offsets
        self._delay_offsets = delay_offsets
        self._subscriptions = subscriptions

    def __call__(self) -> int:
        """The floor: segments ending at or below it are consumed by every group."""
        committed, groups_by_topic = self._committed()
        for group, topics in self._subscriptions().items():
            for topic in topics:
                groups_by_topic[topic].add(group)  # a live member with no commit needs it all
        floor = self._store.commit_log.max_position
        for (topic, queue_id), queue in list(self._store.queues.queues.items()):
            first, end = queue.min_offset, queue.max_offset
            if end <= first:
                continue
            if topic == DELAY_TOPIC:
                needed = self._delay_offsets.get(queue_id + 1) or 0
            else:
                by_group = committed.get((topic, queue_id), {})
                groups = groups_by_topic.get(topic)
                needed = (min(by_group.values()) if groups and groups <= by_group.keys()
                          else first)
            needed = max(needed, first)
            if needed < end:
                floor = min(floor, queue.unit_at(needed)[0])
        return floor

    def _committed(self) -> tuple[dict[tuple[str, int], dict[str, int]], dict[str, set[str]]]:
        """((topic, queue) -> {group: next offset}, topic -> groups that committed on it)."""
        committed: dict[tuple[str, int], dict[str, int]] = defaultdict(dict)
        groups_by_topic: dict[str, set[str]] = defaultdict(set)
        for key in self._offsets.keys():  # noqa: SIM118 (a table, not a dict)
            topic, separator, group = key.partition(TOPIC_GROUP_SEPARATOR)
            if not separator:
                continue
            groups_by_topic[topic].add(group)
            for queue_id, offset in self._offsets.offsets(topic, group).items():
                committed[(topic, queue_id)][group] = offset
        return committed, groups_by_topic


__all__ = ["ConsumptionFloor", "Subscriptions"]
