"""``ConsumerBook``: what admin answers need to know about a group's live consumers.

The broker's consumer registry (``Broker.consumer_ids``) knows which client ids are members of
a group; admin answers (GET_CONSUMER_CONNECTION_LIST, QUERY_TOPIC_CONSUME_BY_WHO) also show
each member's address, language and version and the group's consume type, message model,
consume-from rule and subscriptions, which only a heartbeat carries. The HEART_BEAT handler
calls ``record`` with each consumer entry of a heartbeat (``consumerDataSet`` items as parsed
JSON); membership itself stays the broker's: a view lists only clients the broker still counts
as members (expired and unregistered ones drop out by themselves).

Without any ``record`` (a heartbeat handler that does not call it) the view still lists the
broker's members by client id, with address ``"?"`` and the group's settings unknown
(``CONSUME_PASSIVELY`` / ``CLUSTERING`` / ``CONSUME_FROM_LAST_OFFSET``, RocketMQ's defaults).

Bounds: at most ``entries_max`` (group, client) entries; the oldest is dropped first.
Thread-safety: one lock; every method may be called from any thread. Nothing survives a
restart (clients heartbeat every 30 s).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from storage_engine.broker import Broker

DEFAULT_CONSUME_TYPE = "CONSUME_PASSIVELY"
DEFAULT_MESSAGE_MODEL = "CLUSTERING"
DEFAULT_CONSUME_FROM = "CONSUME_FROM_LAST_OFFSET"


@dataclass(frozen=True)
class Connection:
    """One consumer connection (RocketMQ's ``Connection``)."""

    client_id: str
    client_addr: str = "?"
    language: str = "OTHER"
    version: int = 0

    def as_json(self) -> dict[str, Any]:
        """RocketMQ's ``Connection`` JSON."""
        return {"clientAddr": self.client_addr, "clientId": self.client_id,
                "language": self.language, "version": self.version}


@dataclass(frozen=True)
class GroupView:
    """A group's live consumers and its settings as their heartbeats state them."""

    connections: tuple[Connection, ...]
    consume_type: str = DEFAULT_CONSUME_TYPE
    message_model: str = DEFAULT_MESSAGE_MODEL
    consume_from_where: str = DEFAULT_CONSUME_FROM
    subscriptions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """``ConsumerConnection``."""
        return {"connectionSet": [c.as_json() for c in self.connections],
                "consumeFromWhere": self.consume_from_where, "consumeType": self.consume_type,
                "messageModel": self.message_model,
                "subscriptionTable": {topic: dict(data) for topic, data in
                                      sorted(self.subscriptions.items())}}


@dataclass(frozen=True)
class _Entry:
    connection: Connection
    consumer_data: Mapping[str, Any]


class ConsumerBook:
    """Heartbeat details of live consumers, keyed by (group, client id)."""

    def __init__(self, broker: Broker, *, entries_max: int = 100_000) -> None:
        self._broker = broker
        self._entries_max = entries_max
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()

    def record(self, connection: Connection, consumer_data: Mapping[str, Any]) -> None:
        """Remember one ``consumerDataSet`` entry of a heartbeat from ``connection``."""
        group = consumer_data.get("groupName")
        if not isinstance(group, str):
            return
        with self._lock:
            key = (group, connection.client_id)
            self._entries.pop(key, None)
            self._entries[key] = _Entry(connection, dict(consumer_data))
            while len(self._entries) > self._entries_max:
                self._entries.popitem(last=False)

    def forget(self, group: str, client_id: str) -> None:
        """Drop what a client said about ``group`` (it unregistered)."""
        with self._lock:
            self._entries.pop((group, client_id), None)

    def view(self, group: str) -> GroupView | None:
        """The group's live consumers, or None when it has none."""
        members = self._broker.consumer_ids(group)
        if not members:
            return None
        with self._lock:
            entries = [self._entries.get((group, member)) for member in members]
        connections = tuple(entry.connection if entry else Connection(member)
                            for member, entry in zip(members, entries, strict=True))
        known = [entry.consumer_data for entry in entries if entry is not None]
        if not known:
            return GroupView(connections)
        latest = known[-1]
        subscriptions: dict[str, Mapping[str, Any]] = {}
        for data in known:
            for item in data.get("subscriptionDataSet") or ():
                if isinstance(item, dict) and isinstance(item.get("topic"), str):
                    subscriptions[item["topic"]] = item
        return GroupView(connections,
                         str(latest.get("consumeType", DEFAULT_CONSUME_TYPE)),
                         str(latest.get("messageModel", DEFAULT_MESSAGE_MODEL)),
                         str(latest.get("consumeFromWhere", DEFAULT_CONSUME_FROM)),
                         subscriptions)

    def groups_of_topic(self, topic: str) -> set[str]:
        """Groups whose live consumers subscribe to ``topic`` (as their heartbeats say)."""
        with self._lock:
            candidates = {group for (group, _), entry in self._entries.items()
                          if any(isinstance(item, dict) and item.get("topic") == topic
                                 for item in entry.consumer_data.get("subscriptionDataSet")
                                 or ())}
        return {group for group in candidates if self._broker.consumer_ids(group)}


__all__ = ["Connection", "ConsumerBook", "GroupView"]
