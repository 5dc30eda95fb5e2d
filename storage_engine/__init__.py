"""Postbox's embedded message store, byte-compatible with Apache RocketMQ's file store.

Public surface (the store and the broker)::

    from postbox.storage_engine import MessageStore, StoreConfig, Message, FlushMode, verify_store
    from postbox.storage_engine import Broker

exported here with what using them takes: the config groups of ``StoreConfig``, the values the
store and the broker return, ``repair_store`` and the store checks tools make, the clocks, the
topic-name rules, and the errors a caller handles differently (every one of them derives from
``StorageError``; the full list is ``storage_engine.errors``). ``storage_engine.formats`` is
public too, for tools that decode store files (the Spark jobs, the CLI).

The rooms (docs/architecture.md, checked by ``.importlinter``): ``store`` (the core),
``broker`` (broker semantics and its config tables), ``ha`` (replication), ``remoting`` (the
network server and client), ``formats`` (byte layouts, pure). ``store`` and ``broker`` export
their own front doors; every other module is internal to the engine.
"""

from .broker import (
    Broker,
    ConsumeFrom,
    QueueProgress,
    SendBackOutcome,
    SendBackResult,
    SendResult,
    SubscriptionGroupConfig,
    TopicConfig,
)
from .broker_conf import parse_properties
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
from .contract.topics import dead_letter_topic, retry_topic
from .errors import (
    BrokerUnavailableError,
    ConfigError,
    CorruptionError,
    DiskFullError,
    InvalidMessageError,
    MessageNotFoundError,
    NoPermissionError,
    NotAStoreError,
    NotMasterError,
    StorageError,
    StorageIOError,
    StoreClosedError,
    StoreLockedError,
    StoreStateError,
)
from .formats import MessageView
from .store import (
    GetResult,
    GetStatus,
    LatencySnapshot,
    LatencyTally,
    Message,
    MessageStore,
    PutResult,
    PutStatus,
    infer_config,
    repair_store,
    require_store,
    verify_store,
)
from .store.topics import validate_topic

__all__ = [
    # the store
    "FlushMode", "GetResult", "GetStatus", "Message", "MessageStore", "MessageView", "PutResult",
    "PutStatus", "StoreConfig", "verify_store",
    # the config groups of StoreConfig
    "BrokerConfig", "BrokerRole", "CommitLogConfig", "ConsumeQueueConfig", "DelayConfig",
    "FlushConfig", "HAConfig", "KeyIndexConfig", "RetentionConfig",
    # the broker and the values of its API
    "Broker", "ConsumeFrom", "QueueProgress", "SendBackOutcome", "SendBackResult", "SendResult",
    "SubscriptionGroupConfig", "TopicConfig",
    # tools, clocks, topic names, the latency tally monitoring reads
    "LatencySnapshot", "LatencyTally", "infer_config", "parse_properties", "repair_store",
    "require_store",
    "Clock", "FakeClock", "SystemClock",
    "dead_letter_topic", "retry_topic", "validate_topic",
    # errors a caller handles differently
    "BrokerUnavailableError", "ConfigError", "CorruptionError", "DiskFullError",
    "InvalidMessageError", "MessageNotFoundError", "NoPermissionError", "NotAStoreError",
    "NotMasterError", "StorageError", "StorageIOError", "StoreClosedError", "StoreLockedError",
    "StoreStateError",
]
