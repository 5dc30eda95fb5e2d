"""The remoting server: ``RemotingServer`` (TCP, one IO thread + a worker pool), ``Session``
(one connection), ``HandlerTable`` and the ``AccessControl`` hook, and the broker's data plane
(``broker_handlers.register_broker_handlers``) over one embedded ``storage_engine.Broker``.

See ``server`` for the threading model.
"""

from .errors import (
    AccessDeniedError,
    CallTimeoutError,
    RemotingServerError,
    RequestRefusedError,
    ServerLimitError,
    SessionClosedError,
)
from .handlers import AccessControl, AllowAll, Handler, HandlerTable, dispatch, error_response
from .limits import ServerLimits
from .server import RemotingServer
from .session import Session

__all__ = [
    "AccessControl", "AccessDeniedError", "AllowAll", "CallTimeoutError", "Handler",
    "HandlerTable", "RemotingServer", "RemotingServerError", "RequestRefusedError",
    "ServerLimitError", "ServerLimits", "Session", "SessionClosedError", "dispatch",
    "error_response",
]
