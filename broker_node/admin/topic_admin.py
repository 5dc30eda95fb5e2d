"""The broker's topic administration over remoting, and the topic table it advertises.

- 17 UPDATE_AND_CREATE_TOPIC: ``Broker.create_topic`` (read = write queues: a Postbox topic
  has one queue count).
- 215 DELETE_TOPIC_IN_BROKER: forgets the topic's config and its consumer offsets; the stored
  messages stay in the commit log and the queue files until retention removes them (nothing
  valid is deleted on request).
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

from postbox.network.protocol import fastjson
from postbox.network.protocol.codes import RequestCode, ResponseCode
from postbox.network.protocol.wire import RemotingCommand
from postbox.storage_engine.broker import Broker
from postbox.storage_engine.contract.config_beans import TopicConfig, bean_to_json
from postbox.storage_engine.errors import ConfigError
from postbox.storage_engine.formats.fastjson import ObjectKey
from postbox.storage_engine.formats.topic_names import AUTO_CREATE_TOPIC, DELAY_TOPIC

from ..namesrv.route_table import QueueData
from ..server.errors import RequestRefusedError

AUTO_CREATE_TOPIC_PERM = 7  # READ | WRITE | INHERIT
NAME_MAX_CHARS = 255
GET_TOPIC_CONFIG = 351
_MESSAGE_TYPE_ATTRIBUTE = "+message.type="


class AdvertisedTopics:
    """The topics this broker shows a name server, read live (a ``TopicSource``)."""

    def __init__(self, broker: Broker, broker_name: str) -> None:
        self._broker = broker
        self._broker_name = broker_name
        self._cached: tuple[object, dict[str, QueueData]] | None = None  # (dataVersion, all)

    def get(self, topic: str) -> QueueData | None:
        """One topic's queues (``TBW102`` while auto-creation is on), or None."""
        config = self._broker.topic_config(topic)
        if config is not None:
            return QueueData(self._broker_name, config.read_queue_nums,
                             config.write_queue_nums, config.perm, config.topic_sys_flag)
        settings = self._broker.store.config.broker
        if topic == AUTO_CREATE_TOPIC and settings.auto_create_topic:
            count = settings.default_topic_queue_count
            return QueueData(self._broker_name, count, count, AUTO_CREATE_TOPIC_PERM)
        return None

    def all(self) -> dict[str, QueueData]:
        """Every topic of ``topics.json`` (and ``TBW102`` while auto-creation is on); built
        again only when the table's ``dataVersion`` moved (a copy is returned)."""
        version = self._broker.tables.topics.data_version
        cached = self._cached
        if cached is None or cached[0] != version:
            names = [*self._broker.tables.topics.names(), AUTO_CREATE_TOPIC]
            cached = (version, {name: data for name in names
                                if (data := self.get(name)) is not None})
            self._cached = cached  # one assignment: readers see the old or the new pair
        return dict(cached[1])


def advertised_topics(broker: Broker, broker_name: str) -> dict[str, QueueData]:
    """Topic → ``QueueData`` this broker shows a name server."""
    return AdvertisedTopics(broker, broker_name).all()


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

    def _existing_topic(self, request: RemotingCommand) -> TopicConfig:
        """The config of the request's ``topic``; 17 TOPIC_NOT_EXIST when there is none."""
        topic = request.fields.get_str("topic", max_chars=NAME_MAX_CHARS)
        config = self._broker.topic_config(topic)
        if config is None:
            raise RequestRefusedError(ResponseCode.TOPIC_NOT_EXIST,
                                      f"No topic in this broker. topic: {topic}")
        return config

    def topic_config(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """GET_TOPIC_CONFIG."""
        config = self._existing_topic(request)
        return request.response(body=fastjson.dumps(bean_to_json(config)))

    def topic_stats(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """GET_TOPIC_STATS_INFO."""
        config = self._existing_topic(request)
        topic = config.topic_name
        store = self._broker.store
        table = {}
        for queue_id in range(max(config.read_queue_nums, config.write_queue_nums)):
            low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
            key = ObjectKey.of(brokerName=self._broker_name, queueId=queue_id,
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


__all__ = ["AdvertisedTopics", "TopicAdmin", "advertised_topics",
           "data_version", "last_store_time_ms"]
