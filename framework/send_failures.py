"""Why a send failed, in the two kinds a caller that sends again must tell apart.

- ``SendFailure.TRANSIENT``: the broker, or the way to it, is unavailable for now — connection
  refused, reset or timed out, no name server or broker answering, the broker busy, flushing
  too slowly, without its slave, shutting down or closed, its disk full or fail-stopped, a
  store that is a slave, no route with a writable master yet, the app stopped
  (``AppStateError``: its producer refuses until ``app.start()``). The message is not at fault:
  the same send goes through once the broker is back, however long that takes.
- ``SendFailure.MESSAGE``: the message itself was refused — too large, a field or property
  invalid, a topic that does not exist and could not be created, no permission to write the
  topic — or the failure is of a kind not known to be transient. Sending it again gives the
  same answer, so these are what a limit on attempts should count.

``send_failure(error)`` is the one place the errors of both transports are sorted: the embedded
broker raises the store's errors (``storage_engine``), the ``rocketmq://`` client raises the
remoting client's, which are also the store's for the same cause (``network.client``:
``errors``, ``broker_errors``), plus ``RemotingResponseError`` with the response code for a
refusal no store error stands for. An unknown failure counts (``MESSAGE``): a stub that can
never be sent then ends ``void`` with an alert instead of being retried silently forever.

Pure; safe from any thread.
"""

from __future__ import annotations

import enum

from postbox.network.client.errors import RemotingResponseError, RouteNotFoundError
from postbox.storage_engine import (
    BrokerUnavailableError,
    InvalidMessageError,
    NoPermissionError,
    StoreStateError,
)

from .errors import AppStateError


class SendFailure(enum.StrEnum):
    """The kind of a failed send (see the module docstring)."""

    TRANSIENT = "transient"
    """The broker is unavailable for now; the message is not at fault."""
    MESSAGE = "message"
    """The message was refused (or the failure is not known to be transient)."""


TRANSIENT_RESPONSE_CODES = frozenset({
    1,     # SYSTEM_ERROR: the broker failed inside
    2,     # SYSTEM_BUSY: its write queue is full
    10,    # FLUSH_DISK_TIMEOUT
    11,    # SLAVE_NOT_AVAILABLE
    12,    # FLUSH_SLAVE_TIMEOUT
    14,    # SERVICE_NOT_AVAILABLE: starting, shutting down, or a slave
    215,   # FLOW_CONTROL
    1500,  # GO_AWAY: the broker is going away, reconnect elsewhere
})
"""Remoting response codes that mean "try again later", whatever error class carries them."""


def send_failure(error: BaseException) -> SendFailure:
    """The kind of the failure ``error`` raised by a send (or a batch send)."""
    if isinstance(error, InvalidMessageError | NoPermissionError):
        # too large, invalid, no such topic after creating it failed, no right to write it
        # (checked first: the remoting client's refusals are also RemotingResponseErrors)
        return SendFailure.MESSAGE
    if isinstance(error, BrokerUnavailableError | StoreStateError | RouteNotFoundError
                  | AppStateError | OSError):
        # unreachable, timed out, busy, closed, not writable, not master, no route yet, the
        # app stopped
        return SendFailure.TRANSIENT
    if isinstance(error, RemotingResponseError) and error.code in TRANSIENT_RESPONSE_CODES:
        return SendFailure.TRANSIENT
    return SendFailure.MESSAGE


__all__ = ["TRANSIENT_RESPONSE_CODES", "SendFailure", "send_failure"]
