"""The broker's topic administration over remoting, and the topic table it advertises.

- 17 UPDATE_AND_CREATE_TOPIC: ``Broker.create_topic`` (read = write queues: a Postbox topic
  has one queue count).
- 215 DELETE_TOPIC_IN_BROKER: forgets the topic's config and its consumer offsets; the stored
  messages stay in the commit log and the queue files until retention removes them (DESIGN §9:
  nothing valid is deleted on request).
- 21 GET_ALL_TOPIC_CONFIG: ``TopicConfigSerializeWrapper`` of every topic.
- 351 GET_TOPIC_CONFIG: one topic's ``TopicConfig`` (``mqadmin topicStatus`` reads it); 17 for
  an unknown topic.
- 202 GET_TOPIC_STATS_INFO: ``TopicStatsTable`` (min/max offset and last store time per queue,
  object keys); 17 for an unknown topic.

``advertised_topics`` is the topic table this broker shows a name server (the local route
table, REGISTER_BROKER): every topic of ``topics.json`` plus, while ``auto_create_topic`` is on,
``TBW102`` with perm 7 — the topic a Java producer reads the route of when its own topic has
none yet, then sends with ``defaultTopic=TBW102`` so that the broker creates it, as Apache
brokers advertise it.

Thread-safety: no state of its own; the broker's tables lock.
"""

from __future__ import annotations

from typing import Any

from storage_engine.broker import Broker
from storage_engine.broker.config_beans import TopicConfig, bean_to_json
from storage_engine.errors import ConfigError
from storage_engine.store.topics import DELAY_TOPIC

from .. import fastjson
from ..codes import RequestCode, ResponseCode
from ..namesrv.route_table import QueueData
from ..server.errors import RequestRefusedError
from ..wire import RemotingCommand

AUTO_CREATE_TOPIC = "TBW102"
AUTO_CREATE_TOPIC_PERM = 7  # READ | WRITE | INHERIT
NAME_MAX_CHARS = 255
GET_TOPIC_CONFIG = 351
_MESSAGE_TYPE_ATTRIBUTE = "+message.type="


def advertised_topics(broker: Broker, broker_name: str) -> dict[str, QueueData]:
    """Topic → ``QueueData`` this broker shows a name server."""
    table = broker.tables.topics
    topics = {}
    for name in table.names():
        config = table.get(name)
        if config is not None:
            topics[name] = QueueData(broker_name, config.read_queue_nums,
                                     config.write_queue_nums, config.perm,
                                     config.topic_sys_flag)
    settings = broker.store.config.broker
    if settings.auto_create_topic and AUTO_CREATE_TOPIC not in topics:
        count = settings.default_topic_queue_count
        topics[AUTO_CREATE_TOPIC] = QueueData(broker_name, count, count,
                                              AUTO_CREATE_TOPIC_PERM)
    return topics


def data_version(broker: Broker) -> dict[str, int]:
    """``dataVersion`` of the topic table (fastjson's field names)."""
    version = broker.tables.topics.data_version
    return {"counter": version.counter, "stateVersion": 0, "timestamp": version.timestamp_ms}


