"""``RemotingNode``: the remoting side of ``postbox broker start`` — a name server and a broker
over one embedded ``Broker``, optionally registered with external name servers.

Parts, started in this order and stopped in reverse:

1. the broker (``BrokerRemotingServer``: the data plane, with ``BrokerAdmin`` attached) on
   ``remoting_listen``;
2. the name server (``NameServer`` over a ``RouteTable`` whose local broker is this one, read
   live) on ``namesrv_listen`` — left out when ``namesrv_listen`` is None. Other brokers may
   register with it only from the hosts ``namesrv_registrants`` lists (``*``: any), or, with
   ACL on, signed by an admin: an unauthenticated REGISTER_BROKER could otherwise take over
   routes;
3. the ``NamesrvRegistrar`` when ``namesrv_addresses`` names external name servers (Apache's
   included): the first REGISTER_BROKER round before ``start`` returns (an unreachable name
   server is logged, not fatal), then every 30 s; UNREGISTER_BROKER on stop.

The broker is known as ``identity`` (cluster, broker name, id 0) at its advertised address:
``advertise`` when given, else the address it bound; a wildcard bind (``0.0.0.0``, ``::``)
needs ``advertise``, since clients cannot connect to a wildcard. The same ``access`` (ACL 1.0,
``RemotingAccess``) guards both listeners.

Thread-safety: ``start`` and ``stop`` are called by the owner's thread; the parts serve from
their own threads. The ``Broker`` belongs to the caller and outlives the node.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from postbox.storage_engine.broker import Broker

from .admin import (
    AdvertisedTopics,
    BrokerAdmin,
    RuntimeStats,
    advertised_topics,
    data_version,
)
from .namesrv import BrokerIdentity, NameServer, RegistrationPolicy, RouteTable
from .registration import NamesrvRegistrar
from .server import RemotingServer, ServerLimits
from .server.broker import BrokerRemotingServer, HeartbeatLimits
from .server.handlers import AccessControl

log = logging.getLogger(__name__)

DEFAULT_NAMESRV_LISTEN = "127.0.0.1:9876"
DEFAULT_REMOTING_LISTEN = "127.0.0.1:10911"
DEFAULT_CLUSTER = "DefaultCluster"
DEFAULT_BROKER_NAME = "postbox-broker"
_WILDCARDS = ("0.0.0.0", "::", "")


class NodeError(Exception):
    """A node that cannot start as configured (the message says which option)."""


def split_host_port(text: str, option: str) -> tuple[str, int]:
    """``host:port`` (port 0..65535; IPv6 in brackets) or ``NodeError`` naming ``option``."""
    host, separator, port = text.rpartition(":")
    if not separator or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise NodeError(f"{option} {text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def check_advertisable(options: NodeOptions) -> tuple[str, int]:
    """The remoting (host, port) to bind; ``NodeError`` when an address is malformed, or a
    wildcard bind has no ``advertise`` (clients cannot connect to a wildcard)."""
    host, port = split_host_port(options.remoting_listen, "--remoting-listen")
    if options.advertise is not None:
        split_host_port(options.advertise, "--advertise")
    elif host in _WILDCARDS:
        raise NodeError(f"--remoting-listen {options.remoting_listen} binds every address: "
                        "give --advertise HOST:PORT, the address clients connect to")
    return host, port


@dataclass(frozen=True)
class NodeOptions:
    """Where and as whom the node serves."""

    remoting_listen: str = DEFAULT_REMOTING_LISTEN
    namesrv_listen: str | None = DEFAULT_NAMESRV_LISTEN
    advertise: str | None = None
    cluster: str = DEFAULT_CLUSTER
    broker_name: str = DEFAULT_BROKER_NAME
    namesrv_addresses: list[tuple[str, int]] = field(default_factory=list)
    namesrv_registrants: frozenset[str] = frozenset()
    """Hosts other brokers may register from with this node's name server (``*``: any)."""
    heartbeat_limits: HeartbeatLimits = field(default_factory=HeartbeatLimits)
    limits: ServerLimits = field(default_factory=ServerLimits)
    """Connection, frame and in-flight bounds of both listeners."""


class RemotingNode:
    """Name server, broker and registrations of one process."""

    def __init__(self, broker: Broker, options: NodeOptions,
                 access: AccessControl | None = None) -> None:
        self.options = options
        self._broker = broker
        host, port = check_advertisable(options)
        self._namesrv_bind = (None if options.namesrv_listen is None
                              else split_host_port(options.namesrv_listen, "--namesrv-listen"))
        self.broker_server = BrokerRemotingServer(broker, host, port, access=access,
                                                  limits=options.limits,
                                                  stats=RuntimeStats(broker.store.clock),
                                                  heartbeat_limits=options.heartbeat_limits)
        self.admin = BrokerAdmin.attach(self.broker_server, options.broker_name)
        self.broker_server.transactions.broker_name = options.broker_name
        self.routes = RouteTable(broker.store.clock)
        self.namesrv_server: RemotingServer | None = None
        if self._namesrv_bind is not None:
            self.namesrv_server = RemotingServer(*self._namesrv_bind, access=access,
                                                 limits=options.limits,
                                                 name="remoting-namesrv")
            registrants = RegistrationPolicy.closed(options.namesrv_registrants,
                                                    acl=access is not None)
            NameServer(self.routes, registrants=registrants).register_handlers(
                self.namesrv_server.handlers)
        self.registrar: NamesrvRegistrar | None = None
        self.identity: BrokerIdentity | None = None

    def start(self) -> None:
        """Bind and serve (``OSError`` when an address cannot be bound; nothing left running)."""
        self.broker_server.start()
        try:
            self.identity = self._identity()
            self.routes.set_local(self.identity, AdvertisedTopics(self._broker,
                                                                  self.options.broker_name))
            if self.namesrv_server is not None:
                self.namesrv_server.start()
            if self.options.namesrv_addresses:
                self.registrar = NamesrvRegistrar(
                    self.options.namesrv_addresses, self.identity,
                    lambda: advertised_topics(self._broker, self.options.broker_name),
                    lambda: data_version(self._broker), self._broker.store.clock)
                self.registrar.run_once(self._broker.store.clock.now_ms())  # before "serving"
                self.registrar.start()
        except BaseException:
            self.stop()
            raise

    def _identity(self) -> BrokerIdentity:
        if self.options.advertise is not None:
            host, port = split_host_port(self.options.advertise, "--advertise")
            bound = self.broker_server.server.address
            address = f"{host}:{bound[1] if port == 0 and bound else port}"
        else:
            address = self.broker_server.server.address_text
        return BrokerIdentity(self.options.cluster, self.options.broker_name, 0, address)

    def stop(self) -> None:
        """Unregister, stop the name server, then the broker (idempotent)."""
        if self.registrar is not None:
            self.registrar.stop()
            self.registrar = None
        if self.namesrv_server is not None:
            self.namesrv_server.stop()
        self.broker_server.stop()

    @property
    def broker_address(self) -> str:
        """The address the broker advertises (after ``start``)."""
        return self.identity.address if self.identity else self.options.remoting_listen

    @property
    def namesrv_address(self) -> str | None:
        """``host:port`` the name server bound (after ``start``), or None without one."""
        if self.namesrv_server is None or self.namesrv_server.address is None:
            return None
        return self.namesrv_server.address_text


__all__ = ["DEFAULT_BROKER_NAME", "check_advertisable", "DEFAULT_CLUSTER", "DEFAULT_NAMESRV_LISTEN",
           "DEFAULT_REMOTING_LISTEN", "NodeError", "NodeOptions", "RemotingNode",
           "split_host_port"]
