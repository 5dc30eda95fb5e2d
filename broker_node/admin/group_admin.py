"""The broker's consumer-group administration over remoting.

- 200 UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: body ``SubscriptionGroupConfig`` JSON →
  ``subscriptionGroup.json`` (fields Postbox does not model are kept).
- 201 GET_ALL_SUBSCRIPTIONGROUP_CONFIG: ``SubscriptionGroupWrapper``.
- 207 DELETE_SUBSCRIPTIONGROUP: forgets the group's config (its offsets too with
  ``cleanOffset=true``).
- 203 GET_CONSUMER_CONNECTION_LIST: ``ConsumerConnection`` from the ``ConsumerBook``; 206
  CONSUMER_NOT_ONLINE without live members.
- 208 GET_CONSUME_STATS: ``ConsumeStats``: for each queue of the group's topics (committed on,
  subscribed, its retry topic; or the one ``topic`` asked) the broker offset, the committed
  offset (0 when none), the same as pull offset, and the store time of the last consumed
  message; keyed by MessageQueue objects (fastjson's object keys, which ``mqadmin
  consumerProgress`` reads).
- 300 QUERY_TOPIC_CONSUME_BY_WHO: ``GroupList``: groups that committed offsets on the topic or
  whose live consumers subscribe to it.

Thread-safety: no state of its own.
"""

from __future__ import annotations

from typing import Any

from postbox.network.protocol import fastjson
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.network.protocol.wire import RemotingCommand
from postbox.storage_engine.broker import Broker
from postbox.storage_engine.contract.config_beans import (
    SubscriptionGroupConfig,
    bean_from_json,
    bean_to_json,
    validate_group,
)
from postbox.storage_engine.errors import ConfigError, InvalidMessageError
from postbox.storage_engine.formats.fastjson import FastjsonError, ObjectKey

from ..server.errors import RequestRefusedError
from .consumer_book import ConsumerBook
from .topic_admin import last_store_time_ms

NAME_MAX_CHARS = 255
GROUP_BODY_MAX_BYTES = 64 * 1024


class GroupAdmin:
    """Handlers of the group admin codes over one broker."""

    def __init__(self, broker: Broker, broker_name: str, book: ConsumerBook) -> None:
        self._broker = broker
        self._broker_name = broker_name
        self._book = book

    def register_handlers(self, handlers: Any) -> None:
        """Bind the served codes in a ``HandlerTable``."""
        handlers.register(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, self.update_group)
        handlers.register(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, self.all_groups)
        handlers.register(RequestCode.DELETE_SUBSCRIPTIONGROUP, self.delete_group)
        handlers.register(RequestCode.GET_CONSUMER_CONNECTION_LIST, self.connections)
        handlers.register(RequestCode.GET_CONSUME_STATS, self.consume_stats)
        handlers.register(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, self.consumed_by)

    def update_group(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP."""
        config = parse_group_body(request.body)
        table = self._broker.tables.subscription_groups
        limit = self._broker.store.config.broker.subscription_group_count_max
        if table.get(config.group_name) is None and len(table) >= limit:
            raise RequestRefusedError(
                ResponseCode.SYSTEM_ERROR,
                f"cannot create subscription group {config.group_name!r}: the broker holds "
                f"{len(table)} groups, broker.subscription_group_count_max")
        if table.put(config):
            table.persist()
        return request.response()

    def all_groups(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: the configured groups, and with RocketMQ's default
        settings the groups the broker knows only from committed offsets or live members (as
        ``Broker.consumer_groups`` lists them: a Postbox broker creates no config for a group
        that only commits)."""
        table = self._broker.tables.subscription_groups
        groups = {name: bean_to_json(table.get(name) or SubscriptionGroupConfig(group_name=name))
                  for name in self._broker.consumer_groups()}
        version = table.data_version
        body = {"dataVersion": {"counter": version.counter, "stateVersion": 0,
                                "timestamp": version.timestamp_ms},
                "forbiddenTable": {}, "subscriptionGroupTable": groups}
        return request.response(body=fastjson.dumps(body))

    def delete_group(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """DELETE_SUBSCRIPTIONGROUP."""
        group = request.fields.get_str("groupName", max_chars=NAME_MAX_CHARS)
        tables = self._broker.tables
        if tables.subscription_groups.remove(group):
            tables.subscription_groups.persist()
        if request.fields.get_bool("cleanOffset", False) and \
                tables.consumer_offsets.remove_group(group):
            tables.consumer_offsets.persist()
        return request.response()

    def connections(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """GET_CONSUMER_CONNECTION_LIST."""
        group = _group(request)
        view = self._book.view(group)
        if view is None:
            raise RequestRefusedError(ResponseCode.CONSUMER_NOT_ONLINE,
                                      f"the consumer group[{group}] not online")
        return request.response(body=fastjson.dumps(view.as_json()))

    def consume_stats(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """GET_CONSUME_STATS."""
        group = _group(request)
        topic = request.fields.get_str("topic", None, max_chars=NAME_MAX_CHARS) or None
        table = {}
        for progress in self._broker.consumer_progress(group):
            if topic is not None and progress.topic != topic:
                continue
            consumed = progress.committed_offset or 0
            key = ObjectKey.of(brokerName=self._broker_name,
                                        queueId=progress.queue_id, topic=progress.topic)
            table[key] = {"brokerOffset": progress.max_offset, "consumerOffset": consumed,
                          "lastTimestamp": last_store_time_ms(self._broker, progress.topic,
                                                              progress.queue_id, consumed),
                          "pullOffset": consumed}
        return request.response(body=fastjson.dumps({"consumeTps": 0.0,
                                                     "offsetTable": table}))

    def consumed_by(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """QUERY_TOPIC_CONSUME_BY_WHO."""
        topic = request.fields.get_str("topic", max_chars=NAME_MAX_CHARS)
        groups = set(self._book.groups_of_topic(topic))
        for key in self._broker.tables.consumer_offsets.keys():  # noqa: SIM118 (a list copy)
            name, _, group = key.partition("@")
            if name == topic and group:
                groups.add(group)
        return request.response(body=fastjson.dumps({"groupList": sorted(groups)}))


def _group(request: RemotingCommand) -> str:
    group = request.fields.get_str("consumerGroup", max_chars=NAME_MAX_CHARS)
    try:
        return validate_group(group)
    except InvalidMessageError as error:
        raise RequestRefusedError(ResponseCode.INVALID_PARAMETER, str(error)) from None


def parse_group_body(body: bytes) -> SubscriptionGroupConfig:
    """A ``SubscriptionGroupConfig`` from its JSON body; 29 INVALID_PARAMETER when it is not."""
    if not body or len(body) > GROUP_BODY_MAX_BYTES:
        raise RequestRefusedError(ResponseCode.INVALID_PARAMETER,
                                  f"the body must be a SubscriptionGroupConfig of 1.."
                                  f"{GROUP_BODY_MAX_BYTES} bytes, got {len(body)}")
    try:
        raw = fastjson.loads(body)
        name = raw.get("groupName") if isinstance(raw, dict) else None
        validate_group(name)
        config: SubscriptionGroupConfig = bean_from_json(SubscriptionGroupConfig, raw,
                                                         "group_name", str(name))
        return config
    except (FastjsonError, UnicodeDecodeError, ConfigError, InvalidMessageError,
            ValueError, TypeError) as error:
        raise RequestRefusedError(ResponseCode.INVALID_PARAMETER,
                                  f"bad SubscriptionGroupConfig: {error}") from None


__all__ = ["GroupAdmin", "parse_group_body"]
