"""Topic routes from the name servers, and the framework's global queue numbering.

``RouteTable`` asks a name server for a topic's route (GET_ROUTEINFO_BY_TOPIC, 105, with
``acceptStandardJsonOnly``; the body is parsed with ``fastjson`` so older name servers' unquoted
number keys are read too), trying each name server in turn when one cannot be reached. Routes
are cached for ``ttl_ms`` and refetched on demand (``invalidate`` after TOPIC_NOT_EXIST or a
broker connection failure). Names are namespaced on the way out (``naming.Namespace``).

**Global queue numbering.** The framework addresses a queue by one integer per topic. Over
remoting a topic's queues are (brokerName, queueId) pairs spread over the brokers of a cluster;
``TopicRoute`` numbers them by sorting on broker name, then queue id (queue ids
``0 .. max(readQueueNums, writeQueueNums) - 1`` of every broker in the route), so one framework
queue id maps to exactly one (broker, queue) even on multi-master clusters, and the numbering
only changes when the topic's brokers or queue counts do. ``queue`` and ``global_id`` map both
ways.

Thread safety: a ``RouteTable`` may be shared by threads (one lock over its caches); a
``TopicRoute`` is immutable.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from postbox.storage_engine.clock import Clock, SystemClock
from postbox.storage_engine.errors import BrokerUnavailableError

from ..protocol import fastjson
from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.route_data import QueueData
from ..protocol.wire import RemotingCommand
from .broker_errors import response_error
from .connection import Connections
from .errors import ConnectionClosedError, RouteNotFoundError
from .naming import Namespace

PERM_READ = 4
PERM_WRITE = 2
MASTER_ID = 0


@dataclass(frozen=True, order=True)
class QueueRef:
    """One queue of one broker."""

    broker_name: str
    queue_id: int


@dataclass(frozen=True)
class BrokerEntry:
    """A broker group: its name, cluster and addresses by broker id (0 = master)."""

    name: str
    cluster: str
    addresses: dict[int, str]

    @property
    def master(self) -> str | None:
        """The master's address, None while the group has no master."""
        return self.addresses.get(MASTER_ID)


@dataclass(frozen=True)
class TopicRoute:
    """A topic's route with the global queue numbering (see the module docstring)."""

    topic: str  # the wire name (namespaced)
    queue_datas: dict[str, QueueData]
    brokers: dict[str, BrokerEntry]
    fetched_ms: int = 0
    queues: tuple[QueueRef, ...] = field(init=False)

    readable: tuple[int, ...] = field(init=False)
    writable: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        refs = sorted(QueueRef(name, queue_id) for name, data in self.queue_datas.items()
                      for queue_id in range(max(data.read_queue_nums, data.write_queue_nums)))
        datas = self.queue_datas
        readable = tuple(index for index, ref in enumerate(refs)
                         if ref.queue_id < datas[ref.broker_name].read_queue_nums
                         and datas[ref.broker_name].perm & PERM_READ)
        writable = tuple(index for index, ref in enumerate(refs)
                         if ref.queue_id < datas[ref.broker_name].write_queue_nums
                         and datas[ref.broker_name].perm & PERM_WRITE
                         and self.master(ref.broker_name) is not None)
        for name, value in (("queues", tuple(refs)), ("readable", readable),
                            ("writable", writable)):
            object.__setattr__(self, name, value)

    def queue(self, queue_id: int) -> QueueRef:
        """The (broker, queue) of a framework queue id; ``IndexError`` when out of range."""
        if not 0 <= queue_id < len(self.queues):
            raise IndexError(f"topic {self.topic!r} has queues 0..{len(self.queues) - 1}, "
                             f"not {queue_id}")
        return self.queues[queue_id]

    def global_id(self, broker_name: str, queue_id: int) -> int:
        """The framework queue id of (broker, queue); ``KeyError`` when not in the route."""
        ref = QueueRef(broker_name, queue_id)
        at = bisect.bisect_left(self.queues, ref)
        if at == len(self.queues) or self.queues[at] != ref:
            raise KeyError(f"topic {self.topic!r} has no queue {queue_id} on {broker_name!r}")
        return at

    def master(self, broker_name: str) -> str | None:
        """The master address of a broker group in this route."""
        entry = self.brokers.get(broker_name)
        return None if entry is None else entry.master

    def readable_queue_ids(self) -> list[int]:
        """Framework ids of the queues consumers read (``queueId < readQueueNums``)."""
        return list(self.readable)

    def writable_queue_ids(self) -> list[int]:
        """Framework ids of queues a producer may write now (writable, master present)."""
        return list(self.writable)

    def masters(self) -> dict[str, str]:
        """Master address by broker name, for the brokers that carry the topic."""
        return {name: address for name in self.queue_datas
                if (address := self.master(name)) is not None}


