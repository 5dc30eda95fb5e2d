"""Errors of the remoting server: one root, and the refusals a handler raises to answer a code.

``RequestRefusedError(code, remark)`` is how a handler (or the access-control hook) answers a
request with a non-zero response code: the dispatcher turns it into the response, remark
included. ``AccessDeniedError`` is the refusal of the access-control hook (code 16
NO_PERMISSION). Pure.
"""

from __future__ import annotations

from postbox.network.protocol.codes import ResponseCode


class RemotingServerError(Exception):
    """Root of the remoting server's errors."""


class RequestRefusedError(RemotingServerError):
    """A request answered with ``code`` and ``remark`` instead of being served."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = int(code)
        self.remark = remark


class AccessDeniedError(RequestRefusedError):
    """The access-control hook refused the request (answered 16 NO_PERMISSION)."""

    def __init__(self, remark: str) -> None:
        super().__init__(ResponseCode.NO_PERMISSION, remark)


class ServerLimitError(RequestRefusedError):
    """A server bound was reached (open connections, queued work, suspended pulls); answered
    2 SYSTEM_BUSY so clients back off and retry."""

    def __init__(self, remark: str) -> None:
        super().__init__(ResponseCode.SYSTEM_BUSY, remark)


class CallTimeoutError(RemotingServerError):
    """A broker → client ``Session.call`` got no answer in time."""


class SessionClosedError(RemotingServerError):
    """The connection of a session is closed (a call or send to it cannot proceed)."""
