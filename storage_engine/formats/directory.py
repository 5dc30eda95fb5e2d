"""Names the store gives its directories and files (reference §0, §1.6). Pure.

A store root holds ``commitlog/`` (segments named by 20-digit start position),
``consumequeue/<topic>/<queueId>/`` (files named by 20-digit start byte), ``index/`` and
``config/`` (``consumerOffset.json`` and friends). Tools that read a store without opening it
(verification, the Spark reconciliation) find its files through these names.

The names of the system topics (``%RETRY%group``, ``%DLQ%group``, ``SCHEDULE_TOPIC_XXXX``) are
declared once, in ``formats.topic_names``.
"""

from __future__ import annotations

from collections.abc import Mapping

from .constants import PROPERTY_RETRY_TOPIC
from .topic_names import is_system_group_topic

COMMIT_LOG_DIR_NAME = "commitlog"
CONSUME_QUEUE_DIR_NAME = "consumequeue"
INDEX_DIR_NAME = "index"
CONFIG_DIR_NAME = "config"
CONSUMER_OFFSET_FILE_NAME = "consumerOffset.json"
BACKUP_SUFFIX = ".bak"  # every config file keeps its previous version next to it
SEGMENT_NAME_DIGITS = 20

TOPIC_GROUP_SEPARATOR = "@"  # consumerOffset.json keys are "<topic>@<group>"


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
    "INDEX_DIR_NAME",
    "SEGMENT_NAME_DIGITS",
    "TOPIC_GROUP_SEPARATOR",
    "original_topic",
]