def parse_broker_entry(document: dict[str, Any]) -> BrokerEntry:
    """A ``BrokerData`` document (``brokerAddrs`` keys may have been unquoted numbers)."""
    addresses = {int(key): str(value)
                 for key, value in (document.get("brokerAddrs") or {}).items()}
    return BrokerEntry(name=str(document["brokerName"]), cluster=str(document.get("cluster", "")),
                       addresses=addresses)


def parse_route(topic: str, body: bytes, fetched_ms: int = 0) -> TopicRoute:
    """A ``TopicRouteData`` body; ``ValueError`` when it is not one."""
    try:
        document = fastjson.loads(body)
        brokers = {entry.name: entry for entry in
                   (parse_broker_entry(item) for item in document.get("brokerDatas") or [])}
        queue_datas = {}
        for item in document.get("queueDatas") or []:
            data = QueueData(
                broker_name=str(item["brokerName"]),
                read_queue_nums=int(item.get("readQueueNums", 0)),
                write_queue_nums=int(item.get("writeQueueNums", 0)),
                perm=int(item.get("perm", 6)),
                topic_sys_flag=int(item.get("topicSysFlag", item.get("topicSynFlag", 0))))
            queue_datas[data.broker_name] = data
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"route of {topic!r} does not parse: {error}") from error
    return TopicRoute(topic=topic, queue_datas=queue_datas, brokers=brokers,
                      fetched_ms=fetched_ms)


@dataclass(frozen=True)
class ClusterInfo:
    """GET_BROKER_CLUSTER_INFO: broker groups by name, broker names by cluster."""

    brokers: dict[str, BrokerEntry]
    clusters: dict[str, list[str]]

    def masters(self, cluster: str | None = None) -> dict[str, str]:
        """Master address by broker name (of one cluster, or of all)."""
        names = self.brokers if cluster is None else self.clusters.get(cluster, [])
        return {name: address for name in names
                if name in self.brokers and (address := self.brokers[name].master)}


def parse_cluster_info(body: bytes) -> ClusterInfo:
    """A ``ClusterInfo`` body (always fastjson's dialect)."""
    try:
        document = fastjson.loads(body)
        brokers = {str(name): parse_broker_entry(item)
                   for name, item in (document.get("brokerAddrTable") or {}).items()}
        clusters = {str(name): [str(broker) for broker in members]
                    for name, members in (document.get("clusterAddrTable") or {}).items()}
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"cluster info does not parse: {error}") from error
    return ClusterInfo(brokers=brokers, clusters=clusters)


