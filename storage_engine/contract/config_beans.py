"""The Java beans kept in ``topics.json`` and ``subscriptionGroup.json`` (reference §9.2).

``TopicConfig`` and ``SubscriptionGroupConfig`` are frozen dataclasses with RocketMQ's defaults;
``FIELDS`` maps each attribute to its JSON (camelCase) name and type, and ``extra`` carries the
fields Postbox does not model (5.x ``attributes``, ``groupRetryPolicy``, ...) so they survive a
load/persist cycle. ``bean_to_json`` writes the fields sorted by name, as fastjson does.
Construction type-checks the known fields and raises ``ConfigError`` (a ``ValueError``). Pure: no
I/O; instances are frozen and ``extra`` is a read-only view (its nested values are not copied, so
treat them as read-only), so beans are safe to share between threads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from ..errors import ConfigError, InvalidMessageError, InvalidTopicError
from ..formats.topic_names import retry_topic
from .topics import validate_topic


def validate_group(group: object) -> str:
    """Return ``group`` if it is a legal consumer-group name, else raise ``InvalidMessageError``.

    A group is legal when its retry topic ``%RETRY%<group>`` is a legal topic.
    """
    if not isinstance(group, str) or not group:
        raise InvalidMessageError(f"consumer group must be a non-empty string, got {group!r}")
    try:
        validate_topic(retry_topic(group))
    except InvalidTopicError as error:
        raise InvalidMessageError(f"consumer group {group!r} is not allowed: {error}") from error
    return group


# (attribute, JSON field name, type) of each known bean field.
_BeanFields = tuple[tuple[str, str, type], ...]


@dataclass(frozen=True)
class DataVersion:
    """``dataVersion`` of topics.json / subscriptionGroup.json: bumped on every change."""

    counter: int
    timestamp_ms: int


@dataclass(frozen=True)
class TopicConfig:
    """One entry of ``topicConfigTable`` (Java ``TopicConfig``); ``extra`` = unknown fields."""

    topic_name: str
    read_queue_nums: int = 8
    write_queue_nums: int = 8
    perm: int = 6  # PermName bits: PRIORITY 8, READ 4, WRITE 2, INHERIT 1
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)

    FIELDS: ClassVar[_BeanFields] = (
        ("order", "order", bool), ("perm", "perm", int),
        ("read_queue_nums", "readQueueNums", int), ("topic_filter_type", "topicFilterType", str),
        ("topic_name", "topicName", str), ("topic_sys_flag", "topicSysFlag", int),
        ("write_queue_nums", "writeQueueNums", int))

    def __post_init__(self) -> None:
        _check_bean(self)
        if self.read_queue_nums < 0 or self.write_queue_nums < 0:
            raise ConfigError(f"topic {self.topic_name!r}: queue counts must be >= 0")


@dataclass(frozen=True)
class SubscriptionGroupConfig:
    """One entry of ``subscriptionGroupTable`` (the nine fields of RocketMQ 4.x's
    ``SubscriptionGroupConfig``); ``extra`` carries 5.x and other unknown fields."""

    group_name: str
    broker_id: int = 0
    consume_broadcast_enable: bool = True
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    notify_consumer_ids_changed_enable: bool = True
    retry_max_times: int = 16
    retry_queue_nums: int = 1
    which_broker_when_consume_slowly: int = 1
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)

    FIELDS: ClassVar[_BeanFields] = (
        ("broker_id", "brokerId", int),
        ("consume_broadcast_enable", "consumeBroadcastEnable", bool),
        ("consume_enable", "consumeEnable", bool),
        ("consume_from_min_enable", "consumeFromMinEnable", bool),
        ("group_name", "groupName", str),
        ("notify_consumer_ids_changed_enable", "notifyConsumerIdsChangedEnable", bool),
        ("retry_max_times", "retryMaxTimes", int), ("retry_queue_nums", "retryQueueNums", int),
        ("which_broker_when_consume_slowly", "whichBrokerWhenConsumeSlowly", int))

    def __post_init__(self) -> None:
        _check_bean(self)


def _check_bean(bean: Any) -> None:
    """Type-check the known fields and freeze ``extra`` (a read-only copy)."""
    for attribute, _, kind in bean.FIELDS:
        value = getattr(bean, attribute)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ConfigError(f"{type(bean).__name__}.{attribute} must be {kind.__name__}, "
                              f"got {value!r}")
    names = {json_name for _, json_name, _ in bean.FIELDS}
    for key in bean.extra:
        if not isinstance(key, str) or key in names:
            raise ConfigError(f"{type(bean).__name__}.extra has the key {key!r} (extra holds "
                              "only unknown string field names)")
    object.__setattr__(bean, "extra", MappingProxyType(dict(bean.extra)))


def bean_from_json(kind: type[TopicConfig | SubscriptionGroupConfig], raw: Any,
                   name_attribute: str, map_key: str) -> Any:
    """A bean from its JSON object; the map key stands in for a missing name field."""
    if not isinstance(raw, dict):
        raise ValueError(f"entry {map_key!r} is not an object")
    attributes = {json_name: attribute for attribute, json_name, _ in kind.FIELDS}
    values: dict[str, Any] = {name_attribute: map_key}
    extra: dict[str, Any] = {}
    for key, value in raw.items():
        if key in attributes:
            values[attributes[key]] = value
        elif isinstance(key, str):
            extra[key] = value
        else:
            raise ValueError(f"entry {map_key!r} has a non-string field name {key!r}")
    return kind(**values, extra=extra)


def bean_to_json(bean: Any) -> dict[str, Any]:
    """The bean's JSON object: known and unknown fields, sorted by name (fastjson's order)."""
    values = {json_name: getattr(bean, attribute) for attribute, json_name, _ in bean.FIELDS}
    values.update(bean.extra)
    return {name: values[name] for name in sorted(values)}
