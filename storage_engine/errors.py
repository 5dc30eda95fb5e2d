"""Exception tree of the storage engine.

One root, ``StorageError``; every name ends in ``Error``; context (topic, queue, offset, position,
path) is attached as attributes and errors are chained with ``from``. Normal outcomes (no message
yet, offset too small) are return values, never exceptions. A limit error names the setting to
change.
"""

from __future__ import annotations

from typing import Any


class StorageError(Exception):
    """Root of every error raised by ``storage_engine``."""


class ConfigError(StorageError, ValueError):
    """A configuration value is invalid; the message names the field."""


class ConfigMismatchError(ConfigError):
    """Files on disk do not match the configuration (e.g. a segment of another size)."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class StoreStateError(StorageError):
    """An operation is not allowed in the store's current lifecycle state."""


class StoreClosedError(StoreStateError):
    """The store has been closed."""


class StoreLockedError(StoreStateError):
    """Another process (or another open store in this process) holds the store's lock file."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class NotAStoreError(StoreStateError):
    """A directory given as a store holds no store (no ``commitlog/`` and no ``checkpoint``):
    tools that only inspect a store refuse it instead of creating one there."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class BrokerUnavailableError(StoreStateError):
    """A remote broker could not be reached or did not answer in time (connection refused,
    deadline exceeded, server shutting down). Nothing is known about the call's effect on the
    broker: a send may or may not have been stored."""

    def __init__(self, message: str, *, address: str | None = None) -> None:
        super().__init__(message)
        self.address = address


class StoreNotWritableError(StoreStateError):
    """The store refuses writes (fail-stop after an I/O error, or disk full)."""


class NotMasterError(StoreStateError):
    """A producer write reached a store whose role is SLAVE: slaves only copy the master's
    log (they serve reads). Send to the master, or promote this store (docs/replication.md)."""


class ReplicationError(StorageError):
    """The replication protocol broke (a frame at a position the slave's log does not end at,
    an impossible frame size). The connection is closed and the slave reconnects."""

    def __init__(self, message: str, *, log_position: int | None = None) -> None:
        super().__init__(message)
        self.log_position = log_position


class InvalidMessageError(StorageError, ValueError):
    """A message, topic name, queue id or message id is malformed. Nothing was written."""

    def __init__(self, message: str, *, topic: str | None = None) -> None:
        super().__init__(message)
        self.topic = topic


class InvalidTopicError(InvalidMessageError):
    """A topic name is not allowed (it becomes a directory name)."""


class InvalidQueueError(InvalidMessageError):
    """A queue id is negative or outside the store's configured queue range."""


class InvalidMessageIdError(InvalidMessageError):
    """A message id string cannot be decoded."""


class LimitExceededError(InvalidMessageError):
    """A size limit was exceeded; the message names the setting to raise."""

    def __init__(self, message: str, *, setting: str, topic: str | None = None) -> None:
        super().__init__(message, topic=topic)
        self.setting = setting


class TableFullError(LimitExceededError):
    """The broker holds as many topics (``broker.topic_count_max``) or subscription groups
    (``broker.subscription_group_count_max``) as configured; ``setting`` names which. Nothing
    was created."""


class MessageTooLargeError(LimitExceededError):
    """A message body is larger than ``max_message_size_bytes``."""


class PropertiesTooLargeError(LimitExceededError):
    """Encoded properties exceed the 32 767-byte field limit of the record format."""


class CorruptionError(StorageError):
    """Bytes on disk do not decode (bad magic, CRC mismatch, impossible length)."""

    def __init__(self, message: str, *, log_position: int | None = None,
                 path: str | None = None) -> None:
        super().__init__(message)
        self.log_position = log_position
        self.path = path


class MidLogCorruptionError(CorruptionError):
    """A damaged record in the middle of the commit log, with valid records after it.

    Raised by ``MessageStore.open``; nothing was deleted or changed. ``damages`` lists every
    damaged span found (``damage.Damage``: segment, position, end, reason) and
    ``valid_records_after`` how many valid records follow the first one. ``postbox store repair
    --store DIR`` sets the damaged bytes aside and keeps every valid record where it is.
    """

    def __init__(self, message: str, *, log_position: int, path: str, damages: list[Any],
                 valid_records_after: int) -> None:
        super().__init__(message, log_position=log_position, path=path)
        self.damages = damages
        self.valid_records_after = valid_records_after


class RepairError(StorageError):
    """``repair_store`` cannot set a damaged span aside; nothing of that span was changed."""


class StorageIOError(StorageError):
    """An operating-system error on a durability path. The store becomes fail-stop."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


def invariant(condition: bool, message: str) -> None:
    """Assert a durability invariant; unlike ``assert`` it survives ``python -O``."""
    if not condition:
        raise AssertionError(message)


class MessageNotFoundError(StorageError, LookupError):
    """No message at the requested position or id (outside the log, or another store's id)."""

    def __init__(self, message: str, *, log_position: int | None = None) -> None:
        super().__init__(message)
        self.log_position = log_position


class DiskFullError(StoreNotWritableError):
    """The disk is (nearly) full: usage reached ``retention.disk_space_warning_level_ratio``, or
    the file system had no room for a file. Writes are refused until space is freed (reads keep
    working); nothing stored is lost. ``setting`` names the configuration that governs it."""

    def __init__(self, message: str, *, setting: str = "retention.disk_space_warning_level_ratio",
                 path: str | None = None, used_ratio: float | None = None) -> None:
        super().__init__(message)
        self.setting = setting
        self.path = path
        self.used_ratio = used_ratio


class TopicNotFoundError(InvalidMessageError):
    """A send names a topic that does not exist and ``broker.auto_create_topic`` is off."""


class GroupNotFoundError(InvalidMessageError):
    """A subscription group does not exist and ``broker.auto_create_subscription_group`` is
    off."""


class TransactionStateError(StorageError):
    """An end of a transaction names no pending half message: none at that position, one of
    another producer group or queue offset, or one whose transaction already ended (RocketMQ
    answers SYSTEM_ERROR). Nothing was written."""


class TransactionEndedError(TransactionStateError):
    """An end of a transaction names a half message whose transaction already ended (committed,
    rolled back or discarded). Nothing was written: the first end stands. RocketMQ's remoting
    answers SUCCESS here (and commits the half again); Postbox's remoting server answers SUCCESS
    too, without writing."""


class NoPermissionError(StorageError):
    """A topic's ``perm`` bits refuse the operation (no PERM_WRITE for a send, no PERM_READ for
    a pull), or a group's ``consume_enable`` is off."""

    def __init__(self, message: str, *, topic: str | None = None) -> None:
        super().__init__(message)
        self.topic = topic
