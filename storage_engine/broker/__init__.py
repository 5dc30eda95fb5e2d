"""Broker semantics over the store: topics, groups, offsets, send-back, delay, consumers.

Imports the store core; nothing of the network layer (``.importlinter``). The broker, not the
store, owns the config tables in ``config/`` (``ConfigStores``; ``ConfigStores.open(root)`` for
tools that read them with no broker running). The values its API takes and returns are the
broker contract's (``storage_engine.contract``); ``Broker`` implements its ``BrokerClient``.
The names below are the broker's front door; the modules inside are internal to the engine.
"""

from .broker import Broker
from .config_file import ConfigFileError
from .config_stores import ConfigStores

__all__ = ["Broker", "ConfigFileError", "ConfigStores"]
