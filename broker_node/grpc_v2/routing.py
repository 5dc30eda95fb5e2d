"""Routes and assignments: which queues a client sees and where they live. Pure.

The server is one broker (name ``BROKER_NAME``, id 0 — the master, which clients require) whose
address is the access point the client used (the ``endpoints`` of its request), else the
server's advertised address; so a client reaching the server through a forwarded port or a
DNS name keeps using that.

* ``route_queues``: one ``MessageQueue`` per queue id of the topic (``max(read, write)``
  queues), READ/WRITE by the topic's ``perm`` bits and the queue's position among its read and
  write queues, accepting NORMAL, FIFO and DELAY messages. An unknown topic is answered with
  the queues auto-creation would give it (``broker.default_topic_queue_count``) without creating
  anything: the first send does.
* ``pop_assignment``: pop consumers are not given queues; every member receives from the whole
  topic, so the assignment is one queue with id -1 on this broker (RocketMQ's proxy does the
  same in pop mode), and a receive for it pops from every queue of the topic.
"""

from __future__ import annotations

from postbox.storage_engine.contract.config_beans import TopicConfig
from postbox.storage_engine.contract.model import PERM_READ, PERM_WRITE

from .protocol import definition

BROKER_NAME = "postbox"
ALL_QUEUES = -1
ACCEPTED_TYPES = (definition.NORMAL, definition.FIFO, definition.DELAY, definition.TRANSACTION)


def endpoints_for(requested: definition.Endpoints,
                  advertised: tuple[str, int]) -> definition.Endpoints:
    """The requested access point when it names an address, else the advertised one."""
    if requested.addresses:
        answer = definition.Endpoints()
        answer.CopyFrom(requested)
        return answer
    host, port = advertised
    scheme = definition.IPv6 if ":" in host else definition.IPv4
    return definition.Endpoints(scheme=scheme, addresses=[definition.Address(host=host,
                                                                             port=port)])


def _broker(endpoints: definition.Endpoints) -> definition.Broker:
    return definition.Broker(name=BROKER_NAME, id=0, endpoints=endpoints)


def _permission(perm: int, readable: bool, writable: bool) -> int:
    read = readable and bool(perm & PERM_READ)
    write = writable and bool(perm & PERM_WRITE)
    if read and write:
        return definition.READ_WRITE
    if read:
        return definition.READ
    if write:
        return definition.WRITE
    return definition.NONE


def route_queues(topic: str, config: TopicConfig | None, default_queue_count: int,
                 endpoints: definition.Endpoints) -> list[definition.MessageQueue]:
    """The topic's queues as a RocketMQ 5 route."""
    if config is None:
        read_count = write_count = default_queue_count
        perm = PERM_READ | PERM_WRITE
    else:
        read_count, write_count, perm = (config.read_queue_nums, config.write_queue_nums,
                                         config.perm)
    broker = _broker(endpoints)
    return [definition.MessageQueue(
        topic=definition.Resource(name=topic), id=queue_id,
        permission=_permission(perm, queue_id < read_count, queue_id < write_count),
        broker=broker, accept_message_types=ACCEPTED_TYPES)
        for queue_id in range(max(read_count, write_count))]


def pop_assignment(topic: str, endpoints: definition.Endpoints) -> list[definition.Assignment]:
    """The one assignment every pop consumer of ``topic`` gets."""
    queue = definition.MessageQueue(
        topic=definition.Resource(name=topic), id=ALL_QUEUES, permission=definition.READ_WRITE,
        broker=_broker(endpoints), accept_message_types=ACCEPTED_TYPES)
    return [definition.Assignment(message_queue=queue)]


__all__ = ["ALL_QUEUES", "BROKER_NAME", "endpoints_for", "pop_assignment", "route_queues"]
