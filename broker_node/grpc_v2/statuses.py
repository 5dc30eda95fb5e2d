"""Answers of the MessagingService: ``RequestError`` and the mapping of store errors to
RocketMQ v2 ``Code`` values. Pure.

Every MessagingService response carries a ``Status``; a refused request answers with the code a
RocketMQ 5 client understands (``ILLEGAL_TOPIC``, ``MESSAGE_BODY_TOO_LARGE``, ``FORBIDDEN`` …)
and a message naming the value, never with a gRPC error. ``status_for(error)`` is the one place
that decides which store error becomes which code; anything unexpected is
``INTERNAL_SERVER_ERROR`` (and logged by the caller with its traceback).
"""

from __future__ import annotations

from postbox.storage_engine.errors import (
    GroupNotFoundError,
    InvalidMessageError,
    InvalidQueueError,
    InvalidTopicError,
    MessageNotFoundError,
    MessageTooLargeError,
    NoPermissionError,
    NotMasterError,
    PropertiesTooLargeError,
    StorageError,
    StoreClosedError,
    StoreNotWritableError,
    TopicNotFoundError,
)

from .protocol import Code, definition

STATUS_MESSAGE_LENGTH_MAX = 1000
"""Longest status message sent back (names of values are cut, not the code)."""


class RequestError(Exception):
    """A request the server refuses, with the v2 ``Code`` to answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def status(code: int = Code.OK, message: str = "OK") -> definition.Status:
    """A ``Status`` (message cut to ``STATUS_MESSAGE_LENGTH_MAX`` characters)."""
    return definition.Status(code=code, message=message[:STATUS_MESSAGE_LENGTH_MAX])


def not_implemented(call: str) -> definition.Status:
    """The answer of a call Postbox does not implement."""
    return status(Code.NOT_IMPLEMENTED, f"{call} is not supported by the Postbox broker")


# Most specific first: subclasses before their bases.
_STORE_ERROR_CODES: tuple[tuple[type[StorageError], int], ...] = (
    (InvalidTopicError, Code.ILLEGAL_TOPIC),
    (TopicNotFoundError, Code.TOPIC_NOT_FOUND),
    (GroupNotFoundError, Code.CONSUMER_GROUP_NOT_FOUND),
    (MessageTooLargeError, Code.MESSAGE_BODY_TOO_LARGE),
    (PropertiesTooLargeError, Code.MESSAGE_PROPERTIES_TOO_LARGE),
    (InvalidQueueError, Code.BAD_REQUEST),
    (InvalidMessageError, Code.BAD_REQUEST),
    (NoPermissionError, Code.FORBIDDEN),
    (NotMasterError, Code.FORBIDDEN),  # a slave: send to its master
    (MessageNotFoundError, Code.MESSAGE_NOT_FOUND),
    (StoreClosedError, Code.INTERNAL_SERVER_ERROR),
    (StoreNotWritableError, Code.INTERNAL_SERVER_ERROR),
)


def status_for(error: BaseException) -> definition.Status:
    """The status answering ``error`` (a ``RequestError``, a ``StorageError`` or anything)."""
    if isinstance(error, RequestError):
        return status(error.code, str(error))
    for kind, code in _STORE_ERROR_CODES:
        if isinstance(error, kind):
            return status(code, str(error) or kind.__name__)
    return status(Code.INTERNAL_SERVER_ERROR, f"internal error: {type(error).__name__}")


def combined_status(statuses: list[definition.Status]) -> definition.Status:
    """The top-level status of a batch answer: OK, the common failure, or MULTIPLE_RESULTS."""
    codes = {entry.code for entry in statuses}
    if not statuses or codes == {Code.OK}:
        return status()
    if len(codes) == 1:
        return statuses[0]
    return status(Code.MULTIPLE_RESULTS, "entries have different results; see each entry")


__all__ = ["RequestError", "combined_status", "not_implemented", "status", "status_for"]
