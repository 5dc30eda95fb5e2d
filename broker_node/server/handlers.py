"""The handler table, the access-control hook, and ``dispatch``: one request in, one answer out.

``HandlerTable.register(code, handler, inline=...)`` binds a request code to
``handler(request, session) -> RemotingCommand | None`` (None: no answer now — a oneway request,
or a long-polled pull answered later through ``session.send_response``). ``inline=True`` marks
a handler cheap and non-blocking: the server runs it on its IO thread, with no thread hand-off;
the others run on the worker pool of their ``lane`` (``workers.SEND_LANE``, ``CLIENT_LANE``, or
the default ``QUERY_LANE``: each lane has its own threads, so queries cannot starve sends).

``dispatch`` is the one place that turns a request into its answer:

1. ``access.check(request, session)`` (``AccessControl``; the default allows everything) — an
   ``AccessDeniedError`` answers 16 NO_PERMISSION with its reason in the remark;
2. an unknown code answers 3 REQUEST_CODE_NOT_SUPPORTED, remark ``" request type N not
   supported"`` (Apache RocketMQ's text);
3. the handler; a ``RequestRefusedError`` answers its code and remark; a ``HeaderFieldError``
   answers 1 SYSTEM_ERROR for a missing field (as Java nodes do) and 29 INVALID_PARAMETER for a
   malformed one, naming the field; store errors map by ``code_for_error``; anything else is
   1 SYSTEM_ERROR naming the exception type (logged with its traceback).

A oneway request (flag bit 1) never gets an answer, not even an error (``dispatch`` returns
None for it). Pure apart from logging; thread-safe (the table is read-only once serving).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from postbox.network.protocol.codes import SERVER_VERSION, ResponseCode
from postbox.network.protocol.wire import HeaderFieldError, RemotingCommand
from postbox.storage_engine.errors import (
    DiskFullError,
    GroupNotFoundError,
    InvalidMessageError,
    InvalidQueueError,
    LimitExceededError,
    MessageNotFoundError,
    NoPermissionError,
    NotMasterError,
    StorageError,
    StoreStateError,
    TableFullError,
    TopicNotFoundError,
)

from .errors import RequestRefusedError
from .session import Session
from .workers import QUERY_LANE

log = logging.getLogger(__name__)

Handler = Callable[[RemotingCommand, Session], "RemotingCommand | None"]
REMARK_LENGTH_MAX = 2000
"""Longest remark sent back (an error text naming a value is cut, not the code)."""


class AccessControl(Protocol):
    """Checks every request before its handler runs; raises ``AccessDeniedError`` to refuse."""

    def check(self, request: RemotingCommand, session: Session) -> object:
        """Return to let ``request`` through; raise ``AccessDeniedError`` to refuse it."""


class AllowAll:
    """The access control of a server without ACL: every request passes."""

    def check(self, request: RemotingCommand, session: Session) -> None:
        """Let every request through."""
        return None


class HandlerTable:
    """Request code → handler (and whether it may run on the IO thread)."""

    def __init__(self) -> None:
        self._handlers: dict[int, tuple[Handler, bool]] = {}
        self._lanes: dict[int, str] = {}

    def register(self, code: int, handler: Handler, *, inline: bool = False,
                 lane: str = QUERY_LANE) -> None:
        """Serve ``code`` with ``handler`` (replacing an earlier one), on the IO thread when
        ``inline``, else on the worker lane ``lane``."""
        self._handlers[int(code)] = (handler, inline)
        self._lanes[int(code)] = lane

    def lane(self, code: int) -> str:
        """The worker lane of ``code`` (the query lane for an unknown code)."""
        return self._lanes.get(code, QUERY_LANE)

    def lookup(self, code: int) -> tuple[Handler, bool] | None:
        """The handler of ``code`` and its inline flag, or None when unknown."""
        return self._handlers.get(code)

    def codes(self) -> list[int]:
        """Every served request code, sorted."""
        return sorted(self._handlers)


# Most specific first: subclasses before their bases.
_STORE_ERROR_CODES: tuple[tuple[type[StorageError], int], ...] = (
    (TopicNotFoundError, ResponseCode.TOPIC_NOT_EXIST),
    (GroupNotFoundError, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST),
    (TableFullError, ResponseCode.SYSTEM_ERROR),
    (InvalidQueueError, ResponseCode.INVALID_PARAMETER),
    (LimitExceededError, ResponseCode.MESSAGE_ILLEGAL),
    (InvalidMessageError, ResponseCode.MESSAGE_ILLEGAL),
    (NoPermissionError, ResponseCode.NO_PERMISSION),
    (DiskFullError, ResponseCode.SYSTEM_BUSY),  # back-pressure: the client retries later
    (NotMasterError, ResponseCode.SERVICE_NOT_AVAILABLE),  # a slave: send to its master
    (StoreStateError, ResponseCode.SERVICE_NOT_AVAILABLE),  # closed, fail-stop
    (MessageNotFoundError, ResponseCode.SYSTEM_ERROR),
)


def code_for_error(error: BaseException) -> int | None:
    """The response code of a store error, or None for an unexpected error."""
    for kind, code in _STORE_ERROR_CODES:
        if isinstance(error, kind):
            return code
    return ResponseCode.SYSTEM_ERROR if isinstance(error, StorageError) else None


def error_response(request: RemotingCommand, error: BaseException, peer: str = "?"
                   ) -> RemotingCommand:
    """The answer to ``request`` (from ``peer``) that failed with ``error``."""
    if isinstance(error, RequestRefusedError):
        code, remark = error.code, error.remark
    elif isinstance(error, HeaderFieldError):
        code = ResponseCode.SYSTEM_ERROR if error.missing else ResponseCode.INVALID_PARAMETER
        remark = (f"the custom field <{error.field_name}> is null" if error.missing
                  else str(error))
    else:
        mapped = code_for_error(error)
        if mapped is None:
            log.error("[remoting] request code %d from %s failed", request.code, peer,
                      exc_info=error)
            code, remark = ResponseCode.SYSTEM_ERROR, f"internal error: {type(error).__name__}"
        else:
            code, remark = mapped, str(error) or type(error).__name__
    return request.response(code, remark=remark[:REMARK_LENGTH_MAX])


def not_supported(request: RemotingCommand) -> RemotingCommand:
    """The answer to a request code nobody serves."""
    return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                            remark=f" request type {request.code} not supported")


def dispatch(handler: Handler | None, request: RemotingCommand, session: Session,
             access: AccessControl) -> RemotingCommand | None:
    """Run ``request`` through access control and ``handler``; its answer, or None (oneway,
    or answered later by the handler)."""
    response: RemotingCommand | None
    try:
        access.check(request, session)
        if handler is None:
            response = not_supported(request)
        else:
            response = handler(request, session)
    except Exception as error:  # every failure is an answer; the connection stays up
        response = error_response(request, error, session.peer_address)
    if request.is_oneway or response is None:
        return None
    response.version = SERVER_VERSION  # a 5.x broker: clients record it (reference §9.4)
    return response
