"""The broker's internal topic and group names, declared once (reference §1.6, §10, §11). Pure.

They live in ``formats``, the lowest room, because the store's own rules need them (a retry
topic's longer name limit, a copy's original topic) and every room above may import it.

RocketMQ reserves a few names: every consumer group has a retry topic ``%RETRY%group`` and a
dead-letter topic ``%DLQ%group``; delayed messages wait in ``SCHEDULE_TOPIC_XXXX``; a route for
a topic nobody created yet is taken from ``TBW102``; the broker's own topics start with
``RMQ_SYS_`` (the transaction half topic among them). The store, the broker, the network server
and client, the framework, the reconciliation and the CLI all take these names from here.

``is_internal_topic`` is what a broker refuses to send to (the delay topic and ``RMQ_SYS_*``);
``is_system_resource`` is the wider set a client never puts in a namespace (every topic and
group an Apache broker keeps for itself).
"""

from __future__ import annotations

RETRY_TOPIC_PREFIX = "%RETRY%"
DLQ_TOPIC_PREFIX = "%DLQ%"
DELAY_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"
"""Where timer messages (delivery at any moment) wait, RocketMQ 5's timer topic."""
AUTO_CREATE_TOPIC = "TBW102"
"""The topic whose route a producer borrows for a topic the name servers do not know yet."""
SYSTEM_TOPIC_PREFIX = "RMQ_SYS_"
TRANSACTION_HALF_TOPIC = SYSTEM_TOPIC_PREFIX + "TRANS_HALF_TOPIC"
"""Half (prepared) transactional messages wait here, queue 0, until committed or rolled back."""
TRANSACTION_OP_TOPIC = SYSTEM_TOPIC_PREFIX + "TRANS_OP_HALF_TOPIC"
"""The op log of the half topic: one record (tag ``d``) per ended half message."""
TRANSACTION_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
"""Half messages whose producer never answered ``transactionCheckMax`` checks are kept here."""
TRANSACTION_GROUP = "CID_RMQ_SYS_TRANS"
"""The group whose consumer offsets record how far the half and op topics were processed."""

_SYSTEM_TOPICS = frozenset({
    AUTO_CREATE_TOPIC, DELAY_TOPIC, "BenchmarkTest", "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC",
    TRANSACTION_CHECK_MAX_TIME_TOPIC, "DefaultCluster",
})
_SYSTEM_PREFIXES = (SYSTEM_TOPIC_PREFIX, SYSTEM_TOPIC_PREFIX.lower(), "%SYS%")
_SYSTEM_GROUPS = frozenset({
    "TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "__MONITOR_CONSUMER", "CLIENT_INNER_PRODUCER",
    "SELF_TEST_P_GROUP", "SELF_TEST_C_GROUP", "CID_ONS-HTTP-PROXY", "CID_ONSAPI_PERMISSION",
    "CID_ONSAPI_OWNER", "CID_ONSAPI_PULL", "CID_SYS_RMQ_TRANS", "DEFAULT_CONSUMER",
    "DEFAULT_PRODUCER",
})
_SYSTEM_GROUP_PREFIXES = ("CID_" + SYSTEM_TOPIC_PREFIX, "CID_SYS_")


def retry_topic(consumer_group: str) -> str:
    """``%RETRY%group``."""
    return RETRY_TOPIC_PREFIX + consumer_group


def dead_letter_topic(consumer_group: str) -> str:
    """``%DLQ%group``."""
    return DLQ_TOPIC_PREFIX + consumer_group


def is_retry_topic(topic: str) -> bool:
    """Whether ``topic`` is a group's retry topic."""
    return topic.startswith(RETRY_TOPIC_PREFIX)


def is_dead_letter_topic(topic: str) -> bool:
    """Whether ``topic`` is a group's dead-letter topic."""
    return topic.startswith(DLQ_TOPIC_PREFIX)


def is_system_group_topic(topic: str) -> bool:
    """Whether ``topic`` is a retry or dead-letter topic."""
    return topic.startswith((RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX))


def is_internal_topic(topic: str) -> bool:
    """Whether ``topic`` is one of the broker's own (the delay and timer topics,
    ``RMQ_SYS_*``): nobody sends to it or is granted it by a wildcard."""
    return topic in (DELAY_TOPIC, TIMER_TOPIC) or topic.startswith(SYSTEM_TOPIC_PREFIX)


def is_system_group(name: str) -> bool:
    """Whether ``name`` is one of the groups an Apache broker keeps for itself."""
    return name in _SYSTEM_GROUPS or name.startswith(_SYSTEM_GROUP_PREFIXES)


def is_system_resource(name: str) -> bool:
    """Whether ``name`` is a broker-owned topic or group that is never namespaced."""
    return name in _SYSTEM_TOPICS or name.startswith(_SYSTEM_PREFIXES)


__all__ = [
    "AUTO_CREATE_TOPIC", "DELAY_TOPIC", "DLQ_TOPIC_PREFIX", "RETRY_TOPIC_PREFIX",
    "SYSTEM_TOPIC_PREFIX", "TIMER_TOPIC", "TRANSACTION_CHECK_MAX_TIME_TOPIC", "TRANSACTION_GROUP",
    "TRANSACTION_HALF_TOPIC", "TRANSACTION_OP_TOPIC", "dead_letter_topic", "is_dead_letter_topic",
    "is_internal_topic", "is_retry_topic", "is_system_group", "is_system_group_topic",
    "is_system_resource", "retry_topic",
]
