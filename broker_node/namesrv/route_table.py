"""``RouteTable``: what a name server knows: brokers, their addresses and their topics.

Two kinds of broker appear in it:

- the **local** broker (the one in this process): its topics are read live from a
  ``TopicSource`` (one topic per route lookup, the whole table for lists), so a topic created a
  moment ago is routed at once, and it never expires;
- **registered** brokers (REGISTER_BROKER from other processes, Apache's brokers included):
  a snapshot of the topic table each registration sent, dropped after ``timeout_ms`` without a
  new registration (RocketMQ's 120 s), or at once by UNREGISTER_BROKER.

A route (``route(topic)``) lists every broker *name* holding the topic: one ``QueueData``
(queue counts and perm, from the master, broker id 0, when it registered the topic, else from
the first registration seen) and one ``BrokerData`` (every id → address of that name). Route
and cluster answers are plain values; ``route_bodies`` writes them in the wire's JSON.

No registration may take the local broker's name (``ReservedBrokerNameError``): it would
replace the local broker's address in every route of that name.

Limits: at most ``brokers_max`` registered brokers and ``topics_max`` topics a registration
(``RouteTableFullError``), so a stranger cannot grow the table without bound.

Thread-safety: every method may be called from any thread (one lock; the local topic source is
read outside it). Nothing survives a restart: brokers re-register every 30 s.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from postbox.network.protocol.route_data import QueueData
from postbox.storage_engine.clock import Clock

DEFAULT_BROKER_TIMEOUT_MS = 120_000
MASTER_ID = 0


class RouteTableError(Exception):
    """Root of the name server's errors."""


class RouteTableFullError(RouteTableError):
    """A registration over the table's limits (brokers, topics a broker)."""


class ReservedBrokerNameError(RouteTableError):
    """A registration under the name of the broker of this process."""


@dataclass(frozen=True)
class BrokerIdentity:
    """Who a broker is in a cluster: cluster, broker name, id (0 = master), address."""

    cluster: str
    broker_name: str
    broker_id: int
    address: str
    ha_address: str = ""
    zone_name: str | None = None


TopicTable = Mapping[str, QueueData]


class TopicSource(Protocol):
    """The local broker's topics as a name server reads them."""

    def get(self, topic: str) -> QueueData | None:
        """One topic's queues, or None."""

    def all(self) -> TopicTable:
        """Every topic."""


@dataclass
class _Registration:
    identity: BrokerIdentity
    topics: TopicTable
    last_update_ms: int
    timeout_ms: int
    data_version: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Route:
    """A topic's route: the queues of each broker name and the addresses of each name."""

    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]


@dataclass(frozen=True)
class BrokerData:
    """One broker name: its cluster and id → address (RocketMQ's ``BrokerData``)."""

    cluster: str
    broker_name: str
    addresses: Mapping[int, str]
    zone_name: str | None = None


