"""Postbox's embedded message store, byte-compatible with Apache RocketMQ's file store.

Public surface (DESIGN §3.3)::

    from storage_engine import MessageStore, StoreConfig, Message, FlushMode, verify_store

Everything else in the package is internal to the engine; ``storage_engine.formats`` is also
public, for tools that decode store files (the Spark jobs, the CLI).
"""

from .broker.broker import Broker
from .broker.config_beans import SubscriptionGroupConfig, TopicConfig
from .broker.model import (
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
from .clock import Clock, FakeClock, SystemClock
from .config import (
    BrokerConfig,
    BrokerRole,
    CommitLogConfig,
    ConsumeQueueConfig,
    DelayConfig,
    FlushConfig,
    FlushMode,
    HAConfig,
    KeyIndexConfig,
    RetentionConfig,
    StoreConfig,
)
from .errors import (
    BrokerUnavailableError,
    ConfigError,
    ConfigMismatchError,
    CorruptionError,
    DiskFullError,
    GroupNotFoundError,
    InvalidMessageError,
    InvalidMessageIdError,
    InvalidQueueError,
    InvalidTopicError,
    LimitExceededError,
    MessageNotFoundError,
    MessageTooLargeError,
    MidLogCorruptionError,
    NoPermissionError,
    NotAStoreError,
    NotMasterError,
    PropertiesTooLargeError,
    RepairError,
    ReplicationError,
    StorageError,
    StorageIOError,
    StoreClosedError,
    StoreLockedError,
    StoreNotWritableError,
    StoreStateError,
    TableFullError,
    TopicNotFoundError,
)
from .formats import HostAddress, MessageView
from .store.message import GetResult, GetStatus, Message, PutResult, PutStatus
from .store.message_store import MessageStore
from .store.repair import RepairReport, repair_store
from .store.store_layout import infer_config, is_store, require_store
from .store.topics import dead_letter_topic, retry_topic, validate_topic
from .store.verify import verify_store

__all__ = [
    "PERM_INHERIT", "PERM_READ", "PERM_READ_WRITE", "PERM_WRITE", "Broker", "BrokerConfig",
    "BrokerUnavailableError",
    "ConsumeFrom", "GroupNotFoundError", "NoPermissionError", "QueueProgress",
    "SendBackOutcome", "SendBackResult", "SendResult", "SubscriptionGroupConfig",
    "TopicConfig", "TopicNotFoundError",
    "BrokerRole", "Clock", "CommitLogConfig", "ConfigError", "ConfigMismatchError",
    "ConsumeQueueConfig", "CorruptionError", "DelayConfig", "DiskFullError", "FakeClock",
    "FlushConfig", "HAConfig", "NotAStoreError", "NotMasterError", "ReplicationError",
    "FlushMode", "GetResult", "GetStatus", "HostAddress", "InvalidMessageError",
    "InvalidMessageIdError", "InvalidQueueError", "InvalidTopicError", "KeyIndexConfig",
    "LimitExceededError", "Message", "MessageNotFoundError", "MessageStore",
    "MessageTooLargeError", "MessageView", "PropertiesTooLargeError", "PutResult", "PutStatus",
    "RetentionConfig", "StorageError", "StorageIOError", "StoreClosedError", "StoreConfig",
    "StoreLockedError", "StoreNotWritableError", "StoreStateError", "SystemClock",
    "TableFullError",
    "dead_letter_topic", "infer_config", "is_store", "require_store", "retry_topic",
    "validate_topic", "verify_store",
    "MidLogCorruptionError", "RepairError", "RepairReport", "repair_store",
]
