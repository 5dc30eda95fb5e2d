"""Clients of the broker: HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP
(38), LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42), connection close, and NOTIFY_CONSUMER_IDS_CHANGED
(40) to every connection of a group whose members changed.

``ClientRegistry`` keeps what heartbeats said (per group: each member's connection, message
model, consume type, consume-from and subscriptions; producer groups' connections); the broker's
own registry (``Broker.register_consumer``) keeps the member list that rebalancing uses. A
heartbeat registers each consumer group with the broker (which creates the group and its retry
topic when auto-creation is on) and answers ``IS_SUPPORT_HEART_BEAT_V2`` and ``IS_SUB_CHANGE``.
When a connection closes, the consumers it registered (and still owns: a client that
reconnected keeps its newer connection) leave their groups.

Notifications: ``Broker.add_membership_listener`` tells which group changed (heartbeat, close,
unregister, expiry); every connection of that group gets a oneway 40 when the group consumes
in CLUSTERING mode and its ``notify_consumer_ids_changed_enable`` is on (RocketMQ's
``DefaultConsumerIdsChangeListener``); a changed subscription notifies as well.

Bounds: a heartbeat is read whole and checked against ``HeartbeatLimits`` (consumer groups,
producer groups, subscriptions) before anything is registered; one over a limit is refused 29
INVALID_PARAMETER naming the ``postbox broker start`` option that raises it, and registers
nothing. Heartbeats run on the worker pool's client lane, never on the IO thread: registering a
new group creates it and its retry topic on disk.

Thread-safety: the registry is guarded by one lock; notifications are written outside it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from postbox.network.protocol import fastjson
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.network.protocol.wire import RemotingCommand
from postbox.storage_engine.broker import Broker
from postbox.storage_engine.contract.config_beans import validate_group
from postbox.storage_engine.contract.topics import validate_topic

from ..errors import RequestRefusedError
from ..handlers import HandlerTable
from ..session import Session
from ..workers import CLIENT_LANE
from .bodies import bad_body, json_body, member_list, member_str, message_queue

CLUSTERING = "CLUSTERING"
BROADCASTING = "BROADCASTING"
CLIENT_ID_LENGTH_MAX = 512
HEARTBEAT = "heartbeat"


@dataclass(frozen=True)
class HeartbeatLimits:
    """What one heartbeat may name (a Java client sends every group of its process in one)."""

    max_groups: int = 256
    """Consumer groups, and separately producer groups, of one heartbeat
    (``--heartbeat-max-groups``)."""
    max_subscriptions: int = 4096
    """Subscriptions (topics) of all the consumer groups of one heartbeat together
    (``--heartbeat-max-subscriptions``)."""

    def __post_init__(self) -> None:
        if self.max_groups < 1 or self.max_subscriptions < 1:
            raise ValueError("HeartbeatLimits: max_groups and max_subscriptions must be >= 1")

    def check(self, consumers: list[Any], producers: list[Any]) -> None:
        """Refuse a heartbeat over a limit (nothing registered yet)."""
        for kind, count in (("consumer", len(consumers)), ("producer", len(producers))):
            if count > self.max_groups:
                raise _over_limit(f"{count} {kind} groups", self.max_groups,
                                  "--heartbeat-max-groups")
        subscriptions = sum(len(entries) for consumer in consumers if isinstance(consumer, dict)
                            if isinstance(entries := consumer.get("subscriptionDataSet"), list))
        if subscriptions > self.max_subscriptions:
            raise _over_limit(f"{subscriptions} subscriptions", self.max_subscriptions,
                              "--heartbeat-max-subscriptions")


def _over_limit(what: str, limit: int, option: str) -> RequestRefusedError:
    return RequestRefusedError(ResponseCode.INVALID_PARAMETER,
                               f"heartbeat names {what}, over the limit of {limit} (raise it "
                               f"with postbox broker start {option})")


@dataclass
class ConsumerInfo:
    """One member of a consumer group as its heartbeat described it."""

    client_id: str
    session: Session
    message_model: str
    consume_type: str
    consume_from_where: str
    subscriptions: dict[str, dict[str, Any]] = field(default_factory=dict)  # topic → as sent


class ClientRegistry:
    """Consumers and producers by group, with their connections."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._consumers: dict[str, dict[str, ConsumerInfo]] = {}
        self._producers: dict[str, dict[str, Session]] = {}

    def put_consumer(self, group: str, info: ConsumerInfo) -> bool:
        """Record a member; True when its subscriptions differ from what it had."""
        with self._lock:
            members = self._consumers.setdefault(group, {})
            old = members.get(info.client_id)
            members[info.client_id] = info
            return old is None or old.subscriptions != info.subscriptions

    def put_producer(self, group: str, client_id: str, session: Session) -> None:
        """Record a producer's connection."""
        with self._lock:
            self._producers.setdefault(group, {})[client_id] = session

    def remove(self, client_id: str, *, consumer_group: str | None = None,
               producer_group: str | None = None) -> bool:
        """Forget a client in the given groups; True when a consumer was removed."""
        with self._lock:
            removed = consumer_group is not None and self._consumers.get(
                consumer_group, {}).pop(client_id, None) is not None
            if producer_group is not None:
                self._producers.get(producer_group, {}).pop(client_id, None)
            return removed

    def drop_session(self, session: Session) -> list[tuple[str, str]]:
        """Forget everything registered through ``session``: the (group, client id) of the
        consumers it owned."""
        dropped = []
        with self._lock:
            for group, members in self._consumers.items():
                for client_id, info in list(members.items()):
                    if info.session is session:
                        del members[client_id]
                        dropped.append((group, client_id))
            for producers in self._producers.values():
                for client_id, owner in list(producers.items()):
                    if owner is session:
                        del producers[client_id]
        return dropped

    def keep_only(self, group: str, client_ids: set[str]) -> None:
        """Drop members the broker no longer lists (expired)."""
        with self._lock:
            members = self._consumers.get(group, {})
            for client_id in [c for c in members if c not in client_ids]:
                del members[client_id]

    def consumers(self, group: str) -> list[ConsumerInfo]:
        """The group's members (a snapshot)."""
        with self._lock:
            return list(self._consumers.get(group, {}).values())

    def producer_sessions(self, group: str) -> list[Session]:
        """Connections of a producer group."""
        with self._lock:
            return list(self._producers.get(group, {}).values())

    def subscription(self, group: str, topic: str) -> tuple[str, str] | None:
        """(expression, type) some member of ``group`` subscribed ``topic`` with, or None."""
        with self._lock:
            for info in self._consumers.get(group, {}).values():
                data = info.subscriptions.get(topic)
                if data is not None:
                    return (str(data.get("subString") or "*"),
                            str(data.get("expressionType") or "TAG"))
        return None

    def message_model(self, group: str) -> str | None:
        """The message model the group's members declared (None: no member)."""
        with self._lock:
            for info in self._consumers.get(group, {}).values():
                return info.message_model
        return None


