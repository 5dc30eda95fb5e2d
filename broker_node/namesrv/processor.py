"""``NameServer``: the request handlers of the name server (``reference/rocketmq-remoting.md``
§2.5), over a ``RouteTable`` and a ``KvConfig``.

Served codes:

- 105 GET_ROUTEINFO_BY_TOPIC: ``TopicRouteData``; 17 TOPIC_NOT_EXIST when no broker holds it.
- 106 GET_BROKER_CLUSTER_INFO: ``ClusterInfo``.
- 206 GET_ALL_TOPIC_LIST_FROM_NAMESERVER / 224 GET_TOPICS_BY_CLUSTER: ``TopicList``.
- 103 / 104 REGISTER_BROKER / UNREGISTER_BROKER: other brokers join (body CRC checked) and
  leave; 322 QUERY_DATA_VERSION tells a broker whether its topic table changed since its last
  registration (Apache brokers ask before re-registering) and counts as a sign of life.
- 216 DELETE_TOPIC_IN_NAMESRV: drops the topic from *registered* brokers' tables (the local
  broker's topics are deleted on the broker: DELETE_TOPIC_IN_BROKER).
- 100 / 101 / 102 / 219 PUT / GET / DELETE_KV_CONFIG, GET_KVLIST_BY_NAMESPACE: the in-memory
  ``KvConfig``; 22 QUERY_NOT_FOUND for what is not there.
- 318 UPDATE_NAMESRV_CONFIG: always refused (16): remote configuration writes are not served
  (CVE-2023-33246, CVE-2023-37582).

A route is standard JSON for clients of version ≥ V4_9_4 or asking ``acceptStandardJsonOnly``,
fastjson's unquoted broker ids otherwise (``route_bodies``). An unknown topic gets 17 with the
remark Apache's name server writes, so a Java producer falls back to the auto-creation topic
``TBW102``, which the local broker lists when its ``auto_create_topic`` is on.

Route writes (REGISTER_BROKER, UNREGISTER_BROKER, DELETE_TOPIC_IN_NAMESRV, and
QUERY_DATA_VERSION, which keeps a registration alive) pass the
``RegistrationPolicy`` first: by default anyone may write them (Apache's name server has no
other rule: without ACL, whoever reaches it can register a broker under any name and take its
routes). ``postbox broker start`` serves a closed policy: only the hosts listed by
``--namesrv-registrants`` (``*``: any), or, with ACL on, requests an admin signed. Whatever the
policy, no registration may take the name of the broker of this process
(``RouteTable.set_local``).

Thread-safety: the handlers keep no state of their own; the table and KV store lock.
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass
from typing import Any

from postbox.network.protocol import fastjson
from postbox.network.protocol.codes import VERSION_V4_9_4, RequestCode, ResponseCode
from postbox.network.protocol.wire import RemotingCommand
from postbox.storage_engine.formats.fastjson import FastjsonError

from ..server.errors import RequestRefusedError
from .kv_config import KvConfig, KvConfigFullError
from .route_bodies import (
    BodyError,
    cluster_body,
    dumps,
    kv_table_body,
    parse_register_body,
    route_body,
    topic_list_body,
)
from .route_table import BrokerIdentity, RouteTable, RouteTableError

log = logging.getLogger(__name__)

PUT_KV_CONFIG = 100
GET_KV_CONFIG = 101
DELETE_KV_CONFIG = 102
GET_KVLIST_BY_NAMESPACE = 219
GET_TOPICS_BY_CLUSTER = 224
QUERY_DATA_VERSION = 322
NAME_MAX_CHARS = 255
REMOTE_CONFIG_REFUSAL = (
    "remote configuration changes are not served (CVE-2023-33246 / CVE-2023-37582): edit the "
    "configuration file and restart")


ANY_HOST = "*"
REGISTRANTS_OPTION = "--namesrv-registrants"


@dataclass(frozen=True)
class RegistrationPolicy:
    """Who may write routes: peers whose host is in ``hosts`` (``*``: any), and, when
    ``signed_allowed``, every request that reaches the handler (ACL is on and demanded an
    admin's signature)."""

    hosts: frozenset[str] = frozenset({ANY_HOST})
    signed_allowed: bool = False

    @classmethod
    def closed(cls, hosts: frozenset[str] = frozenset(), *, acl: bool = False
               ) -> RegistrationPolicy:
        """Only ``hosts`` (and admin-signed requests when ``acl``)."""
        return cls(frozenset(hosts), signed_allowed=acl)

    def check(self, request: RemotingCommand, session: object) -> None:
        """Refuse (16 NO_PERMISSION) a route write this policy does not allow."""
        if self.signed_allowed or ANY_HOST in self.hosts:
            return
        peer = str(getattr(session, "peer_address", ""))
        host = peer.rpartition(":")[0].strip("[]") or peer
        if host in self.hosts:
            return
        log.warning("[namesrv] refused request code %d from %s: not a registrant",
                    request.code, peer)
        raise RequestRefusedError(
            ResponseCode.NO_PERMISSION,
            f"{host} may not register or unregister brokers with this name server: list it "
            f"with postbox broker start {REGISTRANTS_OPTION} (or turn ACL on and sign as an "
            "admin)")


class NameServer:
    """Name-server handlers; ``register_handlers(table)`` binds them."""

    def __init__(self, routes: RouteTable, kv: KvConfig | None = None, *,
                 accept_registrations: bool = True,
                 registrants: RegistrationPolicy | None = None) -> None:
        self.routes = routes
        self.kv = kv if kv is not None else KvConfig()
        self._accept_registrations = accept_registrations
        self.registrants = registrants or RegistrationPolicy()

    def register_handlers(self, handlers: Any) -> None:
        """Bind every served code in a ``HandlerTable``: inline (on the IO thread) what reads
        one topic or a few brokers, on the worker pool what lists every topic."""
        for code, handler, inline in (
                (RequestCode.GET_ROUTEINFO_BY_TOPIC, self.route, True),
                (RequestCode.GET_BROKER_CLUSTER_INFO, self.cluster_info, True),
                (RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self.topic_list, False),
                (GET_TOPICS_BY_CLUSTER, self.topics_by_cluster, False),
                (RequestCode.REGISTER_BROKER, self.register_broker, True),
                (RequestCode.UNREGISTER_BROKER, self.unregister_broker, True),
                (QUERY_DATA_VERSION, self.query_data_version, True),
                (RequestCode.DELETE_TOPIC_IN_NAMESRV, self.delete_topic, True),
                (PUT_KV_CONFIG, self.put_kv, True), (GET_KV_CONFIG, self.get_kv, True),
                (DELETE_KV_CONFIG, self.delete_kv, True),
                (GET_KVLIST_BY_NAMESPACE, self.kv_list, True),
                (RequestCode.UPDATE_NAMESRV_CONFIG, refuse_config_write, True)):
            handlers.register(code, handler, inline=inline)

    def route(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """GET_ROUTEINFO_BY_TOPIC."""
        fields = request.fields
        topic = fields.get_str("topic", max_chars=NAME_MAX_CHARS)
        route = self.routes.route(topic)
        if route is None:
            raise RequestRefusedError(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}")
        standard = (request.version >= VERSION_V4_9_4
                    or fields.get_bool("acceptStandardJsonOnly", False))
        return request.response(body=route_body(route, standard_json=standard))

    def cluster_info(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """GET_BROKER_CLUSTER_INFO."""
        return request.response(body=cluster_body(*self.routes.cluster()))

    def topic_list(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER."""
        return request.response(body=topic_list_body(self.routes.topic_names()))

    def topics_by_cluster(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """GET_TOPICS_BY_CLUSTER."""
        cluster = request.fields.get_str("cluster", max_chars=NAME_MAX_CHARS)
        return request.response(body=topic_list_body(self.routes.topics_of_cluster(cluster)))

    def register_broker(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """REGISTER_BROKER: record the broker and its topic table."""
        if not self._accept_registrations:
            raise RequestRefusedError(ResponseCode.NO_PERMISSION,
                                      "this name server does not accept broker registrations")
        self.registrants.check(request, session)
        fields = request.fields
        identity = BrokerIdentity(
            cluster=fields.get_str("clusterName", max_chars=NAME_MAX_CHARS),
            broker_name=fields.get_str("brokerName", max_chars=NAME_MAX_CHARS),
            broker_id=fields.get_int("brokerId", low=0),
            address=fields.get_str("brokerAddr", max_chars=NAME_MAX_CHARS),
            ha_address=fields.get_str("haServerAddr", "", max_chars=NAME_MAX_CHARS),
            zone_name=fields.get_str("__ZONE_NAME", None, max_chars=NAME_MAX_CHARS))
        if fields.get_bool("compressed", False):
            raise RequestRefusedError(ResponseCode.SYSTEM_ERROR,
                                      "compressed registrations are not read: set the "
                                      "broker's compressedRegister=false")
        expected_crc = fields.get_int("bodyCrc32", 0)
        if expected_crc and expected_crc != body_crc32(request.body):
            raise RequestRefusedError(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        try:
            topics, version = parse_register_body(request.body, identity.broker_name)
            self.routes.register(identity, topics, data_version=version,
                                 timeout_ms=fields.get_int("heartbeatTimeoutMillis", 120_000,
                                                           low=1_000, high=3_600_000))
        except (BodyError, RouteTableError) as error:
            raise RequestRefusedError(ResponseCode.SYSTEM_ERROR, str(error)) from None
        master = self.routes.master_address(identity.broker_name) or ""
        return request.response(fields={"haServerAddr": identity.ha_address,
                                        "masterAddr": master})

    def unregister_broker(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """UNREGISTER_BROKER."""
        self.registrants.check(request, session)
        fields = request.fields
        self.routes.unregister(fields.get_str("brokerName", max_chars=NAME_MAX_CHARS),
                               fields.get_int("brokerId", low=0),
                               fields.get_str("brokerAddr", None, max_chars=NAME_MAX_CHARS))
        return request.response()

    def query_data_version(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """QUERY_DATA_VERSION: header ``changed``, body the version this name server holds
        (a registrant's only: it keeps a registration alive)."""
        self.registrants.check(request, session)
        fields = request.fields
        name = fields.get_str("brokerName", max_chars=NAME_MAX_CHARS)
        broker_id = fields.get_int("brokerId", low=0)
        held = self.routes.data_version(name, broker_id)
        try:
            sent = fastjson.loads(request.body) if request.body else None
        except (FastjsonError, UnicodeDecodeError) as error:
            raise RequestRefusedError(ResponseCode.SYSTEM_ERROR,
                                      f"DataVersion does not parse: {error}") from None
        changed = held is None or not isinstance(sent, dict) or _version_key(sent) != \
            _version_key(held)
        self.routes.touch(name, broker_id)
        return request.response(fields={"changed": changed},
                                body=b"" if held is None else dumps(held, standard_json=True))

    def delete_topic(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """DELETE_TOPIC_IN_NAMESRV."""
        self.registrants.check(request, session)
        self.routes.forget_topic(request.fields.get_str("topic", max_chars=NAME_MAX_CHARS))
        return request.response()

    def put_kv(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """PUT_KV_CONFIG."""
        fields = request.fields
        try:
            self.kv.put(fields.get_str("namespace"), fields.get_str("key"),
                        fields.get_str("value"))
        except KvConfigFullError as error:
            raise RequestRefusedError(ResponseCode.SYSTEM_ERROR, str(error)) from None
        return request.response()

    def get_kv(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """GET_KV_CONFIG: header ``value``, or 22 QUERY_NOT_FOUND."""
        namespace, key = request.fields.get_str("namespace"), request.fields.get_str("key")
        value = self.kv.get(namespace, key)
        if value is None:
            raise RequestRefusedError(ResponseCode.QUERY_NOT_FOUND,
                                      f"No config item, Namespace: {namespace} Key: {key}")
        return request.response(fields={"value": value})

    def delete_kv(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """DELETE_KV_CONFIG."""
        self.kv.delete(request.fields.get_str("namespace"), request.fields.get_str("key"))
        return request.response()

    def kv_list(self, request: RemotingCommand, session: object) -> RemotingCommand:
        """GET_KVLIST_BY_NAMESPACE: a ``KVTable``, or 22 QUERY_NOT_FOUND."""
        namespace = request.fields.get_str("namespace")
        table = self.kv.namespace(namespace)
        if not table:
            raise RequestRefusedError(ResponseCode.QUERY_NOT_FOUND,
                                      f"No config item, Namespace: {namespace}")
        return request.response(body=kv_table_body(table))


def refuse_config_write(request: RemotingCommand, session: object) -> RemotingCommand:
    """UPDATE_BROKER_CONFIG / UPDATE_NAMESRV_CONFIG: never served."""
    log.warning("[remoting] refused remote configuration write (request code %d)",
                request.code)
    raise RequestRefusedError(ResponseCode.NO_PERMISSION, REMOTE_CONFIG_REFUSAL)


def _version_key(version: Any) -> tuple[object, ...]:
    return tuple(version.get(name, 0) for name in ("counter", "stateVersion", "timestamp"))


def body_crc32(body: bytes) -> int:
    """RocketMQ's body checksum: CRC32 masked to 31 bits."""
    return zlib.crc32(body) & 0x7FFFFFFF


__all__ = ["REGISTRANTS_OPTION", "REMOTE_CONFIG_REFUSAL", "NameServer", "RegistrationPolicy",
           "body_crc32", "refuse_config_write"]
