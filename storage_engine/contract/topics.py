"""Topic names and system topics. Pure.

Topic names become directory names under ``consumequeue/``, so only ``[A-Za-z0-9_%|-]`` is
allowed: no dots, slashes or other path syntax can reach the file system. Normal topics are at
most 127 characters; ``%RETRY%``/``%DLQ%`` topics at most 255 (reference §1.6). The rule and
the system-topic names are stated once in ``formats`` (``message_rules.topic_problem``,
``directory``); this module raises the store's error for them.
"""

from __future__ import annotations

from ..errors import InvalidTopicError
from ..formats.directory import DELAY_TOPIC as DELAY_TOPIC  # re-exported
from ..formats.directory import DLQ_TOPIC_PREFIX as DLQ_TOPIC_PREFIX
from ..formats.directory import RETRY_TOPIC_PREFIX as RETRY_TOPIC_PREFIX
from ..formats.directory import dead_letter_topic as dead_letter_topic
from ..formats.directory import is_system_group_topic as is_system_group_topic
from ..formats.directory import retry_topic as retry_topic
from ..formats.message_rules import topic_problem


def validate_topic(topic: object) -> str:
    """Return ``topic`` if it is a legal topic name, else raise ``InvalidTopicError``."""
    if problem := topic_problem(topic):
        raise InvalidTopicError(problem, topic=topic if isinstance(topic, str) else None)
    assert isinstance(topic, str)
    return topic
