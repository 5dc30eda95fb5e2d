"""The admin side of the remoting broker: topics, groups, statistics (``mqadmin``'s codes).

- ``topic_admin``: create/delete topics, every topic's config, a topic's queue statistics, and
  ``advertised_topics`` (what the broker shows a name server, ``TBW102`` included).
- ``group_admin``: subscription groups, consume statistics, consumer connections, who
  consumes a topic.
- ``consumer_book``: heartbeat details of live consumers (the HEART_BEAT handler records them).
- ``runtime_info``: GET_BROKER_RUNTIME_INFO and the counters behind it.

``BrokerAdmin`` binds them all, and refuses UPDATE_BROKER_CONFIG (25) for good: remote
configuration writes are not served (CVE-2023-33246).
"""

from __future__ import annotations

from typing import Any

from storage_engine.broker import Broker
from storage_engine.clock import Clock

from ..codes import RequestCode
from ..namesrv.processor import refuse_config_write
from .consumer_book import Connection, ConsumerBook, GroupView
from .group_admin import GroupAdmin
from .runtime_info import RuntimeStats, register_runtime_info, runtime_table
from .topic_admin import AUTO_CREATE_TOPIC, TopicAdmin, advertised_topics, data_version


class BrokerAdmin:
    """Every admin handler of one broker, with the state they share."""

    def __init__(self, broker: Broker, broker_name: str, *, clock: Clock | None = None) -> None:
        self.broker = broker
        self.broker_name = broker_name
        self.stats = RuntimeStats(clock or broker.store.clock)
        self.consumers = ConsumerBook(broker)
        self.topics = TopicAdmin(broker, broker_name)
        self.groups = GroupAdmin(broker, broker_name, self.consumers)

    def register_handlers(self, handlers: Any) -> None:
        """Bind every admin code in a ``HandlerTable``."""
        self.topics.register_handlers(handlers)
        self.groups.register_handlers(handlers)
        register_runtime_info(handlers, self.broker, self.stats)
        handlers.register(RequestCode.UPDATE_BROKER_CONFIG, refuse_config_write)


__all__ = ["AUTO_CREATE_TOPIC", "BrokerAdmin", "Connection", "ConsumerBook", "GroupAdmin",
           "GroupView", "RuntimeStats", "TopicAdmin", "advertised_topics", "data_version",
           "runtime_table"]
