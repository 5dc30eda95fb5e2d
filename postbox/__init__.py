"""Postbox: reliable messaging for Python services, under one import namespace.

The repository's packages live under ``postbox``: ``postbox.storage_engine`` (the message store
and its broker, with the broker contract), ``postbox.network`` (RocketMQ's remoting protocol
and its client), ``postbox.broker_node`` (the servers ``postbox broker start`` runs: remoting,
name server, admin, RocketMQ 5 gRPC), ``postbox.framework`` (the producer/consumer SDK),
``postbox.outbox``, ``postbox.idempotency``, ``postbox.migrations``, ``postbox.spark_reconcile``,
and ``postbox.cli`` (the ``postbox`` command). The everyday names are here too::

    from postbox import App, Outbox, RetryLater

They load on first use, so ``import postbox`` (and the command line) imports nothing else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from postbox.framework import (
        App,
        BatchMessage,
        ConsumedMessage,
        ConsumerOptions,
        DeadLetter,
        RetryLater,
        SkipMessage,
    )
    from postbox.idempotency import IdempotencyMiddleware
    from postbox.outbox import Outbox, OutboxWorker
    from postbox.storage_engine import MessageStore, StoreConfig

# everyday name -> the subpackage that defines it
EVERYDAY_NAMES = {
    "App": "framework", "BatchMessage": "framework", "ConsumedMessage": "framework",
    "ConsumerOptions": "framework", "DeadLetter": "framework", "RetryLater": "framework",
    "SkipMessage": "framework",
    "IdempotencyMiddleware": "idempotency",
    "Outbox": "outbox", "OutboxWorker": "outbox",
    "MessageStore": "storage_engine", "StoreConfig": "storage_engine",
}

__all__ = [
    "App", "BatchMessage", "ConsumedMessage", "ConsumerOptions", "DeadLetter", "RetryLater",
    "SkipMessage", "IdempotencyMiddleware", "Outbox", "OutboxWorker", "MessageStore",
    "StoreConfig",
]


def __getattr__(name: str) -> Any:
    package = EVERYDAY_NAMES.get(name)
    if package is None:
        raise AttributeError(f"module 'postbox' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{package}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *EVERYDAY_NAMES})
