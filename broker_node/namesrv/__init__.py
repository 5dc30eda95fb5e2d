"""The name server of ``postbox broker start`` (``--namesrv-listen``, default 127.0.0.1:9876).

- ``route_table``: ``RouteTable`` (the local broker, read live, and brokers that registered),
  ``BrokerIdentity``, ``QueueData``.
- ``route_bodies``: routes, cluster info, topic lists and registrations in the wire's JSON.
- ``kv_config``: the namespaced key/value table (order-topic configuration).
- ``processor``: ``NameServer``, the request handlers.
"""

from .kv_config import ORDER_TOPIC_NAMESPACE, KvConfig
from .processor import NameServer, RegistrationPolicy, body_crc32
from .route_table import BrokerIdentity, QueueData, RouteTable

__all__ = ["ORDER_TOPIC_NAMESPACE", "BrokerIdentity", "KvConfig", "NameServer", "QueueData",
           "RegistrationPolicy", "RouteTable", "body_crc32"]
