"""``ConsumerRegistry``: the live members of each consumer group, from their heartbeats.

Client-side rebalancing (reference §12.5) needs every member's sorted list of client ids. A
member is added or refreshed by a heartbeat (``heartbeat``), removed by ``unregister``, and
dropped once it sent no heartbeat for ``expiry_ms`` (``broker.consumer_expiry_ms``, RocketMQ's
channel expiry). Expiry is lazy: ``heartbeat``, ``members`` and ``expire`` (which the broker's
persist service calls about once a second) remove stale members. A member that leaves releases
its orderly queue locks; membership listeners are then called outside the lock.

Invariants: a group with no members is removed; only a change of the member set (ids) counts
as a membership change — a member that changes its subscribed topics does not.

Thread-safety: every method may be called from any thread (one lock). Nothing survives a
restart: after one, consumers re-register with their next heartbeat.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..clock import Clock
from ..contract.rules import validate_client_id
from .queue_locks import QueueLockTable

log = logging.getLogger(__name__)

MembershipListener = Callable[[str], None]  # called with the group whose members changed


@dataclass(frozen=True, slots=True)
class Member:
    """One consumer client of a group."""

    client_id: str
    topics: frozenset[str]
    last_heartbeat_ms: int


class ConsumerRegistry:
    """Members of every group, keyed by group then client id.

    Args:
        expiry_ms: a member without a heartbeat for longer than this leaves its group.
        clock: heartbeat and expiry time.
        queue_locks: the orderly locks a leaving member releases.
    """

    def __init__(self, expiry_ms: int, clock: Clock, queue_locks: QueueLockTable) -> None:
        self._expiry_ms = expiry_ms
        self._clock = clock
        self._queue_locks = queue_locks
        self._lock = threading.Lock()
        self._groups: dict[str, dict[str, Member]] = {}
        self._listeners: list[MembershipListener] = []

    def add_listener(self, listener: MembershipListener) -> None:
        """Call ``listener(group)`` (outside every lock) whenever a member set changes."""
        self._listeners.append(listener)

    def heartbeat(self, group: str, client_id: str, topics: Iterable[str]) -> bool:
        """Add or refresh a member; True when the group's member set changed (a new member,
        or stale members expired on the way)."""
        now_ms = self._clock.now_ms()
        member = Member(client_id, frozenset(topics), now_ms)
        with self._lock:
            expired = self._expire_group(group, now_ms)
            members = self._groups.setdefault(group, {})
            added = client_id not in members
            members[client_id] = member
        changed = added or bool(expired)
        self._left(group, expired, changed)
        return changed

    def unregister(self, group: str, client_id: str) -> bool:
        """Remove a member; False when it was not registered."""
        with self._lock:
            members = self._groups.get(group)
            if members is None or members.pop(client_id, None) is None:
                return False
            if not members:
                del self._groups[group]
        self._left(group, [client_id], True)
        return True

    def members(self, group: str) -> list[str]:
        """Live client ids of ``group``, sorted lexicographically (stale ones expire now)."""
        with self._lock:
            expired = self._expire_group(group, self._clock.now_ms())
            ids = sorted(self._groups.get(group, ()))
        self._left(group, expired, bool(expired))
        return ids

    def topics(self, group: str) -> set[str]:
        """Every topic some member of ``group`` subscribes to."""
        with self._lock:
            return {topic for member in self._groups.get(group, {}).values()
                    for topic in member.topics}

    def groups(self) -> list[str]:
        """Groups with at least one member (stale members included until checked)."""
        with self._lock:
            return list(self._groups)

    def expire(self, now_ms: int) -> int:
        """Drop every stale member, notify; return how many groups changed."""
        with self._lock:
            changed = {group: expired for group in list(self._groups)
                       if (expired := self._expire_group(group, now_ms))}
        for group, expired in changed.items():
            log.info("[consumers] group %s: %s expired (no heartbeat for %d ms)", group,
                     expired, self._expiry_ms)
            self._left(group, expired, True)
        return len(changed)

    def _expire_group(self, group: str, now_ms: int) -> list[str]:
        """Remove the group's stale members (called under the lock); return their ids."""
        members = self._groups.get(group)
        if not members:
            return []
        oldest_live_ms = now_ms - self._expiry_ms
        expired = [client_id for client_id, member in members.items()
                   if member.last_heartbeat_ms < oldest_live_ms]
        for client_id in expired:
            del members[client_id]
        if not members:
            del self._groups[group]
        return expired

    def _left(self, group: str, client_ids: list[str], notify: bool) -> None:
        """Release the queue locks of members that left, then tell the listeners."""
        for client_id in client_ids:
            self._queue_locks.release_client(group, client_id)
        if not notify:
            return
        for listener in list(self._listeners):
            try:
                listener(group)
            except Exception:  # one bad listener must not stop the others or the caller
                log.exception("[consumers] membership listener %r failed for group %s",
                              listener, group)


__all__ = ["ConsumerRegistry", "Member", "MembershipListener", "validate_client_id"]
