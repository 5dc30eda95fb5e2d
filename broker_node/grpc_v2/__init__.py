"""Postbox's network broker: a gRPC server over an embedded ``Broker``.

It speaks Apache RocketMQ 5's ``apache.rocketmq.v2.MessagingService`` (the generated code of
``rocketmq-python-client``), so official RocketMQ 5 clients can produce and consume. How to run
it, what is implemented and how pop consumption works: ``docs/remoting.md``. (The framework's
remote transport is RocketMQ's classic remoting protocol, ``rocketmq://``, not this service.)

Public surface (imported lazily, so importing the package loads no protocol module)::

    from postbox.broker_node.grpc_v2 import (BrokerServer, AccessControl, Credentials,
                                             signed_metadata)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what __getattr__ returns, for the type checker
    from .auth import AccessControl as AccessControl
    from .auth import AccessDeniedError as AccessDeniedError
    from .auth import Credentials as Credentials
    from .auth import signed_metadata as signed_metadata
    from .server import DEFAULT_LISTEN as DEFAULT_LISTEN
    from .server import BrokerServer as BrokerServer
    from .server import ServerError as ServerError
    from .server import parse_listen as parse_listen

_EXPORTS = {
    "AccessControl": "auth", "AccessDeniedError": "auth", "Credentials": "auth",
    "signed_metadata": "auth",
    "DEFAULT_LISTEN": "server", "BrokerServer": "server", "ServerError": "server",
    "parse_listen": "server",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
