"""``ClientContext``: what every part of the remoting client shares.

The facade (``remote_broker.RemotingBroker``) builds one and hands it to its parts — sending,
admin operations, the consumer side (``consuming``) — so each part reaches brokers the same way:
connections (one per address, ACL-signed when credentials are set), routes and the global queue
numbering, the namespace, the clock, and the default timeout. ``broker_call`` turns a broker's
unreachability into a route refresh; ``check`` turns a response code into the store's exception
classes, so the framework sees the errors it sees embedded.

Thread safety: immutable after construction; its parts are thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from storage_engine.clock import Clock
from storage_engine.errors import (
    BrokerUnavailableError,
    GroupNotFoundError,
    InvalidMessageError,
    NoPermissionError,
    TopicNotFoundError,
)
from storage_engine.formats import MessageView

from ..codes import ResponseCode
from ..wire import RemotingCommand
from .connection import Connections
from .errors import RemotingResponseError
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

    def decode_records(self, body: bytes) -> list[MessageView]:
        """Records of a broker's answer, names stripped of the namespace."""
        return decode_records(body, self.routes.namespace)

    def masters(self) -> dict[str, str]:
        """Master address of every broker group the name servers know."""
        return self.routes.cluster_info().masters()


def check(answer: RemotingCommand, what: str, *, address: str | None = None,
          topic: str | None = None, ok: Iterable[int] = (ResponseCode.SUCCESS,)) -> None:
    """Raise the store's exception for an unexpected response code (none when it is in ``ok``).

    TOPIC_NOT_EXIST → ``TopicNotFoundError``, SUBSCRIPTION_GROUP_NOT_EXIST →
    ``GroupNotFoundError``, NO_PERMISSION → ``NoPermissionError``, MESSAGE_ILLEGAL and
    INVALID_PARAMETER → ``InvalidMessageError``, SYSTEM_BUSY/SERVICE_NOT_AVAILABLE/GO_AWAY →
    ``BrokerUnavailableError``; anything else → ``RemotingResponseError``.
    """
    code = answer.code
    if code in ok:
        return
    name = ResponseCode(code).name if code in _KNOWN else f"code {code}"
    detail = f"{what}: {name}" + (f" ({answer.remark})" if answer.remark else "")
    if address:
        detail += f" (broker {address})"
    if code == ResponseCode.TOPIC_NOT_EXIST:
        raise TopicNotFoundError(detail, topic=topic)
    if code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
        raise GroupNotFoundError(detail, topic=topic)
    if code == ResponseCode.NO_PERMISSION:
        raise NoPermissionError(detail, topic=topic)
    if code in (ResponseCode.MESSAGE_ILLEGAL, ResponseCode.INVALID_PARAMETER):
        raise InvalidMessageError(detail, topic=topic)
    if code in (ResponseCode.SYSTEM_BUSY, ResponseCode.SERVICE_NOT_AVAILABLE,
                ResponseCode.GO_AWAY):
        raise BrokerUnavailableError(detail, address=address)
    raise RemotingResponseError(what, code=code, remark=answer.remark, address=address)


_KNOWN = frozenset(int(code) for code in ResponseCode)
