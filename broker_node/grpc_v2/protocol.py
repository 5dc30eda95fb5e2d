"""The generated ``apache.rocketmq.v2`` modules shipped in ``rocketmq-python-client``.

``definition`` (messages, enums such as ``Code``), ``service`` (requests and responses) and
``service_grpc`` (``MessagingServiceServicer``, ``add_MessagingServiceServicer_to_server``) are
the package's own generated code; nothing is re-typed here.

Why a loader: importing ``rocketmq.grpc_protocol`` runs ``rocketmq/__init__.py``, which imports
the whole client and calls ``logging.config.dictConfig`` (closing every logging handler the
process already configured) and creates ``~/logs/rocketmq_python/``. A server has no use for
that, so when the client is not imported yet the three modules are imported under temporary
parent packages that have the right ``__path__`` but run no ``__init__``; the placeholders are
removed again, so a later ``import rocketmq`` (a test or bench process that also runs the
client) initialises the real packages and reuses these same modules from ``sys.modules``: the
protobuf descriptors are registered once. When the client is already imported, its modules are
used as they are. Thread-safety: runs once, at import time (under the import lock).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import TYPE_CHECKING

_PACKAGE = "rocketmq"
_PROTOCOL_PACKAGE = "rocketmq.grpc_protocol"
_MODULES = ("definition_pb2", "service_pb2", "service_pb2_grpc")


def _load_generated() -> tuple[types.ModuleType, ...]:
    """Import the generated modules, without running the client's package ``__init__``."""
    if _PACKAGE in sys.modules:
        return tuple(importlib.import_module(f"{_PROTOCOL_PACKAGE}.{name}") for name in _MODULES)
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the RocketMQ gRPC protocol needs the rocketmq-python-client package "
                          "(pip install 'postbox[server]')")
    root = list(spec.submodule_search_locations)
    placeholders = {
        _PACKAGE: root,
        _PROTOCOL_PACKAGE: [f"{location}/grpc_protocol" for location in root],
    }
    for name, path in placeholders.items():
        module = types.ModuleType(name)
        module.__path__ = path
        sys.modules[name] = module
    try:
        return tuple(importlib.import_module(f"{_PROTOCOL_PACKAGE}.{name}") for name in _MODULES)
    finally:
        for name in placeholders:
            sys.modules.pop(name, None)


if TYPE_CHECKING:  # the generated modules are untyped: their names are Any to the checker
    from rocketmq.grpc_protocol import definition_pb2 as definition
    from rocketmq.grpc_protocol import service_pb2 as service
    from rocketmq.grpc_protocol import service_pb2_grpc as service_grpc
else:
    definition, service, service_grpc = _load_generated()
Code = definition.Code

__all__ = ["Code", "definition", "service", "service_grpc"]
