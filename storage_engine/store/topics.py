"""Topic names and system topics. Pure.

Topic names become directory names under ``consumequeue/``, so only ``[A-Za-z0-9_%|-]`` is
allowed: no dots, slashes or other path syntax can reach the file system. Normal topics are at
most 127 characters; ``%RETRY%``/``%DLQ%`` topics at most 255 (reference §1.6).
"""

from __future__ import annotations

import re

from ..errors import InvalidTopicError
from ..formats.directory import DELAY_TOPIC as DELAY_TOPIC  # re-exported
from ..formats.directory import DLQ_TOPIC_PREFIX as DLQ_TOPIC_PREFIX  # re-exported
from ..formats.directory import RETRY_TOPIC_PREFIX as RETRY_TOPIC_PREFIX  # re-exported

TOPIC_LENGTH_MAX = 127
SYSTEM_TOPIC_LENGTH_MAX = 255

_TOPIC_PATTERN = re.compile(r"[A-Za-z0-9_%|-]+")


def validate_topic(topic: object) -> str:
    """Return ``topic`` if it is a legal topic name, else raise ``InvalidTopicError``."""
    if not isinstance(topic, str) or not topic:
        raise InvalidTopicError(f"topic must be a non-empty string, got {topic!r}")
    if _TOPIC_PATTERN.fullmatch(topic) is None:
        raise InvalidTopicError(
            f"topic {topic!r} has characters outside [A-Za-z0-9_%|-] (topic names become "
            "directory names)", topic=topic)
    limit = SYSTEM_TOPIC_LENGTH_MAX if is_system_group_topic(topic) else TOPIC_LENGTH_MAX
    if len(topic) > limit:
        raise InvalidTopicError(f"topic is {len(topic)} characters; at most {limit} allowed",
                                topic=topic)
    return topic


def is_system_group_topic(topic: str) -> bool:
    """Whether ``topic`` is a retry or dead-letter topic."""
    return topic.startswith(RETRY_TOPIC_PREFIX) or topic.startswith(DLQ_TOPIC_PREFIX)


def retry_topic(consumer_group: str) -> str:
    """``%RETRY%group``."""
    return RETRY_TOPIC_PREFIX + consumer_group


def dead_letter_topic(consumer_group: str) -> str:
    """``%DLQ%group``."""
    return DLQ_TOPIC_PREFIX + consumer_group
