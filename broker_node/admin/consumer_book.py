"""``ConsumerBook``: what admin answers show about a group's live consumers.

Two sources, each the owner of its part: the broker's consumer registry
(``Broker.consumer_ids``) says who is a member of a group (expired and unregistered clients
drop out there); the data plane's ``ClientRegistry`` (``server.broker.clients``, filled by
HEART_BEAT) says what each member's heartbeat declared: its connection (address, language,
version), the group's consume type, message model, consume-from rule and subscriptions. A
view lists the broker's members, with what their heartbeat said when the registry has it
(without a registry, or for a member registered through another transport, only the client
id: address ``"?"`` and RocketMQ's defaults).

Thread-safety: no state of its own; both sources lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from postbox.storage_engine.broker import Broker

if TYPE_CHECKING:  # types only: the admin reads the data plane, never the reverse
    from ..server.broker.clients import ClientRegistry, ConsumerInfo

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


class ConsumerBook:
    """Live consumers of a broker's groups, as admin answers describe them."""

    def __init__(self, broker: Broker, registry: ClientRegistry | None = None) -> None:
        self._broker = broker
        self._registry = registry

    def _infos(self, group: str) -> dict[str, ConsumerInfo]:
        if self._registry is None:
            return {}
        return {info.client_id: info for info in self._registry.consumers(group)}

    def view(self, group: str) -> GroupView | None:
        """The group's live consumers, or None when it has none."""
        members = self._broker.consumer_ids(group)
        if not members:
            return None
        infos = self._infos(group)
        connections = tuple(_connection(member, infos.get(member)) for member in members)
        known = [infos[member] for member in members if member in infos]
        if not known:
            return GroupView(connections)
        subscriptions: dict[str, Mapping[str, Any]] = {}
        for info in known:
            subscriptions.update(info.subscriptions)
        latest = known[-1]
        return GroupView(connections, latest.consume_type, latest.message_model,
                         latest.consume_from_where, subscriptions)

    def groups_of_topic(self, topic: str) -> set[str]:
        """Groups whose live consumers subscribe to ``topic``."""
        if self._registry is None:
            return set()
        return {group for group in self._broker.consumer_groups()
                if self._registry.subscription(group, topic) is not None
                and self._broker.consumer_ids(group)}


def _connection(client_id: str, info: ConsumerInfo | None) -> Connection:
    if info is None:
        return Connection(client_id)
    session = info.session
    return Connection(client_id, session.peer_address, session.language, session.version)


__all__ = ["Connection", "ConsumerBook", "GroupView"]