class TopicAdmin:
    """Handlers of the topic admin codes over one broker."""

    def __init__(self, broker: Broker, broker_name: str) -> None:
        self._broker = broker
        self._broker_name = broker_name

    def register_handlers(self, handlers: Any) -> None:
        """Bind the served codes in a ``HandlerTable``."""
        handlers.register(RequestCode.UPDATE_AND_CREATE_TOPIC, self.create_topic)
        handlers.register(RequestCode.DELETE_TOPIC_IN_BROKER, self.delete_topic)
        handlers.register(RequestCode.GET_ALL_TOPIC_CONFIG, self.all_topic_config)
        handlers.register(RequestCode.GET_TOPIC_STATS_INFO, self.topic_stats)
        handlers.register(GET_TOPIC_CONFIG, self.topic_config)

    def create_topic(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """UPDATE_AND_CREATE_TOPIC."""
        fields = request.fields
        topic = fields.get_str("topic", max_chars=NAME_MAX_CHARS)
        read = fields.get_int("readQueueNums", low=1, high=1 << 20)
        write = fields.get_int("writeQueueNums", low=1, high=1 << 20)
        perm = fields.get_int("perm", low=0, high=15)
        order = fields.get_bool("order", False)
        if read != write:
            raise RequestRefusedError(
                ResponseCode.INVALID_PARAMETER,
                f"topic {topic}: readQueueNums={read} and writeQueueNums={write} differ; a "
                "Postbox topic has one queue count (give both the same value)")
        _check_attributes(topic, fields.get_str("attributes", None))
        try:
            self._broker.create_topic(topic, write, perm=perm, order=order)
        except ConfigError as error:
            raise RequestRefusedError(ResponseCode.INVALID_PARAMETER, str(error)) from None
        return request.response()

    def delete_topic(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """DELETE_TOPIC_IN_BROKER."""
        topic = request.fields.get_str("topic", max_chars=NAME_MAX_CHARS)
        if topic == DELAY_TOPIC:
            raise RequestRefusedError(ResponseCode.INVALID_PARAMETER,
                                      f"{DELAY_TOPIC} is the delay service's topic")
        tables = self._broker.tables
        if tables.topics.remove(topic):
            tables.topics.persist()
        if tables.consumer_offsets.clean_topic(topic):
            tables.consumer_offsets.persist()
        return request.response()

    def all_topic_config(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """GET_ALL_TOPIC_CONFIG: every topic (no paging)."""
        table = self._broker.tables.topics
        configs = {name: bean_to_json(config) for name in table.names()
                   if (config := table.get(name)) is not None}
        for name, data in advertised_topics(self._broker, self._broker_name).items():
            if name not in configs:  # TBW102 while auto-creation is on
                configs[name] = bean_to_json(TopicConfig(
                    name, read_queue_nums=data.read_queue_nums,
                    write_queue_nums=data.write_queue_nums, perm=data.perm))
        body = {"dataVersion": data_version(self._broker), "topicConfigTable": configs}
        return request.response(body=fastjson.dumps(body))

    def topic_config(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """GET_TOPIC_CONFIG."""
        topic = request.fields.get_str("topic", max_chars=NAME_MAX_CHARS)
        config = self._broker.topic_config(topic)
        if config is None:
            raise RequestRefusedError(ResponseCode.TOPIC_NOT_EXIST,
                                      f"No topic in this broker. topic: {topic}")
        return request.response(body=fastjson.dumps(bean_to_json(config)))

    def topic_stats(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """GET_TOPIC_STATS_INFO."""
        topic = request.fields.get_str("topic", max_chars=NAME_MAX_CHARS)
        config = self._broker.topic_config(topic)
        if config is None:
            raise RequestRefusedError(ResponseCode.TOPIC_NOT_EXIST,
                                      f"topic[{topic}] not exist")
        store = self._broker.store
        table = {}
        for queue_id in range(max(config.read_queue_nums, config.write_queue_nums)):
            low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
            key = fastjson.ObjectKey.of(brokerName=self._broker_name, queueId=queue_id,
                                        topic=topic)
            table[key] = {"lastUpdateTimestamp": last_store_time_ms(self._broker, topic,
                                                                    queue_id, high),
                          "maxOffset": high, "minOffset": low}
        return request.response(body=fastjson.dumps({"offsetTable": table}))


def last_store_time_ms(broker: Broker, topic: str, queue_id: int, next_offset: int) -> int:
    """Store time of the message just before ``next_offset`` (0 when there is none)."""
    if next_offset <= 0 or next_offset <= broker.store.min_offset(topic, queue_id):
        return 0
    result = broker.store.get_message("", topic, queue_id, next_offset - 1, 1)
    return result.messages[0].store_timestamp_ms if result.messages else 0


def _check_attributes(topic: str, attributes: str | None) -> None:
    """Only ``+message.type=…`` is understood; anything else is refused by name."""
    for item in filter(None, (attributes or "").split(",")):
        if not item.startswith(_MESSAGE_TYPE_ATTRIBUTE):
            raise RequestRefusedError(
                ResponseCode.INVALID_PARAMETER,
                f"topic {topic}: attribute {item[:80]!r} is not supported (only "
                f"{_MESSAGE_TYPE_ATTRIBUTE}...)")


__all__ = ["AUTO_CREATE_TOPIC", "TopicAdmin", "advertised_topics", "data_version",
           "last_store_time_ms"]
