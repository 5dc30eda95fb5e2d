"""Broker refusals as the errors the framework already handles for the embedded broker.

A consumer call answered with an unexpected code raises a ``RemotingResponseError`` subclass
that is also the store error the embedded ``Broker`` raises for the same cause, so code written
against one transport handles the other:

- 16 NO_PERMISSION → ``RemotingNoPermissionError`` (also ``NoPermissionError``);
- 26 SUBSCRIPTION_GROUP_NOT_EXIST → ``RemotingGroupNotFoundError`` (``GroupNotFoundError``);
- 17 TOPIC_NOT_EXIST → ``RemotingTopicNotFoundError`` (``TopicNotFoundError``);
- 2 SYSTEM_BUSY, 14 SERVICE_NOT_AVAILABLE, 215 FLOW_CONTROL, 1500 GO_AWAY →
  ``RemotingBrokerBusyError`` (``BrokerUnavailableError``: wait and try again);
- 29 INVALID_PARAMETER, 13 MESSAGE_ILLEGAL (a message the broker refuses: too large, a bad
  property, a timer past ``timerMaxDelaySec``) → ``RemotingInvalidRequestError``
  (``InvalidMessageError``);
- anything else → ``RemotingResponseError``.

Every error carries the code, the broker's remark and its address. Pure; safe from any thread.
"""

from __future__ import annotations

from postbox.storage_engine.errors import (
    BrokerUnavailableError,
    GroupNotFoundError,
    InvalidMessageError,
    NoPermissionError,
    TopicNotFoundError,
)

from ..protocol.codes import ResponseCode
from ..protocol.wire import RemotingCommand
from .errors import RemotingResponseError


class RemotingNoPermissionError(RemotingResponseError, NoPermissionError):
    """The broker refused the topic or group (16 NO_PERMISSION)."""


class RemotingGroupNotFoundError(RemotingResponseError, GroupNotFoundError):
    """The consumer group does not exist and the broker does not create it (26)."""


class RemotingTopicNotFoundError(RemotingResponseError, TopicNotFoundError):
    """The broker has no such topic (17 TOPIC_NOT_EXIST)."""


class RemotingBrokerBusyError(RemotingResponseError, BrokerUnavailableError):
    """The broker is overloaded or shutting down: try again later."""


class RemotingInvalidRequestError(RemotingResponseError, InvalidMessageError):
    """The broker found a request field or the message invalid (29 INVALID_PARAMETER, 13
    MESSAGE_ILLEGAL)."""


_BY_CODE: dict[int, type[RemotingResponseError]] = {
    ResponseCode.NO_PERMISSION: RemotingNoPermissionError,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: RemotingGroupNotFoundError,
    ResponseCode.TOPIC_NOT_EXIST: RemotingTopicNotFoundError,
    ResponseCode.SYSTEM_BUSY: RemotingBrokerBusyError,
    ResponseCode.SERVICE_NOT_AVAILABLE: RemotingBrokerBusyError,
    ResponseCode.FLOW_CONTROL: RemotingBrokerBusyError,
    ResponseCode.GO_AWAY: RemotingBrokerBusyError,
    ResponseCode.INVALID_PARAMETER: RemotingInvalidRequestError,
    ResponseCode.MESSAGE_ILLEGAL: RemotingInvalidRequestError,
}


def response_error(what: str, answer: RemotingCommand, *, address: str,
                   topic: str | None = None) -> RemotingResponseError:
    """The error for ``answer`` to the request described by ``what``."""
    kind = _BY_CODE.get(answer.code, RemotingResponseError)
    error = kind(what, code=answer.code, remark=answer.remark, address=address)
    if isinstance(error, InvalidMessageError | NoPermissionError):
        error.topic = topic
    if isinstance(error, BrokerUnavailableError):
        error.address = address
    return error


def check_success(what: str, answer: RemotingCommand, *, address: str,
                  topic: str | None = None) -> RemotingCommand:
    """``answer`` when it is a SUCCESS, else its error raised."""
    if answer.code != ResponseCode.SUCCESS:
        raise response_error(what, answer, address=address, topic=topic)
    return answer


__all__ = [
    "RemotingBrokerBusyError", "RemotingGroupNotFoundError", "RemotingInvalidRequestError",
    "RemotingNoPermissionError", "RemotingTopicNotFoundError", "check_success",
    "response_error",
]
