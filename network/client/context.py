"""``ClientContext``: what every part of the remoting client shares.

The facade (``remote_broker.RemotingBroker``) builds one and hands it to its parts — sending,
admin operations, the consumer side (``consuming``) — so each part reaches brokers the same way:
connections (one per address, ACL-signed when credentials are set), routes and the global queue
numbering, the namespace, the clock, and the default timeout. ``broker_call`` turns a broker's
unreachability into a route refresh (``broker_errors`` turns response codes into the store's
exception classes, so the framework sees the errors it sees embedded).

Thread safety: immutable after construction; its parts are thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

from postbox.storage_engine.clock import Clock
from postbox.storage_engine.errors import BrokerUnavailableError
from postbox.storage_engine.formats import MessageView

from ..protocol.wire import RemotingCommand
from .connection import Connections
from .naming import Namespace
from .records import decode_records
from .routes import RouteTable

DEFAULT_TIMEOUT_MS = 3_000


@dataclass(frozen=True)
class ClientContext:
    """Shared state of one remoting client (see the module docstring)."""

    connections: Connections
    routes: RouteTable
    clock: Clock
    timeout_ms: int = DEFAULT_TIMEOUT_MS

    @property
    def namespace(self) -> Namespace:
        """The namespace topics and groups are wrapped in."""
        return self.routes.namespace

    def wire(self, name: str) -> str:
        """The wire name of an application topic or group."""
        return self.routes.namespace.wrap(name)

    def app_name(self, wire_name: str) -> str:
        """The application name of a wire topic or group."""
        return self.routes.namespace.unwrap(wire_name)

    def broker_call(self, address: str, command: RemotingCommand,
                    timeout_ms: int | None = None) -> RemotingCommand:
        """A call to a broker; when it cannot be reached, routes naming it are refetched."""
        try:
            return self.connections.call(address, command, timeout_ms or self.timeout_ms)
        except BrokerUnavailableError:
            self.routes.invalidate_address(address)
            raise

    def decode_records(self, body: bytes, queue_id: int) -> list[MessageView]:
        """Records of one queue in a broker's answer, numbered with the framework's queue id,
        names stripped of the namespace."""
        namespace = self.routes.namespace
        return decode_records(body, queue_id, unwrap=namespace.unwrap if namespace.name else None)

    def masters(self) -> dict[str, str]:
        """Master address of every broker group the name servers know."""
        return self.routes.cluster_info().masters()
