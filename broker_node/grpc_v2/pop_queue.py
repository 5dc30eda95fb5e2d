"""``PopQueue``: pop-style consumption state of one consumer group on one queue.

A pop consumer does not own queues: any member may receive from any queue, and each message it
receives is *leased* to it for an invisible duration. This module keeps, per (group, topic,
queue id):

* ``scan_offset`` — the next consume-queue offset no receive has looked at yet;
* ``leases`` — offset → ``Lease`` for every message handed out and not yet settled (acked,
  redirected to the retry topic / DLQ, or dead-lettered by the client);
* ``held`` — offset → message read but not handed out yet, only for a FIFO consumer group
  (``fifo_order``): its message group had a message in flight.

Invariant: every offset below ``scan_offset`` that has no lease and is not held is settled
(acked, redirected, or skipped by the tag filter). So the offset the group may commit — its
*watermark* — is the smallest leased or held offset, or ``scan_offset`` when there is none;
committing it never skips a message that is still in flight. After a restart the leases are
gone and consumption resumes at the committed watermark: messages that were in flight (and any
acked above the lowest one in flight) are delivered again — at least once, never lost.

Thread-safety: callers hold ``lock`` around every use of a ``PopQueue`` (the pop service
does). Nothing here survives a crash except through the offsets the owner commits.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from postbox.storage_engine.formats import MessageView


@dataclass
class Lease:
    """One message handed out and not settled yet."""

    view: MessageView
    token: str
    deadline_ms: int
    client_id: str | None
    auto_renew: bool
    first_delivery_ms: int
    redirecting: bool = False
    """Being moved to the retry topic / DLQ: no longer acknowledgeable."""


class PopQueue:
    """Leases and scan position of one (group, topic, queue id)."""

    __slots__ = ("group", "topic", "queue_id", "lock", "scan_offset", "leases", "held",
                 "committed_offset")

    def __init__(self, group: str, topic: str, queue_id: int, start_offset: int,
                 committed_offset: int | None) -> None:
        self.group = group
        self.topic = topic
        self.queue_id = queue_id
        self.lock = threading.Lock()
        self.scan_offset = start_offset
        self.leases: dict[int, Lease] = {}
        self.held: dict[int, MessageView] = {}
        self.committed_offset = committed_offset

    @property
    def key(self) -> tuple[str, str, int]:
        """(group, topic, queue id)."""
        return (self.group, self.topic, self.queue_id)

    def watermark(self) -> int:
        """The offset the group may commit: smallest leased or held offset, else
        ``scan_offset``."""
        if not self.leases and not self.held:
            return self.scan_offset
        return min(min(self.leases, default=self.scan_offset),
                   min(self.held, default=self.scan_offset), self.scan_offset)

    def live_lease(self, offset: int, token: str) -> Lease | None:
        """The lease ``token`` holds on ``offset``, if it is still live (not redirecting)."""
        lease = self.leases.get(offset)
        if lease is None or lease.token != token or lease.redirecting:
            return None
        return lease


__all__ = ["Lease", "PopQueue"]