class RouteTable:
    """Brokers known to one name server and the topics each holds."""

    def __init__(self, clock: Clock, *, brokers_max: int = 256, topics_max: int = 100_000
                 ) -> None:
        self._clock = clock
        self._brokers_max = brokers_max
        self._topics_max = topics_max
        self._lock = threading.Lock()
        self._registered: dict[tuple[str, int], _Registration] = {}
        self._local: tuple[BrokerIdentity, TopicSource] | None = None

    def set_local(self, identity: BrokerIdentity, topics: TopicSource) -> None:
        """The broker of this process: ``topics`` is read on every lookup."""
        with self._lock:
            self._local = (identity, topics)

    def register(self, identity: BrokerIdentity, topics: TopicTable, *,
                 timeout_ms: int = DEFAULT_BROKER_TIMEOUT_MS,
                 data_version: Mapping[str, object] | None = None) -> None:
        """Record (or refresh) a broker's registration and its topic table."""
        if len(topics) > self._topics_max:
            raise RouteTableFullError(
                f"broker {identity.broker_name!r} registered {len(topics)} topics, over the "
                f"name server's limit of {self._topics_max}")
        key = (identity.broker_name, identity.broker_id)
        with self._lock:
            if self._local is not None and self._local[0].broker_name == identity.broker_name:
                raise ReservedBrokerNameError(
                    f"broker name {identity.broker_name!r} is the name of this name server's "
                    "own broker; another broker cannot register under it")
            if key not in self._registered and len(self._registered) >= self._brokers_max:
                raise RouteTableFullError(
                    f"the name server holds {len(self._registered)} brokers, its limit; "
                    f"{identity.broker_name!r} id {identity.broker_id} is refused")
            self._registered[key] = _Registration(identity, dict(topics),
                                                  self._clock.now_ms(), timeout_ms,
                                                  dict(data_version or {}))

    def unregister(self, broker_name: str, broker_id: int, address: str | None = None) -> bool:
        """Forget a registered broker (only if ``address`` matches, when given)."""
        with self._lock:
            registration = self._registered.get((broker_name, broker_id))
            if registration is None or (address is not None
                                        and registration.identity.address != address):
                return False
            del self._registered[(broker_name, broker_id)]
            return True

    def data_version(self, broker_name: str, broker_id: int) -> Mapping[str, object] | None:
        """The ``dataVersion`` a registered broker last sent, or None when it is not here."""
        with self._lock:
            registration = self._registered.get((broker_name, broker_id))
            return None if registration is None else dict(registration.data_version)

    def touch(self, broker_name: str, broker_id: int) -> bool:
        """Count a sign of life (QUERY_DATA_VERSION) as a registration's refresh."""
        with self._lock:
            registration = self._registered.get((broker_name, broker_id))
            if registration is not None:
                registration.last_update_ms = self._clock.now_ms()
            return registration is not None

    def forget_topic(self, topic: str) -> int:
        """Drop ``topic`` from every registered broker's table (until it registers again);
        how many tables held it. The local broker's topics are its own business."""
        with self._lock:
            holders = [r for r in self._registered.values() if topic in r.topics]
            for registration in holders:
                registration.topics = {name: data for name, data in
                                       registration.topics.items() if name != topic}
            return len(holders)

    def expire(self) -> list[BrokerIdentity]:
        """Drop registrations older than their timeout; return who was dropped."""
        now_ms = self._clock.now_ms()
        with self._lock:
            gone = [key for key, registration in self._registered.items()
                    if now_ms - registration.last_update_ms > registration.timeout_ms]
            return [self._registered.pop(key).identity for key in gone]

    def _brokers(self) -> list[tuple[BrokerIdentity, TopicTable]]:
        """Every live broker with its whole topic table (the local one first, read live)."""
        self.expire()
        with self._lock:
            local = self._local
            registered = [(r.identity, r.topics) for _, r in sorted(self._registered.items())]
        brokers = [] if local is None else [(local[0], local[1].all())]
        return brokers + registered

    def _identities(self) -> list[BrokerIdentity]:
        self.expire()
        with self._lock:
            local = [] if self._local is None else [self._local[0]]
            return local + [r.identity for _, r in sorted(self._registered.items())]

    def route(self, topic: str) -> Route | None:
        """The topic's route, or None when no broker holds it."""
        self.expire()
        with self._lock:
            local = self._local
            holders = [(r.identity, r.topics.get(topic))
                       for _, r in sorted(self._registered.items())]
        if local is not None:
            holders.insert(0, (local[0], local[1].get(topic)))
        queue_datas: dict[str, QueueData] = {}
        for identity, queue_data in holders:
            if queue_data is not None and (identity.broker_name not in queue_datas
                                           or identity.broker_id == MASTER_ID):
                queue_datas[identity.broker_name] = queue_data
        if not queue_datas:
            return None
        names = sorted(queue_datas)
        members = [identity for identity, _ in holders if identity.broker_name in queue_datas]
        return Route(tuple(queue_datas[name] for name in names),
                     tuple(_broker_datas(members)))

    def cluster(self) -> tuple[dict[str, BrokerData], dict[str, list[str]]]:
        """(broker name → ``BrokerData``, cluster → sorted broker names)."""
        identities = self._identities()
        by_name = {data.broker_name: data for data in _broker_datas(identities)}
        clusters: dict[str, set[str]] = {}
        for identity in identities:
            clusters.setdefault(identity.cluster, set()).add(identity.broker_name)
        return by_name, {name: sorted(members) for name, members in clusters.items()}

    def topic_names(self) -> list[str]:
        """Every topic some live broker holds, sorted."""
        names: set[str] = set()
        for _, topics in self._brokers():
            names.update(topics)
        return sorted(names)

    def topics_of_cluster(self, cluster: str) -> list[str]:
        """Every topic the brokers of ``cluster`` hold, sorted."""
        names: set[str] = set()
        for identity, topics in self._brokers():
            if identity.cluster == cluster:
                names.update(topics)
        return sorted(names)

    def master_address(self, broker_name: str) -> str | None:
        """The address broker id 0 of ``broker_name`` registered, if any."""
        for identity in self._identities():
            if identity.broker_name == broker_name and identity.broker_id == MASTER_ID:
                return identity.address
        return None


def _broker_datas(identities: Iterable[BrokerIdentity]) -> list[BrokerData]:
    grouped: dict[str, list[BrokerIdentity]] = {}
    for identity in identities:
        grouped.setdefault(identity.broker_name, []).append(identity)
    datas = []
    for name in sorted(grouped):
        members = sorted(grouped[name], key=lambda member: member.broker_id)
        datas.append(BrokerData(members[0].cluster, name,
                                {member.broker_id: member.address for member in members},
                                members[0].zone_name))
    return datas


__all__ = ["DEFAULT_BROKER_TIMEOUT_MS", "BrokerData", "BrokerIdentity", "QueueData",
           "ReservedBrokerNameError", "Route", "RouteTable", "RouteTableError",
           "RouteTableFullError", "TopicSource"]
