"""Checks a message must pass before anything is written anywhere.

The outbox stores a message in the application's database long before the relay hands it to the
broker; a message the broker would refuse must be refused at ``outbox.send`` instead, while the
caller can still fix it. The rules are the broker's own, stated once in
``storage_engine.formats.message_rules`` (topic names, text framing, the default body limit of
broker.conf ``maxMessageSize``, no empty body, no system property names among user properties)
and checked here without a broker.

``InvalidMessageError`` is the store's (``storage_engine.InvalidMessageError``), re-exported:
one error means "this message can never be stored", whether the framework, the broker or the
store refused it, so ``except framework.InvalidMessageError`` catches all three.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from postbox.storage_engine import InvalidMessageError as InvalidMessageError  # re-exported
from postbox.storage_engine.formats import (
    MAX_MESSAGE_SIZE_BYTES as MAX_MESSAGE_SIZE_BYTES,  # re-exported
)
from postbox.storage_engine.formats import (
    PROPERTY_ARGUMENTS as PROPERTY_ARGUMENTS,  # re-exported (outbox.send)
)
from postbox.storage_engine.formats import (
    PROPERTY_TIMER_DELIVER_MS as PROPERTY_TIMER_DELIVER_MS,  # re-exported (the outbox's timers)
)
from postbox.storage_engine.formats import (
    new_message_problem,
    unique_key_problem,
    user_properties_problem,
)

UNIQUE_KEY_LENGTH_MAX = 128
"""Longest ``unique_key=`` (the outbox's ``message_id`` column holds 128 characters)."""


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
    key_list = _keys(keys)
    problem = new_message_problem(topic, body, tags=tags, keys=key_list,
                                  properties=properties, delay_level=delay_level,
                                  max_body_bytes=max_body_bytes, arguments=arguments)
    if problem:
        raise InvalidMessageError(problem, topic=topic if isinstance(topic, str) else None)
    return [key for key in key_list if key]


def deliver_at_ms(topic: str, moment: datetime | int) -> int:
    """``moment`` (an aware datetime, or epoch ms) in epoch milliseconds: a ``deliver_at=``.

    Raises:
        InvalidMessageError: a naive datetime, or not a datetime nor an int >= 0.
    """
    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            raise InvalidMessageError("deliver_at must be an aware datetime (with a tzinfo, "
                                      "e.g. datetime.now(timezone.utc)) or epoch milliseconds",
                                      topic=topic)
        return int(moment.timestamp() * 1000)
    if type(moment) is not int or moment < 0:
        raise InvalidMessageError(f"deliver_at must be a datetime or epoch milliseconds >= 0, "
                                  f"got {moment!r}", topic=topic)
    return moment


def check_properties(properties: Mapping[str, str] | None,
                     arguments: Mapping[str, str] = PROPERTY_ARGUMENTS) -> None:
    """Raise ``InvalidMessageError`` unless every user property has a legal name and value;
    a system property name (``UNIQ_KEY``, ``KEYS``, ``TAGS``, ``DELAY``, ...) is refused with
    the argument to use instead."""
    if problem := user_properties_problem(properties, arguments):
        raise InvalidMessageError(problem)


def check_unique_key(unique_key: object, argument: str = "unique_key",
                     length_max: int = UNIQUE_KEY_LENGTH_MAX) -> None:
    """Raise ``InvalidMessageError`` unless ``unique_key`` can be a message id: a non-blank
    string of at most ``length_max`` characters without U+0001/U+0002 (they frame the
    record's properties); the error names the caller's ``argument``."""
    if problem := unique_key_problem(unique_key, length_max, argument):
        raise InvalidMessageError(problem)


def _keys(keys: Iterable[str] | str | None) -> list[str]:
    """``keys`` as a list (a str is split on spaces); empty keys are dropped by the caller."""
    if keys is None:
        return []
    if isinstance(keys, str):
        return [key for key in keys.split(" ") if key]
    return list(keys)