class ClientHandlers:
    """Heartbeats, membership, locks and notifications over one broker."""

    def __init__(self, broker: Broker, registry: ClientRegistry,
                 limits: HeartbeatLimits | None = None) -> None:
        self._broker = broker
        self.registry = registry
        self.limits = limits or HeartbeatLimits()
        broker.add_membership_listener(self._on_membership)

    def register(self, table: HandlerTable) -> None:
        """Serve 34 (on the client lane: it may create groups) and 35, 38, 41 and 42 (inline:
        none of them blocks)."""
        table.register(RequestCode.HEART_BEAT, self.heartbeat, lane=CLIENT_LANE)
        table.register(RequestCode.UNREGISTER_CLIENT, self.unregister, inline=True)
        table.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self.consumer_list, inline=True)
        table.register(RequestCode.LOCK_BATCH_MQ, self.lock, inline=True)
        table.register(RequestCode.UNLOCK_BATCH_MQ, self.unlock, inline=True)

    def heartbeat(self, request: RemotingCommand, session: Session) -> RemotingCommand:
        """HEART_BEAT: register the client's consumer and producer groups."""
        data = json_body(request.body, HEARTBEAT)
        client_id = _client_id(member_str(data, "clientID", HEARTBEAT))
        consumers = member_list(data, "consumerDataSet", HEARTBEAT)
        producers = member_list(data, "producerDataSet", HEARTBEAT)
        self.limits.check(consumers, producers)
        session.client_id = client_id
        changed = False
        for consumer in consumers:
            changed |= self._consumer_heartbeat(consumer, client_id, session)
        for producer in producers:
            self.registry.put_producer(member_str(producer, "groupName", HEARTBEAT), client_id,
                                       session)
        return request.response(ResponseCode.SUCCESS, {"IS_SUPPORT_HEART_BEAT_V2": True,
                                                       "IS_SUB_CHANGE": changed})

    def _consumer_heartbeat(self, consumer: Any, client_id: str, session: Session) -> bool:
        group = validate_group(member_str(consumer, "groupName", HEARTBEAT))
        # any case: other clients than Java's may write the enum's name in their own spelling
        model = member_str(consumer, "messageModel", HEARTBEAT, CLUSTERING).upper()
        if model not in (CLUSTERING, BROADCASTING):
            raise bad_body(HEARTBEAT, f"messageModel {model[:40]!r} is neither {CLUSTERING} "
                                      f"nor {BROADCASTING}")
        subscriptions: dict[str, dict[str, Any]] = {}
        for entry in member_list(consumer, "subscriptionDataSet", HEARTBEAT):
            topic = validate_topic(member_str(entry, "topic", HEARTBEAT))
            member_str(entry, "subString", HEARTBEAT, "*")
            subscriptions[topic] = entry
        info = ConsumerInfo(client_id, session, model,
                            member_str(consumer, "consumeType", HEARTBEAT, "CONSUME_PASSIVELY"),
                            member_str(consumer, "consumeFromWhere", HEARTBEAT,
                                       "CONSUME_FROM_LAST_OFFSET"), subscriptions)
        sub_changed = self.registry.put_consumer(group, info)
        joined = self._broker.register_consumer(group, client_id, sorted(subscriptions))
        if sub_changed and not joined:
            self._on_membership(group)  # same members, new subscriptions: rebalance too
        return sub_changed

    def unregister(self, request: RemotingCommand, session: Session) -> RemotingCommand:
        """UNREGISTER_CLIENT: the client leaves the groups it names."""
        fields = request.fields
        client_id = _client_id(fields.get_str("clientID", max_chars=CLIENT_ID_LENGTH_MAX))
        consumer_group = fields.get_str("consumerGroup", None, max_chars=255)
        producer_group = fields.get_str("producerGroup", None, max_chars=255)
        self.registry.remove(client_id, consumer_group=consumer_group,
                             producer_group=producer_group)
        if consumer_group:
            self._broker.unregister_consumer(consumer_group, client_id)
        return request.response(ResponseCode.SUCCESS)

    def consumer_list(self, request: RemotingCommand, session: Session) -> RemotingCommand:
        """GET_CONSUMER_LIST_BY_GROUP: the group's live client ids."""
        group = request.fields.get_str("consumerGroup", max_chars=255)
        members = self._broker.consumer_ids(group)
        if not members:
            raise RequestRefusedError(ResponseCode.SYSTEM_ERROR,
                                      f"no consumer for this group, {group}")
        return request.response(ResponseCode.SUCCESS,
                                body=fastjson.dumps({"consumerIdList": members}))

    def lock(self, request: RemotingCommand, session: Session) -> RemotingCommand:
        """LOCK_BATCH_MQ: lock (or renew) queues for orderly consumption."""
        group, client_id, queues = _lock_body(request.body, "LockBatchRequestBody")
        held = self._broker.lock_queues(group, client_id, {(t, q) for t, _, q in queues})
        locked = [{"brokerName": name, "queueId": queue_id, "topic": topic}
                  for topic, name, queue_id in queues if (topic, queue_id) in held]
        return request.response(ResponseCode.SUCCESS,
                                body=fastjson.dumps({"lockOKMQSet": locked}))

    def unlock(self, request: RemotingCommand, session: Session) -> RemotingCommand:
        """UNLOCK_BATCH_MQ: release queues this client holds."""
        group, client_id, queues = _lock_body(request.body, "UnlockBatchRequestBody")
        self._broker.unlock_queues(group, client_id, [(t, q) for t, _, q in queues])
        return request.response(ResponseCode.SUCCESS)

    def on_close(self, session: Session) -> None:
        """A connection closed: its consumers leave their groups."""
        for group, client_id in self.registry.drop_session(session):
            self._broker.unregister_consumer(group, client_id)

    def _on_membership(self, group: str) -> None:
        """Tell every connection of ``group`` that its members changed."""
        live = set(self._broker.consumer_ids(group))
        self.registry.keep_only(group, live)
        if self.registry.message_model(group) == BROADCASTING:
            return
        config = self._broker.tables.subscription_groups.get(group)
        if config is not None and not config.notify_consumer_ids_changed_enable:
            return
        sessions = {id(info.session): info.session for info in self.registry.consumers(group)}
        for session in sessions.values():
            if not session.closed:
                session.send_oneway(RemotingCommand(
                    code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                    ext_fields={"consumerGroup": group}))


def _client_id(client_id: str) -> str:
    if not client_id or len(client_id) > CLIENT_ID_LENGTH_MAX or not client_id.isprintable():
        raise RequestRefusedError(ResponseCode.INVALID_PARAMETER,
                                  f"client id must be 1..{CLIENT_ID_LENGTH_MAX} printable "
                                  "characters")
    return client_id


def _lock_body(body: bytes, what: str) -> tuple[str, str, list[tuple[str, str, int]]]:
    data = json_body(body, what)
    group = member_str(data, "consumerGroup", what)
    client_id = _client_id(member_str(data, "clientId", what))
    queues = [message_queue(entry, what) for entry in member_list(data, "mqSet", what)]
    return group, client_id, queues
