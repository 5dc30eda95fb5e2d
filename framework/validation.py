"""Checks a message must pass before anything is written anywhere.

The outbox stores a message in the application's database long before the relay hands it to the
broker; a message the broker would refuse must be refused at ``outbox.send`` instead, while the
caller can still fix it. These are the broker's own rules (topic names, property framing, the
default body limit of broker.conf ``maxMessageSize``, no empty body, no system property names
among user properties: ``storage_engine.formats.message_rules``), checked without a broker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from storage_engine import validate_topic
from storage_engine.formats import (
    PROPERTY_ARGUMENTS as PROPERTY_ARGUMENTS,  # re-exported (outbox.send)
)
from storage_engine.formats import (
    empty_body_problem,
    reserved_property_problem,
)

from .errors import ConfigurationError

MAX_MESSAGE_SIZE_BYTES = 4 * 1024 * 1024
"""The broker's default body limit (broker.conf ``maxMessageSize``)."""

_FRAMING = ("\x01", "\x02")


class InvalidMessageError(ConfigurationError):
    """The message can never be stored: nothing was written."""


def check_message(topic: object, body: bytes, *, tags: object = None,
                  keys: Iterable[str] | str | None = None,
                  properties: Mapping[str, str] | None = None,
                  delay_level: object = None,
                  max_body_bytes: int = MAX_MESSAGE_SIZE_BYTES,
                  arguments: Mapping[str, str] = PROPERTY_ARGUMENTS) -> list[str]:
    """Raise ``InvalidMessageError`` unless the broker would accept the message.

    ``arguments`` names the caller's argument for each system property it sets (for the
    error that refuses such a property). Returns ``keys`` as a list of non-empty keys.
    """
    try:
        validate_topic(topic)
    except ValueError as error:
        raise InvalidMessageError(str(error)) from error
    if str(topic).startswith(("%RETRY%", "%DLQ%")):
        raise InvalidMessageError(f"topic {topic!r} is a system topic; send to a normal topic")
    if type(body) is not bytes:
        raise InvalidMessageError(f"body must be bytes, got {type(body).__name__}")
    if problem := empty_body_problem(body):
        raise InvalidMessageError(problem)
    if len(body) > max_body_bytes:
        raise InvalidMessageError(f"message body is {len(body):,} bytes; the limit is "
                                  f"{max_body_bytes:,} (broker.conf maxMessageSize)")
    if tags is not None:
        _check_text("tags", tags)
    key_list = _keys(keys)
    for key in key_list:
        _check_text("keys", key)
        if " " in key:
            raise InvalidMessageError(f"key {key!r} contains a space (keys are space-separated)")
    check_properties(properties, arguments)
    if delay_level is not None and (type(delay_level) is not int or delay_level < 0):
        raise InvalidMessageError(f"delay_level must be an int in 1..18, got {delay_level!r}")
    return key_list


def check_properties(properties: Mapping[str, str] | None,
                     arguments: Mapping[str, str] = PROPERTY_ARGUMENTS) -> None:
    """Raise ``InvalidMessageError`` unless every user property has a legal name and value;
    a system property name (``UNIQ_KEY``, ``KEYS``, ``TAGS``, ``DELAY``, ...) is refused with
    the argument to use instead."""
    for name, value in (properties or {}).items():
        if not isinstance(name, str) or not name:
            raise InvalidMessageError("property names must be non-empty strings")
        if problem := reserved_property_problem(name, arguments):
            raise InvalidMessageError(problem)
        _check_text(f"property {name!r}", name)
        _check_text(f"property {name!r}", value)


def _keys(keys: Iterable[str] | str | None) -> list[str]:
    if keys is None:
        return []
    if isinstance(keys, str):
        return [key for key in keys.split(" ") if key]
    listed = list(keys)
    for key in listed:
        if not isinstance(key, str):
            raise InvalidMessageError(f"keys must be strings, got {key!r}")
    return [key for key in listed if key]


def _check_text(what: str, value: object) -> None:
    if not isinstance(value, str):
        raise InvalidMessageError(f"{what} must be a string, got {type(value).__name__}")
    if any(mark in value for mark in _FRAMING):
        raise InvalidMessageError(f"{what} contains U+0001 or U+0002 (record framing)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidMessageError(f"{what} is not valid Unicode text") from error
