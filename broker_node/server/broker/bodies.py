"""JSON bodies of requests, read with checks: size, shape, member types. Pure.

``json_body`` parses a request body (fastjson's dialect accepted) of at most
``JSON_BODY_BYTES_MAX`` bytes into an object; ``member_list``/``member_str`` read members with
their declared types and a bound on list lengths. Every problem answers 29 INVALID_PARAMETER
naming the body and the member.
"""

from __future__ import annotations

from typing import Any

from postbox.network.protocol import fastjson
from postbox.network.protocol.codes import ResponseCode

from ..errors import RequestRefusedError

JSON_BODY_BYTES_MAX = 4 * 1024 * 1024
LIST_LENGTH_MAX = 10_000
"""Most entries of one list in a body (consumer data sets, subscriptions, queues to lock)."""


def bad_body(what: str, problem: str) -> RequestRefusedError:
    """The refusal of a malformed body."""
    return RequestRefusedError(ResponseCode.INVALID_PARAMETER, f"{what} body: {problem}")


def json_body(body: bytes, what: str) -> dict[str, Any]:
    """The JSON object of ``body``."""
    if len(body) > JSON_BODY_BYTES_MAX:
        raise bad_body(what, f"{len(body)} bytes, over {JSON_BODY_BYTES_MAX}")
    try:
        document = fastjson.loads(body)
    except (ValueError, RecursionError) as error:
        raise bad_body(what, f"not JSON ({str(error)[:200]})") from None
    if not isinstance(document, dict):
        raise bad_body(what, "not a JSON object")
    return document


def member_list(document: dict[str, Any], name: str, what: str) -> list[Any]:
    """A list member (absent: empty), at most ``LIST_LENGTH_MAX`` long."""
    value = document.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise bad_body(what, f"{name} is not a list")
    if len(value) > LIST_LENGTH_MAX:
        raise bad_body(what, f"{name} has {len(value)} entries, over {LIST_LENGTH_MAX}")
    return value


def member_str(document: Any, name: str, what: str, default: Any = None) -> Any:
    """A string member (``default`` when absent; required when ``default`` is None)."""
    value = document.get(name) if isinstance(document, dict) else None
    if value is None:
        if default is None:
            raise bad_body(what, f"{name} is missing")
        return default
    if not isinstance(value, str):
        raise bad_body(what, f"{name} is not a string")
    return value


def member_int(document: Any, name: str, what: str) -> int:
    """A required integer member."""
    value = document.get(name) if isinstance(document, dict) else None
    if type(value) is not int:
        raise bad_body(what, f"{name} is not an integer")
    return value


def message_queue(entry: Any, what: str) -> tuple[str, str, int]:
    """(topic, brokerName, queueId) of a ``MessageQueue`` object."""
    if not isinstance(entry, dict):
        raise bad_body(what, "a message queue is not an object")
    return (member_str(entry, "topic", what), member_str(entry, "brokerName", what, ""),
            member_int(entry, "queueId", what))
