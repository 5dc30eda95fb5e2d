"""``BrokerNode``: everything ``postbox broker start`` serves over one embedded ``Broker``.

Parts:

- ``remoting``: the ``RemotingNode`` (the remoting broker with its admin handlers, the name
  server, the registration with external name servers), for RocketMQ 4.x clients, ``mqadmin``
  and the framework's ``rocketmq://`` transport;
- ``grpc``: the RocketMQ 5 gRPC ``BrokerServer`` (``grpc_v2``);
- one ACL file (``acl_file``) guarding both: ``RemotingAccess`` on the remoting listeners,
  ``grpc_v2.AccessControl`` on the gRPC one.

The remoting listeners' connection caps are fitted to the open-file limit left after the
store's budget (``descriptor_budget``), so a flood of sockets cannot starve the store of
descriptors.

``check`` runs the checks that need no store (listen and advertised addresses, the ACL file)
before the caller opens the store, which takes the advertised address as its store host.
``start`` starts the gRPC server, then the remoting node; ``stop`` stops them in reverse. The
``Broker`` belongs to the caller and outlives the node. Imports grpc: install the ``server``
extra.

Thread-safety: ``start`` and ``stop`` are called by the owner's thread; the parts serve from
their own threads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from postbox.storage_engine.broker import Broker

from .access import RemotingAccess
from .descriptor_budget import fit_connection_limits
from .grpc_v2 import AccessControl, BrokerServer, parse_listen
from .remoting_node import NodeOptions, RemotingNode, check_advertisable


@dataclass(frozen=True)
class BrokerNodeOptions:
    """Where and how a broker node serves (``remoting``: the remoting node's options)."""

    remoting: NodeOptions
    grpc_listen: str
    acl: Path | None = None
    workers: int = 128
    max_request_bytes: int | None = None


class BrokerNode:
    """The remoting node and the gRPC server over one broker (see the module docstring).

    ``grpc_access``: the gRPC access control ``check`` loaded (None: none, or load it here).
    Raises ``NodeError`` or ``grpc_v2.ServerError`` for options it cannot serve with.
    """

    def __init__(self, broker: Broker, options: BrokerNodeOptions, *,
                 grpc_access: AccessControl | None = None) -> None:
        remoting = options.remoting  # connection caps within the open-file limit
        listeners = 1 if remoting.namesrv_listen is None else 2
        remoting = replace(remoting, limits=fit_connection_limits(broker, remoting.limits,
                                                                  listeners))
        self.options = options = replace(options, remoting=remoting)
        acl = options.acl
        if grpc_access is None and acl is not None:
            grpc_access = AccessControl.load(acl)
        remoting_access = None if acl is None else RemotingAccess.load(
            acl, lambda topic: broker.topic_config(topic) is not None)
        self.remoting = RemotingNode(broker, options.remoting, access=remoting_access)
        self.grpc = BrokerServer(broker, options.grpc_listen, access=grpc_access,
                                 workers=options.workers,
                                 max_request_bytes=options.max_request_bytes)

    @staticmethod
    def check(options: BrokerNodeOptions) -> AccessControl | None:
        """The checks that need no store: the gRPC listen address (``ServerError``), the
        advertised remoting address (``NodeError``); then the ACL file's gRPC access control
        (loaded, or None without ``acl``)."""
        parse_listen(options.grpc_listen)
        check_advertisable(options.remoting)
        return None if options.acl is None else AccessControl.load(options.acl)

    def start(self) -> None:
        """Start the gRPC server (``ServerError``), then the remoting node (``OSError``)."""
        self.grpc.start()
        self.remoting.start()

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop the remoting node, then the gRPC server (``grace_s`` for its calls)."""
        try:
            self.remoting.stop()
        finally:
            self.grpc.stop(grace_s)


__all__ = ["BrokerNode", "BrokerNodeOptions"]