class RouteTable:
    """Cached topic routes and cluster info from a list of name servers."""

    def __init__(self, namesrv_addresses: Sequence[str], connections: Connections,
                 namespace: Namespace | str = "", *, clock: Clock | None = None,
                 ttl_ms: int = 30_000, timeout_ms: int = 3_000) -> None:
        if not namesrv_addresses:
            raise ValueError("at least one name server address is needed")
        self.namesrv_addresses = list(namesrv_addresses)
        self.connections = connections
        self.namespace = namespace if isinstance(namespace, Namespace) else Namespace(namespace)
        self._clock = clock or SystemClock()
        self._ttl_ms = ttl_ms
        self._timeout_ms = timeout_ms
        self._lock = threading.Lock()
        self._routes: dict[str, TopicRoute] = {}
        self._next_namesrv = 0

    # -- name server calls ---------------------------------------------------------------

    def namesrv_call(self, command: RemotingCommand, timeout_ms: int | None = None
                     ) -> RemotingCommand:
        """Send ``command`` to a name server, the next one when one cannot be reached."""
        with self._lock:
            start = self._next_namesrv
        failures = []
        count = len(self.namesrv_addresses)
        for step in range(count):
            index = (start + step) % count
            address = self.namesrv_addresses[index]
            try:
                answer = self.connections.call(address, command,
                                               timeout_ms or self._timeout_ms)
            except BrokerUnavailableError as error:  # refused, closed or timed out
                failures.append(error)
                continue
            with self._lock:
                self._next_namesrv = index
            return answer
        raise ConnectionClosedError(
            "no name server answered: " + "; ".join(str(error) for error in failures),
            address=";".join(self.namesrv_addresses))

    def _fetch(self, wire_topic: str) -> TopicRoute:
        request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                          {"topic": wire_topic, "acceptStandardJsonOnly": True})
        answer = self.namesrv_call(request)
        if answer.code == ResponseCode.TOPIC_NOT_EXIST:
            raise RouteNotFoundError(f"no name server knows topic {wire_topic!r}",
                                     topic=wire_topic)
        if answer.code != ResponseCode.SUCCESS:  # e.g. NO_PERMISSION: the store's error class
            raise response_error(f"route of {wire_topic!r}", answer,
                                 address=";".join(self.namesrv_addresses), topic=wire_topic)
        route = parse_route(wire_topic, answer.body, self._clock.now_ms())
        if not route.queue_datas:
            raise RouteNotFoundError(f"the route of {wire_topic!r} names no queues",
                                     topic=wire_topic)
        return route

    # -- routes --------------------------------------------------------------------------

    def route(self, topic: str, *, refresh: bool = False) -> TopicRoute:
        """The route of an application topic (namespaced here); cached for ``ttl_ms``."""
        return self.wire_route(self.namespace.wrap(topic), refresh=refresh)

    def wire_route(self, wire_topic: str, *, refresh: bool = False) -> TopicRoute:
        """The route of a topic already in its wire name."""
        now_ms = self._clock.now_ms()
        if not refresh:
            with self._lock:
                cached = self._routes.get(wire_topic)
            if cached is not None and now_ms - cached.fetched_ms < self._ttl_ms:
                return cached
        route = self._fetch(wire_topic)
        with self._lock:
            self._routes[wire_topic] = route
        return route

    def cached(self, topic: str) -> TopicRoute | None:
        """The cached route of an application topic, whatever its age (no name server call)."""
        with self._lock:
            return self._routes.get(self.namespace.wrap(topic))

    def invalidate(self, topic: str | None = None) -> None:
        """Forget one application topic's route (or all): the next use refetches it."""
        with self._lock:
            if topic is None:
                self._routes.clear()
            else:
                self._routes.pop(self.namespace.wrap(topic), None)

    def invalidate_address(self, address: str) -> None:
        """Forget every route that names ``address`` (after a connection failure to it)."""
        with self._lock:
            for wire_topic, route in list(self._routes.items()):
                if any(address in entry.addresses.values() for entry in route.brokers.values()):
                    del self._routes[wire_topic]

    def locate(self, topic: str, queue_id: int) -> tuple[QueueRef, str]:
        """The (broker, queue) and master address of a framework queue id.

        ``IndexError`` when the topic has no such queue; ``RouteNotFoundError`` when the
        broker has no master now.
        """
        route = self.route(topic)
        ref = route.queue(queue_id)
        address = route.master(ref.broker_name)
        if address is None:
            route = self.route(topic, refresh=True)
            ref = route.queue(queue_id)
            address = route.master(ref.broker_name)
        if address is None:
            raise RouteNotFoundError(f"broker {ref.broker_name!r} of topic {topic!r} has no "
                                     "master now", topic=route.topic)
        return ref, address

    def global_id(self, topic: str, broker_name: str, queue_id: int) -> int:
        """The framework queue id of (broker, queue) of an application topic."""
        route = self.route(topic)
        try:
            return route.global_id(broker_name, queue_id)
        except KeyError:
            return self.route(topic, refresh=True).global_id(broker_name, queue_id)

    def master_address(self, broker_name: str) -> str | None:
        """A broker group's master address from any cached route, else the cluster info."""
        with self._lock:
            routes = list(self._routes.values())
        for route in routes:
            address = route.master(broker_name)
            if address is not None:
                return address
        return self.cluster_info().masters().get(broker_name)

    def cluster_info(self) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO from a name server (not cached: admin operations only)."""
        answer = self.namesrv_call(RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO))
        if answer.code != ResponseCode.SUCCESS:
            raise response_error("cluster info", answer,
                                 address=";".join(self.namesrv_addresses))
        return parse_cluster_info(answer.body)
