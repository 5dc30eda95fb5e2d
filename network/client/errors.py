"""Errors of the remoting client: one root, ``RemotingClientError``.

A peer that cannot be reached or does not answer in time raises an error that is both a
``RemotingClientError`` and the store's ``BrokerUnavailableError``, so the framework's one
"broker unavailable, wait and try again" path covers the remote transport too. A peer that
answers with an unexpected response code raises ``RemotingResponseError`` carrying the code and
the remark. Nothing here has behaviour; safe from any thread.
"""

from __future__ import annotations

from postbox.storage_engine.errors import BrokerUnavailableError


class RemotingClientError(Exception):
    """Root of the remoting client's errors."""


class ConnectionClosedError(RemotingClientError, BrokerUnavailableError):
    """The connection could not be opened, or closed before the answer came."""

    def __init__(self, message: str, *, address: str | None = None) -> None:
        BrokerUnavailableError.__init__(self, message, address=address)


class ConnectFailedError(ConnectionClosedError):
    """The connection could not be opened: the request was never written (safe to retry)."""


class RemotingTimeoutError(RemotingClientError, BrokerUnavailableError):
    """No answer within the call's timeout (the request's effect on the peer is unknown)."""

    def __init__(self, message: str, *, address: str | None = None) -> None:
        BrokerUnavailableError.__init__(self, message, address=address)


class RemotingResponseError(RemotingClientError):
    """The peer answered with a response code the caller does not handle."""

    def __init__(self, message: str, *, code: int, remark: str | None = None,
                 address: str | None = None) -> None:
        super().__init__(f"{message}: code {code}" + (f" ({remark})" if remark else "")
                         + (f" from {address}" if address else ""))
        self.code = code
        self.remark = remark
        self.address = address


class RouteNotFoundError(RemotingClientError, LookupError):
    """No name server knows the topic (TOPIC_NOT_EXIST), or its route names no usable broker."""

    def __init__(self, message: str, *, topic: str) -> None:
        super().__init__(message)
        self.topic = topic
