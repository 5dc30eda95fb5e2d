"""The admin side of ``BrokerClient`` over remoting: topics, groups, progress, lookups.

Each operation is the one a RocketMQ admin tool or client makes (reference §2.3–§2.5), with the
embedded broker's answer shape:

- ``create_topic``: UPDATE_AND_CREATE_TOPIC (17) to every master of the cluster(s) the name
  servers know (GET_BROKER_CLUSTER_INFO), then the cached route is dropped.
- ``topic_config`` / ``queue_ids``: from the topic's route (its queue counts summed over its
  brokers, the global numbering of ``routes``); None / [] when no name server knows it.
- ``subscription_group``: GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) of a master; a group that is
  not there is created on every master (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 200, RocketMQ's
  defaults), as the embedded broker's get-or-create does.
- ``consumer_groups``: the subscription groups of every master, RocketMQ's own system groups
  left out, only this namespace's (names returned without it).
- ``consumer_progress``: GET_CONSUME_STATS (208) of every master (``ConsumeStats``, keyed by
  fastjson object keys) plus each topic's min offsets (GET_TOPIC_STATS_INFO, 202).
- ``dead_letters``: PULL_MESSAGE of ``%DLQ%group`` queue 0 on each broker that has it, with the
  subscription in the request and no commit flag, so nothing is committed for the group.
- ``find_by_unique_key``: QUERY_MESSAGE with ``_UNIQUE_KEY_QUERY=true`` to every master of the
  topic, merged; ``query_by_key``: the same without it, only records whose KEYS hold the key
  (the index matches hashes).

Thread safety: stateless apart from the shared context; any thread.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

from postbox.storage_engine.contract.config_beans import (
    SubscriptionGroupConfig,
    TopicConfig,
    bean_from_json,
    bean_to_json,
    validate_group,
)
from postbox.storage_engine.contract.model import QueueProgress
from postbox.storage_engine.contract.topics import validate_topic
from postbox.storage_engine.errors import InvalidMessageError
from postbox.storage_engine.formats import MessageView
from postbox.storage_engine.formats.fastjson import ObjectKey
from postbox.storage_engine.formats.topic_names import (
    AUTO_CREATE_TOPIC,
    dead_letter_topic,
    is_system_group,
)

from ..protocol import fastjson
from ..protocol.codes import RequestCode, ResponseCode
from ..protocol.wire import RemotingCommand
from .broker_errors import check_success
from .context import ClientContext
from .errors import RouteNotFoundError
from .routes import PERM_READ, TopicRoute

DEFAULT_QUEUE_COUNT = 8  # the embedded broker's broker.default_topic_queue_count
QUEUE_COUNT_MAX = 1024
QUERY_MAX_NUM = 64
PULL_BATCH_MAX = 1024
_SIZE_AND_QUEUE = struct.Struct(">i8xi")  # TOTALSIZE, (magic, body crc), QUEUEID


class AdminCalls:
    """Topic, group and lookup operations (see the module docstring)."""

    def __init__(self, context: ClientContext) -> None:
        self._context = context

    def _masters(self) -> dict[str, str]:
        masters = self._context.masters()
        if not masters:
            raise RouteNotFoundError("the name servers know no broker with a master",
                                     topic=AUTO_CREATE_TOPIC)
        return masters

    def _call_ok(self, address: str, request: RemotingCommand, what: str,
                 topic: str | None = None) -> RemotingCommand:
        return check_success(what, self._context.broker_call(address, request),
                             address=address, topic=topic)

    # -- topics ----------------------------------------------------------------------------

    def create_topic(self, topic: str, queue_count: int | None, perm: int, order: bool
                     ) -> TopicConfig:
        """Create or update ``topic`` on every master (read = write = ``queue_count``)."""
        validate_topic(topic)
        count = DEFAULT_QUEUE_COUNT if queue_count is None else queue_count
        if type(count) is not int or not 1 <= count <= QUEUE_COUNT_MAX:
            raise InvalidMessageError(f"queue_count must be an integer in 1..{QUEUE_COUNT_MAX}"
                                      f", got {queue_count!r}", topic=topic)
        if type(perm) is not int or not 0 <= perm <= 15:
            raise InvalidMessageError(f"perm must be PermName bits 0..15, got {perm!r}",
                                      topic=topic)
        wire = self._context.wire(topic)
        fields = {"topic": wire, "defaultTopic": AUTO_CREATE_TOPIC, "readQueueNums": count,
                  "writeQueueNums": count, "perm": perm, "topicFilterType": "SINGLE_TAG",
                  "topicSysFlag": 0, "order": bool(order)}
        for address in self._masters().values():
            self._call_ok(address, RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_TOPIC, fields), f"create topic {topic!r}", topic)
        self._context.routes.invalidate(topic)
        return TopicConfig(topic_name=topic, read_queue_nums=count, write_queue_nums=count,
                           perm=perm, order=bool(order))

    def _route(self, topic: str) -> TopicRoute | None:
        try:
            return self._context.routes.route(topic)
        except RouteNotFoundError:
            return None

    def topic_config(self, topic: str) -> TopicConfig | None:
        """The topic's config as its route describes it, None when no name server knows it."""
        validate_topic(topic)
        route = self._route(topic)
        if route is None:
            return None
        datas = list(route.queue_datas.values())
        perm = 0
        for data in datas:
            perm |= data.perm
        return TopicConfig(topic_name=topic,
                           read_queue_nums=sum(data.read_queue_nums for data in datas),
                           write_queue_nums=sum(data.write_queue_nums for data in datas),
                           perm=perm, topic_sys_flag=datas[0].topic_sys_flag)

    def queue_ids(self, topic: str) -> list[int]:
        """The topic's readable queues (global ids); [] when unknown."""
        validate_topic(topic)
        route = self._route(topic)
        return [] if route is None else route.readable_queue_ids()

    # -- groups ----------------------------------------------------------------------------

    def _group_tables(self) -> dict[str, dict[str, Any]]:
        """Every master's subscription group table, merged (wire names)."""
        tables: dict[str, dict[str, Any]] = {}
        for address in self._masters().values():
            answer = self._call_ok(address, RemotingCommand.request(
                RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), "subscription groups")
            table = fastjson.loads(answer.body).get("subscriptionGroupTable") or {}
            for name, raw in table.items():
                tables.setdefault(str(name), raw)
        return tables

    def subscription_group(self, group: str) -> SubscriptionGroupConfig:
        """The group's config, created on every master with defaults when missing."""
        validate_group(group)
        wire = self._context.wire(group)
        raw = self._group_tables().get(wire)
        if raw is not None:
            config: SubscriptionGroupConfig = bean_from_json(
                SubscriptionGroupConfig, raw, "group_name", wire)
            return dataclasses.replace(config, group_name=group)
        body = fastjson.dumps(bean_to_json(SubscriptionGroupConfig(wire)))
        for address in self._masters().values():
            self._call_ok(address, RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body),
                f"create subscription group {group!r}")
        return SubscriptionGroupConfig(group)

    def consumer_groups(self) -> list[str]:
        """This namespace's groups on every master, sorted (system groups left out)."""
        namespace = self._context.namespace
        return sorted({namespace.unwrap(name) for name in self._group_tables()
                       if namespace.owns(name) and not is_system_group(name)})

    def consumer_progress(self, group: str) -> list[QueueProgress]:
        """The group's position on every queue it has one on, sorted by (topic, queue id)."""
        validate_group(group)
        wire_group = self._context.wire(group)
        rows: dict[tuple[str, int], QueueProgress] = {}
        for address in self._masters().values():
            answer = self._context.broker_call(address, RemotingCommand.request(
                RequestCode.GET_CONSUME_STATS, {"consumerGroup": wire_group}))
            if answer.code != ResponseCode.SUCCESS:
                continue  # this broker has no offsets of the group (RocketMQ answers an error)
            table = fastjson.loads(answer.body).get("offsetTable") or {}
            min_offsets: dict[str, dict[tuple[str, int], int]] = {}
            for key, value in table.items():
                queue = key.as_dict() if isinstance(key, ObjectKey) else {}
                row = self._progress_row(queue, value, address, min_offsets)
                if row is not None:
                    rows[(row.topic, row.queue_id)] = row
        return [rows[key] for key in sorted(rows)]

    def _progress_row(self, queue: dict[str, Any], value: dict[str, Any], address: str,
                      min_offsets: dict[str, dict[tuple[str, int], int]]
                      ) -> QueueProgress | None:
        wire_topic, broker, queue_id = (queue.get("topic"), queue.get("brokerName"),
                                        queue.get("queueId"))
        if not isinstance(wire_topic, str) or not isinstance(broker, str) \
                or not isinstance(queue_id, int) or not self._context.namespace.owns(wire_topic):
            return None
        if wire_topic not in min_offsets:
            min_offsets[wire_topic] = self._min_offsets(address, wire_topic)
        committed = int(value.get("consumerOffset", -1))
        return QueueProgress(
            topic=self._context.app_name(wire_topic),
            queue_id=self._global_id(wire_topic, broker, queue_id),
            committed_offset=committed if committed >= 0 else None,
            min_offset=min_offsets[wire_topic].get((broker, queue_id), 0),
            max_offset=int(value.get("brokerOffset", 0)))

    def _min_offsets(self, address: str, wire_topic: str) -> dict[tuple[str, int], int]:
        answer = self._context.broker_call(address, RemotingCommand.request(
            RequestCode.GET_TOPIC_STATS_INFO, {"topic": wire_topic}))
        if answer.code != ResponseCode.SUCCESS:
            return {}
        table = fastjson.loads(answer.body).get("offsetTable") or {}
        offsets = {}
        for key, value in table.items():
            if isinstance(key, ObjectKey):
                queue = key.as_dict()
                offsets[(str(queue.get("brokerName")), int(queue.get("queueId", -1)))] = int(
                    value.get("minOffset", 0))
        return offsets

    def _global_id(self, wire_topic: str, broker: str, queue_id: int) -> int:
        """The framework queue id of (broker, queue); the broker's own when unroutable."""
        try:
            return self._context.routes.wire_route(wire_topic).global_id(broker, queue_id)
        except (RouteNotFoundError, KeyError):
            return queue_id

    # -- messages --------------------------------------------------------------------------

    def dead_letters(self, group: str, offset: int, max_count: int) -> list[MessageView]:
        """Dead letters of ``group`` from ``offset`` (raised to the queue's min), uncommitted."""
        validate_group(group)
        if type(offset) is not int or offset < 0:
            raise InvalidMessageError(f"offset must be an integer >= 0, got {offset!r}")
        if type(max_count) is not int or not 1 <= max_count <= PULL_BATCH_MAX:
            raise InvalidMessageError(f"max_count must be an integer in 1..{PULL_BATCH_MAX}, "
                                      f"got {max_count!r}")
        wire_group = self._context.wire(group)
        wire_topic = self._context.wire(dead_letter_topic(group))
        try:
            route = self._context.routes.wire_route(wire_topic)
        except RouteNotFoundError:
            return []
        views: list[MessageView] = []
        for broker, address in sorted(route.masters().items()):
            if not route.queue_datas[broker].perm & PERM_READ:
                continue
            views += self._pull_all(address, wire_group, wire_topic, broker, offset,
                                    max_count - len(views), route.global_id(broker, 0))
            if len(views) >= max_count:
                break
        return views

    def _pull_all(self, address: str, wire_group: str, wire_topic: str, broker: str,
                  offset: int, max_count: int, queue_id: int) -> list[MessageView]:
        for _ in range(2):  # once more from the min offset when ``offset`` is below it
            answer = self._context.broker_call(address, RemotingCommand.request(
                RequestCode.PULL_MESSAGE, {
                    "consumerGroup": wire_group, "topic": wire_topic, "queueId": 0,
                    "queueOffset": offset, "maxMsgNums": max_count, "sysFlag": 0x4,
                    "commitOffset": 0, "suspendTimeoutMillis": 0, "subVersion": 0,
                    "subscription": "*", "expressionType": "TAG", "bname": broker}))
            if answer.code == ResponseCode.SUCCESS:
                return self._context.decode_records(answer.body, queue_id)
            if answer.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
                return []
            if answer.code != ResponseCode.PULL_OFFSET_MOVED:
                check_success("dead letters", answer, address=address, topic=wire_topic)
            next_offset = answer.fields.get_int("nextBeginOffset", 0)
            if next_offset <= offset:
                return []
            offset = next_offset
        return []

    def find_by_unique_key(self, topic: str, unique_key: str) -> list[MessageView]:
        """Messages of ``topic`` with this ``UNIQ_KEY`` on every master of the topic."""
        views = self._query(topic, unique_key, QUERY_MAX_NUM, 0, 2**63 - 1, unique=True)
        return [view for view in views if view.unique_key == unique_key]

    def query_by_key(self, topic: str, key: str, max_count: int = QUERY_MAX_NUM,
                     begin_ms: int = 0, end_ms: int | None = None) -> list[MessageView]:
        """Messages of ``topic`` whose KEYS hold ``key`` (every master; oldest first, at most
        ``max_count``), as ``MessageStore.query_by_key`` answers."""
        views = self._query(topic, key, min(max_count, QUERY_MAX_NUM), begin_ms,
                            2**63 - 1 if end_ms is None else end_ms, unique=False)
        found = sorted((view for view in views if key in view.keys),
                       key=lambda view: view.store_timestamp_ms)
        return found[-max_count:] if max_count > 0 else []

    def _query(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int, *,
               unique: bool) -> list[MessageView]:
        """QUERY_MESSAGE to every master of ``topic``; the records they return."""
        validate_topic(topic)
        if not isinstance(key, str) or not key:
            raise InvalidMessageError(f"key must be a non-empty str, got {key!r}", topic=topic)
        route = self._route(topic)
        if route is None:
            return []
        fields: dict[str, Any] = {"topic": route.topic, "key": key, "maxNum": max(1, max_num),
                                  "beginTimestamp": begin_ms, "endTimestamp": end_ms}
        if unique:
            fields["_UNIQUE_KEY_QUERY"] = True
        views: list[MessageView] = []
        for broker, address in sorted(route.masters().items()):
            answer = self._context.broker_call(address, RemotingCommand.request(
                RequestCode.QUERY_MESSAGE, fields))
            if answer.code == ResponseCode.QUERY_NOT_FOUND:
                continue
            check_success(f"query {key!r}", answer, address=address, topic=topic)
            views += self._records_by_queue(answer.body, route, broker)
        return views

    def _records_by_queue(self, body: bytes, route: TopicRoute, broker: str
                          ) -> list[MessageView]:
        """Records of several queues, each numbered with its own global queue id."""
        views: list[MessageView] = []
        at = 0
        while at + _SIZE_AND_QUEUE.size <= len(body):
            size, queue_id = _SIZE_AND_QUEUE.unpack_from(body, at)
            if size <= 0:
                break
            views += self._context.decode_records(body[at:at + size],
                                                  _safe(route, broker, queue_id))
            at += size
        if at != len(body):
            views += self._context.decode_records(body[at:], 0)  # raises: a torn record
        return views


def _safe(route: TopicRoute, broker: str, queue_id: int) -> int:
    try:
        return route.global_id(broker, queue_id)
    except KeyError:
        return queue_id
