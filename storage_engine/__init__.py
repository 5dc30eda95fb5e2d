"""Postbox's embedded message store, byte-compatible with Apache RocketMQ's file store.

Public surface (DESIGN §3.3)::

    from storage_engine import MessageStore, StoreConfig, Message, FlushMode, verify_store

Everything else in the package is internal to the engine; ``storage_engine.formats`` is also
public, for tools that decode store files (the Spark jobs, the CLI).
"""

from .clock import Clock, FakeClock, SystemClock
from .config import (
    BrokerRole,
    CommitLogConfig,
    ConsumeQueueConfig,
    DelayConfig,
    FlushConfig,
    FlushMode,
    KeyIndexConfig,
    RetentionConfig,
    StoreConfig,
)
from .errors import (
    ConfigError,
    ConfigMismatchError,
    CorruptionError,
    DiskFullError,
    InvalidMessageError,
    InvalidMessageIdError,
    InvalidQueueError,
    InvalidTopicError,
    LimitExceededError,
    MessageNotFoundError,
    MessageTooLargeError,
    PropertiesTooLargeError,
    StorageError,
    StorageIOError,
    StoreClosedError,
    StoreLockedError,
    StoreNotWritableError,
    StoreStateError,
)
from .formats import HostAddress, MessageView
from .message import GetResult, GetStatus, Message, PutResult, PutStatus
from .store import MessageStore
from .store_layout import infer_config
from .verify import verify_store

__all__ = [
    "BrokerRole", "Clock", "CommitLogConfig", "ConfigError", "ConfigMismatchError",
    "ConsumeQueueConfig", "CorruptionError", "DelayConfig", "DiskFullError", "FakeClock",
    "FlushConfig",
    "FlushMode", "GetResult", "GetStatus", "HostAddress", "InvalidMessageError",
    "InvalidMessageIdError", "InvalidQueueError", "InvalidTopicError", "KeyIndexConfig",
    "LimitExceededError", "Message", "MessageNotFoundError", "MessageStore",
    "MessageTooLargeError", "MessageView", "PropertiesTooLargeError", "PutResult", "PutStatus",
    "RetentionConfig", "StorageError", "StorageIOError", "StoreClosedError", "StoreConfig",
    "StoreLockedError", "StoreNotWritableError", "StoreStateError", "SystemClock",
    "infer_config", "verify_store",
]
