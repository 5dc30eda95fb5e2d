"""Names the store gives its directories, files and system topics (reference §0, §1.6). Pure.

A store root holds ``commitlog/`` (segments named by 20-digit start position),
``consumequeue/<topic>/<queueId>/`` (files named by 20-digit start byte), ``index/`` and
``config/`` (``consumerOffset.json`` and friends). Tools that read a store without opening it
(verification, the Spark reconciliation) find its files through these names.

The names of a consumer group's system topics (``%RETRY%group``, ``%DLQ%group``) are defined
here once; the store, the broker, the framework (and, through it, the outbox) use these.
"""

from __future__ import annotations

from collections.abc import Mapping

from .constants import PROPERTY_RETRY_TOPIC

COMMIT_LOG_DIR_NAME = "commitlog"
CONSUME_QUEUE_DIR_NAME = "consumequeue"
INDEX_DIR_NAME = "index"
CONFIG_DIR_NAME = "config"
CONSUMER_OFFSET_FILE_NAME = "consumerOffset.json"
BACKUP_SUFFIX = ".bak"  # every config file keeps its previous version next to it
SEGMENT_NAME_DIGITS = 20

RETRY_TOPIC_PREFIX = "%RETRY%"
DLQ_TOPIC_PREFIX = "%DLQ%"
DELAY_TOPIC = "SCHEDULE_TOPIC_XXXX"
TOPIC_GROUP_SEPARATOR = "@"  # consumerOffset.json keys are "<topic>@<group>"


def retry_topic(consumer_group: str) -> str:
    """``%RETRY%group``."""
    return RETRY_TOPIC_PREFIX + consumer_group


def dead_letter_topic(consumer_group: str) -> str:
    """``%DLQ%group``."""
    return DLQ_TOPIC_PREFIX + consumer_group


def is_system_group_topic(topic: str) -> bool:
    """Whether ``topic`` is a retry or dead-letter topic."""
    return topic.startswith((RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX))


def original_topic(topic: str, properties: Mapping[str, str]) -> str:
    """The topic a record of ``topic`` was first sent to: for a retry or dead-letter copy its
    ``RETRY_TOPIC`` property (set by the broker's send-back), else ``topic`` itself."""
    if is_system_group_topic(topic):
        return properties.get(PROPERTY_RETRY_TOPIC) or topic
    return topic

__all__ = [
    "BACKUP_SUFFIX",
    "COMMIT_LOG_DIR_NAME",
    "CONFIG_DIR_NAME",
    "CONSUMER_OFFSET_FILE_NAME",
    "CONSUME_QUEUE_DIR_NAME",
    "DELAY_TOPIC",
    "DLQ_TOPIC_PREFIX",
    "INDEX_DIR_NAME",
    "RETRY_TOPIC_PREFIX",
    "SEGMENT_NAME_DIGITS",
    "TOPIC_GROUP_SEPARATOR",
    "dead_letter_topic",
    "is_system_group_topic",
    "original_topic",
    "retry_topic",
]
