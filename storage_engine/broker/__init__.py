"""Broker semantics over the store: topics, groups, offsets, send-back, delay, consumers.

Imports the store core; nothing of the network layer (``.importlinter``). The broker, not the
store, owns the config tables in ``config/`` (``ConfigStores``; ``ConfigStores.open(root)`` for
tools that read them with no broker running). The names below are the broker's front door; the
modules inside are internal to the engine.
"""

from .broker import Broker
from .config_beans import SubscriptionGroupConfig, TopicConfig
from .config_file import ConfigFileError
from .config_stores import ConfigStores
from .model import (
    PERM_INHERIT,
    PERM_READ,
    PERM_READ_WRITE,
    PERM_WRITE,
    ConsumeFrom,
    QueueProgress,
    SendBackOutcome,
    SendBackResult,
    SendResult,
)

__all__ = [
    "PERM_INHERIT", "PERM_READ", "PERM_READ_WRITE", "PERM_WRITE", "Broker", "ConfigFileError",
    "ConfigStores", "ConsumeFrom", "QueueProgress", "SendBackOutcome", "SendBackResult",
    "SendResult", "SubscriptionGroupConfig", "TopicConfig",
]
