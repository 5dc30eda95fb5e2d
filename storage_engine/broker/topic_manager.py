"""``TopicManager``: topic configs (``topics.json``) and queue selection for sends.

RocketMQ's ``TopicConfigManager`` plus the producer's queue choice. Topics are created
explicitly (``create``), on first send when ``broker.auto_create_topic`` is on, or — retry and
dead-letter topics — by the broker itself (``ensure``). Every change is persisted at once
(reference §9.3: topics are written on change). ``SCHEDULE_TOPIC_XXXX`` is a system topic: it is
never created or sent to as a user topic.

Queue selection: an explicit queue id must be below the topic's ``write_queue_nums``; a sharding
key picks ``abs(String.hashCode(key)) % write_queue_nums`` (Java's ``Math.abs(Integer.MIN_VALUE)``
stays negative; Postbox maps that one hash to queue 0); otherwise a per-topic round robin.

Limits: at most ``broker.topic_count_max`` topics (``TableFullError``) and
``broker.topic_queue_count_max`` queues a topic (``LimitExceededError``), each error naming the
setting to raise.

Thread-safety: every method may be called from any thread. Creation is serialized by one lock
(create-if-absent must not race); lookups go to the table, which has its own lock.
Crash behaviour: a created topic is on disk when ``create``/``ensure``/``for_send`` returns.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from ..config import BrokerConfig
from ..contract.config_beans import TopicConfig
from ..contract.model import PERM_READ_WRITE, PERM_WRITE
from ..contract.rules import sharding_queue
from ..contract.topics import validate_topic
from ..errors import (
    ConfigError,
    InvalidQueueError,
    InvalidTopicError,
    LimitExceededError,
    NoPermissionError,
    TableFullError,
    TopicNotFoundError,
)
from ..formats.topic_names import DELAY_TOPIC, TIMER_TOPIC
from .config_stores import TopicConfigTable

PERM_MAX = 15  # PRIORITY 8 | READ 4 | WRITE 2 | INHERIT 1



class TopicManager:
    """Topic configs of one broker."""

    def __init__(self, table: TopicConfigTable, config: BrokerConfig,
                 queue_id_count: int) -> None:
        self._table = table
        self._config = config
        self._queue_id_count = queue_id_count
        self._queue_count_max = min(queue_id_count, config.topic_queue_count_max)
        self._create_lock = threading.Lock()
        self._counter_lock = threading.Lock()
        self._round_robin: dict[str, int] = {}

    def get(self, topic: str) -> TopicConfig | None:
        """The topic's config, or None."""
        return self._table.get(topic)

    def create(self, topic: str, queue_count: int | None, perm: int, order: bool
               ) -> TopicConfig:
        """Create or update a user topic (read = write = ``queue_count``); persisted."""
        check_user_topic(topic)
        count = self._config.default_topic_queue_count if queue_count is None else queue_count
        self._check_queue_count(topic, count)
        if type(perm) is not int or not 0 <= perm <= PERM_MAX:
            raise ConfigError(f"topic {topic!r}: perm must be an integer in 0..{PERM_MAX}, "
                              f"got {perm!r}")
        if not isinstance(order, bool):
            raise ConfigError(f"topic {topic!r}: order must be a bool, got {order!r}")
        with self._create_lock:
            existing = self._table.get(topic)
            fields: dict[str, Any] = dict(read_queue_nums=count, write_queue_nums=count,
                                          perm=perm, order=order)
            if existing is None:
                self._check_room(topic)
            config = (TopicConfig(topic, **fields) if existing is None
                      else dataclasses.replace(existing, **fields))
            if self._table.put(config):
                self._table.persist()
            return config

    def ensure(self, topic: str, queue_count: int, perm: int) -> TopicConfig:
        """The topic's config, created with ``queue_count`` queues and ``perm`` if absent."""
        config = self._table.get(topic)
        if config is not None:
            return config
        validate_topic(topic)
        self._check_queue_count(topic, queue_count)
        with self._create_lock:
            config = self._table.get(topic)
            if config is None:
                self._check_room(topic)
                config = TopicConfig(topic, read_queue_nums=queue_count,
                                     write_queue_nums=queue_count, perm=perm)
                self._table.put(config)
                self._table.persist()
            return config

    def for_send(self, topic: str) -> TopicConfig:
        """The config of a user topic about to be sent to: auto-created, writable.

        Raises:
            InvalidTopicError: an invalid name, or ``SCHEDULE_TOPIC_XXXX``.
            TopicNotFoundError: unknown and ``broker.auto_create_topic`` is off.
            NoPermissionError: the topic's perm lacks PERM_WRITE.
        """
        config = self._table.get(topic)
        if config is None:
            check_user_topic(topic)
            if not self._config.auto_create_topic:
                raise TopicNotFoundError(
                    f"topic {topic!r} does not exist and broker.auto_create_topic is off: "
                    "create it first (Broker.create_topic)", topic=topic)
            config = self.ensure(topic, self._config.default_topic_queue_count,
                                 PERM_READ_WRITE)
        elif topic in (DELAY_TOPIC, TIMER_TOPIC):
            check_user_topic(topic)
        check_writable(config)
        return config

    def select_queue(self, config: TopicConfig, queue_id: int | None,
                     sharding_key: str | None) -> int:
        """The queue a send goes to (explicit, by sharding key, else round robin)."""
        count = config.write_queue_nums
        topic = config.topic_name
        if count <= 0:
            raise InvalidQueueError(f"topic {topic!r} has no write queues "
                                    "(write_queue_nums=0)", topic=topic)
        if queue_id is not None:
            if type(queue_id) is not int or not 0 <= queue_id < count:
                raise InvalidQueueError(f"queue id {queue_id!r} is not in 0..{count - 1} "
                                        f"(topic {topic!r} has {count} write queues)",
                                        topic=topic)
            return queue_id
        if sharding_key is not None:
            if not isinstance(sharding_key, str):
                raise InvalidQueueError(f"sharding key must be a str, got {sharding_key!r}",
                                        topic=topic)
            return sharding_queue(sharding_key, count)
        with self._counter_lock:
            turn = self._round_robin.get(topic, 0)
            self._round_robin[topic] = turn + 1
        return turn % count

    def _check_queue_count(self, topic: str, count: object) -> None:
        if type(count) is not int or count < 1:
            raise ConfigError(f"topic {topic!r}: queue_count must be an integer in "
                              f"1..{self._queue_count_max}, got {count!r}")
        if count > self._queue_count_max:
            setting = ("broker.topic_queue_count_max (broker.conf topicQueueCountMax)"
                       if self._queue_count_max < self._queue_id_count else "queue_id_max")
            raise LimitExceededError(
                f"topic {topic!r}: {count} queues asked, at most {self._queue_count_max} "
                f"allowed; raise {setting} to allow more", setting=setting.split()[0],
                topic=topic)

    def _check_room(self, topic: str) -> None:
        """Raise ``TableFullError`` when no further topic may be created (under the lock)."""
        limit = self._config.topic_count_max
        if len(self._table) >= limit:
            raise TableFullError(
                f"cannot create topic {topic!r}: the broker holds {len(self._table)} topics, "
                f"the most broker.topic_count_max (broker.conf topicCountMax) allows ({limit}, "
                "retry and dead-letter topics included); delete unused topics or raise it",
                setting="broker.topic_count_max", topic=topic)


def check_user_topic(topic: str) -> str:
    """Validate a topic name that a user may create or send to (not ``SCHEDULE_TOPIC_XXXX``,
    not ``rmq_sys_wheel_timer``)."""
    validate_topic(topic)
    if topic in (DELAY_TOPIC, TIMER_TOPIC):
        raise InvalidTopicError(f"{topic} is a system topic of scheduled delivery: send with "
                                "a DELAY property (or a TIMER_* one) instead", topic=topic)
    return topic


def check_writable(config: TopicConfig) -> None:
    """Raise ``NoPermissionError`` unless the topic's perm has PERM_WRITE."""
    if not config.perm & PERM_WRITE:
        raise NoPermissionError(f"topic {config.topic_name!r} is not writable "
                                f"(perm={config.perm})", topic=config.topic_name)


__all__ = ["PERM_MAX", "TopicManager", "check_user_topic", "check_writable"]
