"""Names the store gives its directories, files and system topics (reference §0, §1.6). Pure.

A store root holds ``commitlog/`` (segments named by 20-digit start position),
``consumequeue/<topic>/<queueId>/`` (files named by 20-digit start byte), ``index/`` and
``config/`` (``consumerOffset.json`` and friends). Tools that read a store without opening it
(verification, the Spark reconciliation) find its files through these names.
"""

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
]
