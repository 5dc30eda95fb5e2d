"""``QueueData``: a broker's share of a topic in a route (RocketMQ's ``QueueData``), the one
value both the name server (``namesrv``) and the client (``client.routes``) use. Pure, frozen.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QueueData:
    """A broker's share of a topic: queue counts and permission bits."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


__all__ = ["QueueData"]
