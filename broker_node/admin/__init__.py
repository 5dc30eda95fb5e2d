"""The admin side of the remoting broker: topics, groups, statistics (``mqadmin``'s codes).

- ``topic_admin``: create/delete topics, every topic's config, a topic's queue statistics, and
  ``advertised_topics`` (what the broker shows a name server, ``TBW102`` included).
- ``group_admin``: subscription groups, consume statistics, consumer connections, who
  consumes a topic.
- ``consumer_book``: live consumers as the broker's registry and the data plane's heartbeats
  describe them.
- ``runtime_info``: GET_BROKER_RUNTIME_INFO and the counters behind it.

``BrokerAdmin`` binds them all (``attach`` puts them on a ``BrokerRemotingServer``, next to the
data plane whose heartbeats and pulls they read), and refuses UPDATE_BROKER_CONFIG (25) for
good: remote configuration writes are not served (CVE-2023-33246).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from postbox.network.protocol.codes import RequestCode
from postbox.storage_engine.broker import Broker
from postbox.storage_engine.clock import Clock

from ..namesrv.processor import refuse_config_write
from .consumer_book import Connection, ConsumerBook, GroupView
from .group_admin import GroupAdmin
from .runtime_info import RuntimeStats, register_runtime_info, runtime_table
from .topic_admin import (
    AdvertisedTopics,
    TopicAdmin,
    advertised_topics,
    data_version,
)

if TYPE_CHECKING:  # types only: the admin reads the data plane, never the reverse
    from ..server.broker import BrokerRemotingServer, ClientRegistry


class BrokerAdmin:
    """Every admin handler of one broker, with the state they share."""

    def __init__(self, broker: Broker, broker_name: str, *,
                 registry: ClientRegistry | None = None, stats: RuntimeStats | None = None,
                 clock: Clock | None = None) -> None:
        self.broker = broker
        self.broker_name = broker_name
        self.stats = stats if stats is not None else RuntimeStats(clock or broker.store.clock)
        self.consumers = ConsumerBook(broker, registry)
        self.topics = TopicAdmin(broker, broker_name)
        self.groups = GroupAdmin(broker, broker_name, self.consumers)

    def register_handlers(self, handlers: Any) -> None:
        """Bind every admin code in a ``HandlerTable``."""
        self.topics.register_handlers(handlers)
        self.groups.register_handlers(handlers)
        register_runtime_info(handlers, self.broker, self.stats)
        handlers.register(RequestCode.UPDATE_BROKER_CONFIG, refuse_config_write)

    @classmethod
    def attach(cls, data_plane: BrokerRemotingServer, broker_name: str) -> BrokerAdmin:
        """The admin of ``data_plane``'s broker, served on its server (before it starts); its
        runtime counters are the data plane's ``stats`` (create the data plane with
        ``stats=RuntimeStats(clock)`` for them to count)."""
        admin = cls(data_plane.broker, broker_name, registry=data_plane.registry,
                    stats=data_plane.stats)
        admin.register_handlers(data_plane.server.handlers)
        return admin


__all__ = ["AdvertisedTopics", "BrokerAdmin", "Connection", "ConsumerBook",
           "GroupAdmin", "GroupView", "RuntimeStats", "TopicAdmin", "advertised_topics",
           "data_version", "runtime_table"]
