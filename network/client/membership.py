"""Consumer-group membership over remoting: heartbeats, the member list, change notices.

``register_consumer(group, client_id, topics)`` sends HEART_BEAT (34) with a ``HeartbeatData``
body (``reference/rocketmq-remoting.md`` §4: one consumer entry, CLUSTERING, TAG ``*`` for each
topic the framework subscribes, ``%RETRY%group`` included) to the master of every broker that
serves one of those topics (all masters of the cluster when none is known yet: the retry topic
is only created by the first heartbeat), and keeps the registration: ``HeartbeatService``
repeats it every ``heartbeat_interval_ms`` (RocketMQ's brokers drop a client silent for 120 s)
until ``unregister_consumer`` sends UNREGISTER_CLIENT (35) to those brokers. A heartbeat's
answer does not say whether the group changed, so ``register_consumer`` reads the member list
after it and, when that differs from the list this client saw last, calls the listeners before
it returns True — as the embedded broker does inside its heartbeat, so a consumer that expired
and came back rebalances in the same round, not when a notice happens to arrive.

Each client id heartbeats over connections of its own (``Connections.sibling``): RocketMQ's
brokers key a group's members by connection, so two consumers of one group sharing a client
would otherwise be listed as one. ``unregister_consumer`` closes them once the client id has no
registration left, and ``close`` closes them all.

``consumer_ids(group)`` asks one broker of the group's topics (GET_CONSUMER_LIST_BY_GROUP, 38;
a broker without members answers an error, read as no member) and sorts the ids, as the embedded
broker does. Brokers announce membership changes with NOTIFY_CONSUMER_IDS_CHANGED (40,
oneway); each listener added by ``add_membership_listener`` is then called with the group's
application name, on the connection's request thread.

Thread-safety: every method may be called from any thread (one lock over the registrations
and listeners; calls to brokers are made outside it). Nothing is persisted: after a restart
the framework registers again.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from postbox.storage_engine.clock import Clock
from postbox.storage_engine.contract.config_beans import validate_group
from postbox.storage_engine.contract.rules import validate_client_id
from postbox.storage_engine.contract.topics import validate_topic
from postbox.storage_engine.errors import BrokerUnavailableError, InvalidMessageError
from postbox.storage_engine.service import Service

from ..protocol import fastjson
from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.wire import RemotingCommand
from .broker_errors import check_success
from .connection import Connection, Connections
from .context import ClientContext
from .errors import RemotingClientError, RouteNotFoundError

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_MS = 20_000
MembershipListener = Callable[[str], None]


class Membership:
    """Registrations of this client's consumers, and the group change notices."""

    def __init__(self, context: ClientContext, *, sub_version: int) -> None:
        self._context = context
        self._routes = context.routes
        self._sub_version = sub_version
        self._wrap = context.wire
        self._unwrap = context.app_name
        self._lock = threading.Lock()
        self._registrations: dict[tuple[str, str], list[str]] = {}  # (group, client) → topics
        self._brokers: dict[tuple[str, str], set[str]] = {}  # addresses heartbeated
        self._listeners: list[MembershipListener] = []
        self._seen: dict[str, list[str]] = {}  # group → the member list last read
        self._member_connections: dict[str, Connections] = {}  # client id → its own sockets
        context.connections.add_handler(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._notified)

    # ---- registration ----------------------------------------------------------------------

    def register_consumer(self, group: str, client_id: str, topics: Iterable[str]) -> bool:
        """Heartbeat ``client_id`` into ``group`` for ``topics``; True when the group's member
        list differs from the one this client saw last (then the listeners are called before
        this returns, as the embedded broker calls them inside its heartbeat)."""
        validate_group(group)
        validate_client_id(client_id)
        if isinstance(topics, str):
            raise InvalidMessageError(f"topics must be an iterable of names, not the str "
                                      f"{topics!r}")
        names = sorted({validate_topic(topic) for topic in topics})
        with self._lock:
            new = (group, client_id) not in self._registrations
            self._registrations[(group, client_id)] = names
            before = self._seen.get(group)
        self._heartbeat(group, client_id, names)
        try:
            changed = self.consumer_ids(group) != before
        except (RemotingClientError, BrokerUnavailableError) as error:
            log.info("[membership] members of %s unknown after the heartbeat: %s", group, error)
            return new
        if changed:
            self._tell(group)
        return changed

    def unregister_consumer(self, group: str, client_id: str) -> None:
        """Stop heartbeating and tell the brokers (UNREGISTER_CLIENT) that it left."""
        validate_group(group)
        with self._lock:
            self._registrations.pop((group, client_id), None)
            addresses = self._brokers.pop((group, client_id), set())
            self._seen.pop(group, None)
        request = RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, {
            "clientID": client_id, "consumerGroup": self._wrap(group)})
        connections = self._connections_of(client_id)
        for address in sorted(addresses):
            try:
                answer = connections.call(address, request, self._context.timeout_ms)
                check_success(f"unregister {client_id} from {group!r}", answer,
                              address=address)
            except (RemotingClientError, BrokerUnavailableError) as error:
                log.warning("[membership] %s could not leave %s at %s (%s): the broker drops "
                            "it when its heartbeats stop", client_id, group, address, error)
        with self._lock:
            retired = None if any(member == client_id for _, member in self._registrations) \
                else self._member_connections.pop(client_id, None)
        if retired is not None:
            retired.close()  # the broker drops whatever the client still had there
        if addresses:
            self._tell(group)

    def _connections_of(self, client_id: str) -> Connections:
        """The client id's own connections (RocketMQ's brokers key a group's members by
        connection: two members sharing one would be listed as one)."""
        with self._lock:
            connections = self._member_connections.get(client_id)
            if connections is None:
                connections = self._context.connections.sibling()
                self._member_connections[client_id] = connections
            return connections

    def close(self) -> None:
        """Close every member's connections (their brokers then drop those members)."""
        with self._lock:
            retired = list(self._member_connections.values())
            self._member_connections.clear()
        for connections in retired:
            connections.close()

    def heartbeat_all(self) -> int:
        """Repeat every registration's heartbeat; return how many were sent."""
        with self._lock:
            registrations = list(self._registrations.items())
        sent = 0
        for (group, client_id), topics in registrations:
            try:
                self._heartbeat(group, client_id, topics)
                sent += 1
            except (RemotingClientError, BrokerUnavailableError) as error:
                log.warning("[membership] heartbeat of %s in %s failed: %s", client_id, group,
                            error)
        return sent

    def _heartbeat(self, group: str, client_id: str, topics: list[str]) -> None:
        body = json.dumps(self._heartbeat_data(group, client_id, topics),
                          separators=(",", ":")).encode()
        addresses = self._masters(topics)
        failures = []
        connections = self._connections_of(client_id)
        for address in sorted(addresses):
            request = RemotingCommand.request(RequestCode.HEART_BEAT, body=body)
            try:
                answer = connections.call(address, request, self._context.timeout_ms)
                check_success(f"heartbeat of {client_id} in {group!r}", answer,
                              address=address)
            except (RemotingClientError, BrokerUnavailableError) as error:
                failures.append(error)
                continue
            with self._lock:
                if (group, client_id) in self._registrations:
                    self._brokers.setdefault((group, client_id), set()).add(address)
        if failures and len(failures) == len(addresses):
            raise failures[0]

    def _heartbeat_data(self, group: str, client_id: str, topics: list[str]) -> dict[str, Any]:
        subscriptions = [{
            "classFilterMode": False, "codeSet": [], "expressionType": "TAG",
            "subString": "*", "subVersion": self._sub_version, "tagsSet": [],
            "topic": self._wrap(topic)} for topic in topics]
        return {"clientID": client_id, "consumerDataSet": [{
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "consumeType": "CONSUME_PASSIVELY",
            "groupName": self._wrap(group), "messageModel": "CLUSTERING",
            "subscriptionDataSet": subscriptions, "unitMode": False}],
            "producerDataSet": []}

    def _masters(self, topics: Iterable[str]) -> set[str]:
        """Masters of the brokers serving ``topics``; all masters when none is known."""
        addresses: set[str] = set()
        for topic in topics:
            try:
                addresses.update(self._routes.route(topic).masters().values())
            except RouteNotFoundError:
                continue
        if not addresses:
            addresses.update(self._routes.cluster_info().masters().values())
        if not addresses:
            raise RouteNotFoundError(f"no broker serves any of {sorted(topics)}",
                                     topic=",".join(topics))
        return addresses

    # ---- members and notices ---------------------------------------------------------------

    def consumer_ids(self, group: str) -> list[str]:
        """Live members of ``group`` as a broker of its topics lists them, sorted."""
        validate_group(group)
        with self._lock:
            topics = next((names for (known, _), names in self._registrations.items()
                           if known == group), [])
        first = sorted(topics, key=lambda topic: (topic.startswith("%"), topic))[:1]
        address = min(self._masters(first))
        request = RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                          {"consumerGroup": self._wrap(group)})
        answer = self._context.broker_call(address, request)
        if answer.code != ResponseCode.SUCCESS:  # "no consumer for this group"
            with self._lock:
                registered = any(known == group for known, _ in self._registrations)
                last = self._seen.get(group) or []
                if registered and last:
                    # This client heartbeated into the group, so the broker's "none" is
                    # transient (a heartbeat not processed yet, a channel being replaced): keep
                    # the members last read, as RocketMQ's client skips that rebalance round,
                    # rather than drop every queue until the next round.
                    log.info("[membership] %s: the broker lists no member of %s (code %s); "
                             "keeping the %d last read", address, group, answer.code,
                             len(last))
                    return list(last)
                self._seen[group] = []
            return []
        try:
            document = fastjson.loads(answer.body)
            members = sorted(str(member) for member in document.get("consumerIdList") or [])
        except (ValueError, AttributeError, TypeError) as error:
            raise RemotingClientError(f"consumer list of {group!r} from {address} does not "
                                      f"parse: {error}") from error
        with self._lock:
            self._seen[group] = members
        return members

    def add_membership_listener(self, listener: MembershipListener) -> None:
        """Call ``listener(group)`` whenever a broker says the group's members changed."""
        with self._lock:
            self._listeners.append(listener)

    def _notified(self, command: RemotingCommand, connection: Connection) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED from a broker (oneway: nothing is answered)."""
        wire_group = command.ext_fields.get("consumerGroup")
        if not wire_group or not self._routes.namespace.owns(wire_group):
            return None
        self._tell(self._unwrap(wire_group))
        return None

    def _tell(self, group: str) -> None:
        """Call every listener with ``group`` (a failing one is logged, the others run)."""
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(group)
            except Exception:
                log.exception("[membership] listener for %s failed", group)

    def registered(self) -> list[tuple[str, str]]:
        """(group, client id) of every registration this client keeps up."""
        with self._lock:
            return sorted(self._registrations)


class HeartbeatService(Service):
    """Repeats the registrations' heartbeats every ``interval_ms`` while any is kept."""

    name = "remoting-heartbeat"
    daemon = True  # sends heartbeats only; nothing to leave half-written

    def __init__(self, membership: Membership, clock: Clock,
                 interval_ms: int = HEARTBEAT_INTERVAL_MS) -> None:
        super().__init__(clock)
        self.interval_ms = interval_ms
        self._membership = membership
        self._next_ms = clock.now_ms() + interval_ms  # register_consumer sent the first

    def run_once(self, now_ms: int) -> int:
        """Heartbeat every registration when due; the number sent."""
        if now_ms < self._next_ms:
            return 0
        self._next_ms = now_ms + self.interval_ms
        try:
            self._membership.heartbeat_all()
        except Exception:  # a broker hiccup must not end the heartbeats
            log.exception("[membership] heartbeat pass failed")
        return 0  # then sleep interval_ms

    def idle_wait_ms(self, now_ms: int) -> int:
        """Until the next pass is due."""
        return max(1, self._next_ms - now_ms)


__all__ = ["HEARTBEAT_INTERVAL_MS", "HeartbeatService", "Membership", "MembershipListener"]
