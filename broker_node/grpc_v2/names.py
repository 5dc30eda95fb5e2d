"""Names arriving from the network: topics, groups, client ids, durations. Pure.

Topic and group names become directory and file names in the store, so they are checked with
the store's own rules (``validate_topic``, ``validate_group``: ``[A-Za-z0-9_%|-]``, at most
127 characters, retry/DLQ topics 255) before any broker call, and a refusal is a
``RequestError`` with ``ILLEGAL_TOPIC`` / ``ILLEGAL_CONSUMER_GROUP`` — nothing is created on
disk for a name that fails. The broker's internal topics (``SCHEDULE_TOPIC_XXXX``,
``RMQ_SYS_*``) are not reachable from the network; retry and DLQ topics may be read, not sent
to. Namespaces (``resource_namespace``) are not supported: a non-empty
one is refused rather than silently ignored.
"""

from __future__ import annotations

from collections.abc import Iterable

from postbox.storage_engine.contract.config_beans import validate_group
from postbox.storage_engine.contract.topics import validate_topic
from postbox.storage_engine.errors import InvalidMessageError
from postbox.storage_engine.formats.topic_names import (
    is_internal_topic,
    is_system_group_topic,
)

from .protocol import Code, definition
from .statuses import RequestError

CLIENT_ID_METADATA_KEY = "x-mq-client-id"
CLIENT_ID_LENGTH_MAX = 256
DURATION_MAX_MS = 12 * 3600 * 1000
"""Longest invisible duration or long-polling timeout accepted (RocketMQ's 12 h cap)."""


def topic_name(resource: definition.Resource) -> str:
    """The validated topic name of ``resource`` (not an internal topic of the broker)."""
    _check_namespace(resource, Code.ILLEGAL_TOPIC)
    try:
        topic = validate_topic(resource.name)
    except InvalidMessageError as error:
        raise RequestError(Code.ILLEGAL_TOPIC, str(error)) from error
    if is_internal_topic(topic):
        raise RequestError(Code.ILLEGAL_TOPIC, f"{topic} is an internal topic of the broker")
    return topic


def sendable_topic_name(resource: definition.Resource) -> str:
    """``topic_name`` that is also not a retry or dead-letter topic (clients may read those,
    only the broker writes them)."""
    topic = topic_name(resource)
    if is_system_group_topic(topic):
        raise RequestError(Code.ILLEGAL_TOPIC, f"{topic} is a retry or dead-letter topic; only "
                                               "the broker writes to it")
    return topic


def group_name(resource: definition.Resource) -> str:
    """The validated consumer-group name of ``resource``."""
    _check_namespace(resource, Code.ILLEGAL_CONSUMER_GROUP)
    try:
        return validate_group(resource.name)
    except InvalidMessageError as error:
        raise RequestError(Code.ILLEGAL_CONSUMER_GROUP, str(error)) from error


def _check_namespace(resource: definition.Resource, code: int) -> None:
    if resource.resource_namespace:
        raise RequestError(code, f"namespace {resource.resource_namespace[:64]!r} is not "
                                 "supported by the Postbox broker (leave it empty)")


def client_id(metadata: Iterable[tuple[str, str]]) -> str | None:
    """The ``x-mq-client-id`` of a call, or None (checked: printable, bounded)."""
    for key, value in metadata:
        if key == CLIENT_ID_METADATA_KEY:
            if not value or len(value) > CLIENT_ID_LENGTH_MAX or not value.isprintable():
                raise RequestError(Code.CLIENT_ID_REQUIRED,
                                   f"x-mq-client-id must be 1..{CLIENT_ID_LENGTH_MAX} printable "
                                   "characters")
            return value
    return None


def required_client_id(metadata: Iterable[tuple[str, str]]) -> str:
    """``client_id`` that must be present (consumer calls)."""
    value = client_id(metadata)
    if value is None:
        raise RequestError(Code.CLIENT_ID_REQUIRED, "x-mq-client-id metadata is required")
    return value


def duration_ms(duration, *, code: int, what: str, minimum_ms: int = 0,
                maximum_ms: int = DURATION_MAX_MS) -> int:
    """A protobuf ``Duration`` in milliseconds, checked against ``[minimum_ms, maximum_ms]``."""
    value_ms = duration.seconds * 1000 + duration.nanos // 1_000_000
    if not minimum_ms <= value_ms <= maximum_ms:
        raise RequestError(code, f"{what} must be within {minimum_ms} ms .. {maximum_ms} ms, "
                                 f"got {value_ms} ms")
    return value_ms


__all__ = ["CLIENT_ID_METADATA_KEY", "DURATION_MAX_MS", "client_id", "duration_ms",
           "group_name", "required_client_id", "sendable_topic_name", "topic_name"]
