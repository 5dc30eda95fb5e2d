"""``MembershipWatch``: the remote client's side of group membership — listeners, keep-alive
heartbeats and the long-poll that hears of other members joining or leaving.

The embedded broker calls its membership listeners whenever a group's member set changes; the
framework rebalances on that. Remotely, each group has a version on the server
(``MembershipBoard``). This watch keeps the versions it knows for every group this client has
members in and:

- on its own ``register``/``unregister`` calls, fires the listeners when the call changed the
  group (as the embedded broker does, on the caller's thread) and records the new version;
- on one background thread, long-polls ``WatchMembership`` with those versions and fires the
  listeners of each group whose version moved (another process joined, left or expired); a new
  server epoch (the broker restarted) fires every group;
- on the same thread, re-sends every registration each ``heartbeat_interval_ms``, so a member
  stays in its group (``broker.consumer_expiry_ms``) and is re-registered after a broker
  restart even when the caller's own heartbeats are late.

Failures of the background calls are logged and retried after ``RETRY_AFTER_MS``. The thread is
a daemon (it writes nothing) started with the first registration and ended by ``close``.
Thread-safety: every method may be called from any thread (one condition).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from storage_engine.errors import StorageError

log = logging.getLogger(__name__)

Listener = Callable[[str], None]
WatchCall = Callable[[dict[str, int], str | None, int], tuple[dict[str, int], str, bool] | None]
"""(known versions, epoch, timeout ms) → (versions, epoch, busy), or None when cancelled."""
RegisterCall = Callable[[str, str, list[str]], object]

WATCH_TIMEOUT_MS = 10_000
RETRY_AFTER_MS = 1_000


class MembershipWatch:
    """Membership listeners and registrations of one remote client."""

    def __init__(self, watch: WatchCall, register: RegisterCall, *,
                 heartbeat_interval_ms: int, name: str) -> None:
        self._watch = watch
        self._register = register
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self._name = name
        self._condition = threading.Condition()
        self._heartbeat_lock = threading.Lock()  # a keep-alive vs. ``forget``
        self._listeners: list[Listener] = []
        self._registrations: dict[tuple[str, str], list[str]] = {}
        self._versions: dict[str, int] = {}
        self._epoch: str | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(group)`` whenever a watched group's members change."""
        with self._condition:
            self._listeners.append(listener)

    def registered(self, group: str, client_id: str, topics: list[str], *, changed: bool,
                   version: int, epoch: str) -> None:
        """Record a successful register call; fire the listeners when it changed the group."""
        with self._condition:
            self._registrations[(group, client_id)] = topics
            self._adopt_epoch(epoch)
            moved = self._versions.get(group) != version
            self._versions[group] = version
            self._start_thread()
            self._condition.notify_all()
        if changed or moved:
            self._fire([group])

    def forget(self, group: str, client_id: str) -> None:
        """Stop keeping a member alive, before it is unregistered: waits for a keep-alive in
        progress, so none can re-register the member after it left."""
        with self._heartbeat_lock, self._condition:
            self._registrations.pop((group, client_id), None)

    def unregistered(self, group: str, client_id: str, *, version: int, epoch: str) -> None:
        """Record a successful unregister call; fire the listeners when the group changed."""
        with self._condition:
            self._registrations.pop((group, client_id), None)
            self._adopt_epoch(epoch)
            moved = self._versions.get(group) != version
            if any(g == group for g, _ in self._registrations):
                self._versions[group] = version
            else:
                self._versions.pop(group, None)
        if moved:
            self._fire([group])

    def close(self) -> None:
        """Stop the background thread (the caller cancels its open call)."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)

    # ---- the background thread -----------------------------------------------------------------

    def _start_thread(self) -> None:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"postbox-membership-{self._name}")
            self._thread.start()

    def _adopt_epoch(self, epoch: str) -> None:
        """Called under the condition: a new epoch invalidates every version held."""
        if self._epoch != epoch:
            self._epoch = epoch
            self._versions = dict.fromkeys(self._versions, -1)

    def _run(self) -> None:
        next_heartbeat_s = time.monotonic() + self._heartbeat_interval_ms / 1000
        while True:
            with self._condition:
                if self._closed:
                    return
                known, epoch = dict(self._versions), self._epoch
                until_heartbeat_s = next_heartbeat_s - time.monotonic()
                if not known and until_heartbeat_s > 0:
                    self._condition.wait(until_heartbeat_s)
                    continue
            try:
                if until_heartbeat_s <= 0:
                    self._heartbeat()
                    next_heartbeat_s = time.monotonic() + self._heartbeat_interval_ms / 1000
                    continue
                timeout_ms = int(min(WATCH_TIMEOUT_MS, until_heartbeat_s * 1000))
                answer = self._watch(known, epoch, max(1, timeout_ms))
                if answer is not None:
                    self._apply(*answer)
            except StorageError as error:
                if self._closed:
                    return
                log.warning("[remote] membership watch %s: %s; retrying in %d ms", self._name,
                            error, RETRY_AFTER_MS)
                with self._condition:
                    self._condition.wait(RETRY_AFTER_MS / 1000)

    def _heartbeat(self) -> None:
        with self._heartbeat_lock:
            with self._condition:
                registrations = list(self._registrations)
            for key in registrations:
                with self._condition:
                    topics = self._registrations.get(key)
                if topics is not None:
                    self._register(*key, topics)  # re-enters ``registered``

    def _apply(self, versions: dict[str, int], epoch: str, busy: bool) -> None:
        with self._condition:
            self._adopt_epoch(epoch)
            moved = [group for group, version in versions.items()
                     if group in self._versions and self._versions[group] != version]
            for group in moved:
                self._versions[group] = versions[group]
            if busy:  # the server had no wait slot: poll again a little later
                self._condition.wait(RETRY_AFTER_MS / 1000)
        if moved:
            self._fire(moved)

    def _fire(self, groups: list[str]) -> None:
        with self._condition:
            listeners = list(self._listeners)
        for group in groups:
            for listener in listeners:
                try:
                    listener(group)
                except Exception:  # one bad listener must not stop the others
                    log.exception("[remote] membership listener %r failed for group %s",
                                  listener, group)


__all__ = ["MembershipWatch"]
