"""Storage errors on the wire: a gRPC status code for every ``StorageError`` class, and the
same exception class rebuilt on the client.

The server aborts a call with the status code of the error's class (most specific first, e.g.
``TopicNotFoundError`` → NOT_FOUND, ``InvalidTopicError`` → INVALID_ARGUMENT) and puts the
class name, message and context attributes (topic, setting, path, log position) in the
trailing metadata entry ``postbox-error-bin`` (JSON). The client rebuilds exactly that class
from ``storage_engine.errors``, so code above the transport catches what it catches with the
embedded broker. A failure without that entry is the transport's own: UNAVAILABLE, DEADLINE
EXCEEDED and CANCELLED become ``BrokerUnavailableError`` (with the address);
UNAUTHENTICATED / PERMISSION_DENIED (from access control) become ``NoPermissionError``; anything
else ``StorageError``. Pure; safe to call from any thread.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import cast

import grpc

from storage_engine import errors
from storage_engine.errors import (
    BrokerUnavailableError,
    CorruptionError,
    DiskFullError,
    GroupNotFoundError,
    InvalidMessageError,
    MessageNotFoundError,
    NoPermissionError,
    StorageError,
    StorageIOError,
    StoreClosedError,
    StoreStateError,
    TopicNotFoundError,
)

log = logging.getLogger(__name__)

ERROR_METADATA_KEY = "postbox-error-bin"
_ATTRIBUTES = ("topic", "setting", "path", "log_position", "address")

_STATUS_BY_CLASS: tuple[tuple[type[StorageError], grpc.StatusCode], ...] = (
    (TopicNotFoundError, grpc.StatusCode.NOT_FOUND),
    (GroupNotFoundError, grpc.StatusCode.NOT_FOUND),
    (MessageNotFoundError, grpc.StatusCode.NOT_FOUND),
    (InvalidMessageError, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.ConfigError, grpc.StatusCode.INVALID_ARGUMENT),
    (NoPermissionError, grpc.StatusCode.PERMISSION_DENIED),
    (DiskFullError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (StoreClosedError, grpc.StatusCode.UNAVAILABLE),
    (BrokerUnavailableError, grpc.StatusCode.UNAVAILABLE),
    (StoreStateError, grpc.StatusCode.FAILED_PRECONDITION),
    (CorruptionError, grpc.StatusCode.DATA_LOSS),
    (StorageIOError, grpc.StatusCode.INTERNAL),
)
_UNAVAILABLE_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                      grpc.StatusCode.CANCELLED)
_DENIED_CODES = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
_ERROR_CLASSES = {name: value for name, value in vars(errors).items()
                  if isinstance(value, type) and issubclass(value, StorageError)}


def status_code(error: StorageError) -> grpc.StatusCode:
    """The status code a storage error travels with."""
    for kind, code in _STATUS_BY_CLASS:
        if isinstance(error, kind):
            return code
    return grpc.StatusCode.FAILED_PRECONDITION


def error_detail(error: StorageError) -> dict:
    """``error`` as JSON values: class name, message, context attributes."""
    attributes = {name: getattr(error, name) for name in _ATTRIBUTES if hasattr(error, name)}
    return {"class": type(error).__name__, "message": str(error), "attributes": attributes}


def error_from_detail(detail: dict) -> StorageError:
    """The storage error of ``error_detail`` (its own class; ``StorageError`` if unknown).

    Raises:
        KeyError, TypeError, ValueError: ``detail`` is malformed.
    """
    kind = _ERROR_CLASSES.get(detail["class"], StorageError)
    attributes = dict(detail.get("attributes") or {})
    rebuilt = kind.__new__(kind)
    Exception.__init__(rebuilt, str(detail["message"]))  # constructors differ; see below
    for name in _ATTRIBUTES:
        if name in attributes:
            setattr(rebuilt, name, attributes[name])
    return rebuilt


def abort_with_error(context: grpc.ServicerContext, error: StorageError) -> None:
    """End the call with ``error``'s status code and its class in the trailing metadata
    (raises, as ``context.abort`` does)."""
    detail = error_detail(error)
    context.set_trailing_metadata(((ERROR_METADATA_KEY,
                                    json.dumps(detail, default=str).encode("utf-8")),))
    context.abort(status_code(error), str(error))


def error_from_rpc(error: grpc.RpcError, address: str, method: str) -> StorageError:
    """The storage error a failed call stands for (the server's own class when it sent one)."""
    rebuilt = _rebuild(error)
    if rebuilt is not None:
        return rebuilt
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else str(error)
    text = f"broker at {address}: {method} failed: {getattr(code, 'name', code)}: {details}"
    if code in _UNAVAILABLE_CODES:
        return BrokerUnavailableError(text, address=address)
    if code in _DENIED_CODES:
        return NoPermissionError(text)
    return StorageError(text)


def _rebuild(error: grpc.RpcError) -> StorageError | None:
    # (key, value) pairs at run time; the grpc stubs declare items without their tuple base
    metadata = cast("Iterable[tuple[str, str | bytes]] | None",
                    error.trailing_metadata() if hasattr(error, "trailing_metadata") else None)
    raw = next((value for key, value in metadata or () if key == ERROR_METADATA_KEY), None)
    if raw is None:
        return None
    try:
        return error_from_detail(json.loads(raw))
    except (ValueError, KeyError, TypeError) as decode_error:
        log.warning("[remote] undecodable error detail %r: %s", raw[:200], decode_error)
        return None


__all__ = ["ERROR_METADATA_KEY", "abort_with_error", "error_detail", "error_from_detail",
           "error_from_rpc", "status_code"]
