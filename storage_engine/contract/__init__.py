"""The broker contract: what every broker implementation takes, returns and checks.

A room of its own below the store and the broker (``.importlinter``): the embedded broker
(``storage_engine.broker``) implements it, and so does the remoting client
(``network.client``), which imports this room, ``formats`` and the wire protocol and nothing of
the store or the broker. Pure: values and rules, no I/O.

- ``client``: the ``BrokerClient`` protocol, split by role (``Producing``, ``Consuming``,
  ``Administering``) plus the capabilities ``remote`` and ``delay_level_count``.
- ``message``: ``Message`` in, ``PutResult``/``GetResult`` (and their statuses) out.
- ``model``: ``SendResult``, ``SendBackResult``, ``QueueProgress``, ``ConsumeFrom``, permissions.
- ``config_beans``: ``TopicConfig`` and ``SubscriptionGroupConfig`` (the beans of
  ``topics.json``/``subscriptionGroup.json``) and the group-name rule.
- ``topics``: topic names and the system topics (``%RETRY%``, ``%DLQ%``, the delay topic).
- ``rules``: client id, queue and batch rules, sharding, and the limits both sides share.
- ``send_back``: the retry and dead-letter copies of a failed message.
- ``transactions``: ``TransactionState``, ``HalfReceipt`` and ``TransactionCheck``.
"""

from ..formats.topic_names import dead_letter_topic, retry_topic
from .client import Administering, BrokerClient, Consuming, Producing, Transacting
from .config_beans import SubscriptionGroupConfig, TopicConfig, validate_group
from .message import GetResult, GetStatus, Message, PutResult, PutStatus
from .model import (
    PERM_INHERIT,
    PERM_READ,
    PERM_READ_WRITE,
    PERM_WRITE,
    ConsumeFrom,
    QueueProgress,
    SendBackOutcome,
    SendBackResult,
    SendResult,
)
from .rules import (
    CONSUME_TIMESTAMP_DEFAULT_AGE_MS,
    DELAY_LEVEL_COUNT,
    PULL_BATCH_MAX,
    RETRY_BASE_DELAY_LEVEL,
    QueueKey,
    batch_shape_problem,
    sharding_queue,
    validate_client_id,
    validate_queue_key,
)
from .send_back import send_back_copy
from .topics import validate_topic
from .transactions import HalfReceipt, TransactionCheck, TransactionState

__all__ = [
    "Administering", "BrokerClient", "Consuming", "Producing", "Transacting",
    "HalfReceipt", "TransactionCheck", "TransactionState",
    "GetResult", "GetStatus", "Message", "PutResult", "PutStatus",
    "PERM_INHERIT", "PERM_READ", "PERM_READ_WRITE", "PERM_WRITE", "ConsumeFrom",
    "QueueProgress", "SendBackOutcome", "SendBackResult", "SendResult",
    "SubscriptionGroupConfig", "TopicConfig", "validate_group",
    "CONSUME_TIMESTAMP_DEFAULT_AGE_MS", "DELAY_LEVEL_COUNT", "PULL_BATCH_MAX",
    "RETRY_BASE_DELAY_LEVEL", "QueueKey", "batch_shape_problem", "sharding_queue",
    "validate_client_id", "validate_queue_key",
    "send_back_copy", "dead_letter_topic", "retry_topic", "validate_topic",
]
