"""``LeaseExpiryService``: what happens to a leased message whose invisible time ran out.

Each run takes the due deadlines from the ``LeaseBook`` (at most ``BATCH_MAX``) and, for every
lease that is still live under the token of that deadline:

1. an *auto-renew* lease (a push consumer's receive) whose client is still alive (a call within
   ``ClientSessions.alive_ms``, no ``NotifyClientTermination``) and whose first delivery is less
   than ``renew_max_ms`` ago is renewed for ``renew_ms`` under the same token (the client keeps
   its receipt handle);
2. otherwise the message is *redirected*: delivery attempt = reconsume count + 1; below the
   group's max attempts (subscription group ``retry_max_times`` + 1) a copy goes to
   ``%RETRY%<group>`` with reconsume count + 1 and no delay (the invisible time was the back-off);
   at max attempts ``Broker.send_back(delay_level=-1)`` puts it in ``%DLQ%<group>`` with a
   ``DLQ_REASON``. Only after the copy is stored is the lease removed and the group's offset
   committed past it; a failed put (disk full, store closing) keeps the lease and retries it
   ``REDIRECT_RETRY_MS`` later, so an expiry never loses a message (a crash between the put and
   the commit delivers it twice).

A FIFO consumer group's message below max attempts is not copied anywhere: it is held again in
its queue with attempt + 1 (``fifo_order.requeue``) and redelivered before its successors;
at max attempts it is dead-lettered as above.

The lease is marked ``redirecting`` during the put, so an ack racing with the expiry is refused
(``INVALID_RECEIPT_HANDLE``) rather than acknowledged and redelivered.

Thread-safety: ``run_once`` is called by the service thread (or a test); it takes each queue's
lock only to inspect and update, never while writing to the store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from postbox.storage_engine.broker.broker import Broker
from postbox.storage_engine.clock import Clock
from postbox.storage_engine.contract.send_back import send_back_copy
from postbox.storage_engine.errors import StorageError
from postbox.storage_engine.formats import MessageView
from postbox.storage_engine.formats.topic_names import retry_topic
from postbox.storage_engine.service import Service

from . import fifo_order
from .lease_book import LeaseBook
from .pop_queue import Lease, PopQueue

log = logging.getLogger(__name__)

BATCH_MAX = 256
"""Due deadlines handled per run."""
REDIRECT_RETRY_MS = 1000
"""Wait before retrying a redirect whose put failed."""


def max_attempts(broker: Broker, group: str) -> int:
    """How many deliveries a message gets before the DLQ (``retry_max_times`` + 1)."""
    return broker.subscription_group(group).retry_max_times + 1


def redirect(broker: Broker, group: str, view: MessageView, reason: str) -> bool:
    """Store the retry copy of ``view`` (no delay) or, at max attempts, its dead letter; True
    when it was dead-lettered."""
    attempts = view.reconsume_count + 1
    if attempts >= max_attempts(broker, group):
        broker.send_back(group, view, delay_level=-1, reason=f"{reason} after {attempts} "
                                                               "deliveries")
        return True
    broker.send(send_back_copy(view, retry_topic(group), delay_level=0))
    return False


class LeaseExpiryService(Service):
    """Renews or redirects leases whose deadline passed."""

    name = "lease-expiry"
    interval_ms = 50

    def __init__(self, broker: Broker, book: LeaseBook, clock: Clock, *,
                 client_alive: Callable[[str, int], bool], renew_ms: int,
                 renew_max_ms: int) -> None:
        super().__init__(clock)
        self._broker = broker
        self._book = book
        self._client_alive = client_alive
        self._renew_ms = renew_ms
        self._renew_max_ms = renew_max_ms
        self.redirected_count = 0
        self.requeued_count = 0
        self.dead_lettered_count = 0

    def run_once(self, now_ms: int) -> int:
        """Handle up to ``BATCH_MAX`` due deadlines; returns how many leases were handled."""
        handled = 0
        for state, offset, token in self._book.due(now_ms, BATCH_MAX):
            with state.lock:
                lease = state.live_lease(offset, token)
                if lease is None or lease.deadline_ms > now_ms:
                    continue  # settled, or renewed/extended since this entry was scheduled
                if self._renewable(lease, now_ms):
                    lease.deadline_ms = now_ms + self._renew_ms
                    self._book.schedule(state, offset, lease)
                    handled += 1
                    continue
                if self._requeue(state, offset, lease):
                    handled += 1
                    continue
                lease.redirecting = True
            self._redirect(state, offset, lease, now_ms)
            handled += 1
        return handled

    def _renewable(self, lease: Lease, now_ms: int) -> bool:
        return (lease.auto_renew and lease.client_id is not None
                and now_ms - lease.first_delivery_ms < self._renew_max_ms
                and self._client_alive(lease.client_id, now_ms))

    def _requeue(self, state: PopQueue, offset: int, lease: Lease) -> bool:
        """A FIFO group's message below its max attempts: held again for redelivery before
        its successors (``fifo_order.requeue``); waiting receives are woken. Call with the
        queue's lock held."""
        if not fifo_order.is_fifo_group(self._broker, state.group):
            return False
        if lease.view.reconsume_count + 1 >= max_attempts(self._broker, state.group):
            return False  # to the DLQ through ``_redirect``
        fifo_order.requeue(state, offset, lease.view)
        self.requeued_count += 1
        self._broker.wake_waiters()
        return True

    def _redirect(self, state: PopQueue, offset: int, lease: Lease, now_ms: int) -> None:
        try:
            dead = redirect(self._broker, state.group, lease.view,
                            "not acknowledged within its invisible time")
        except Exception as error:  # never ends the loop: the lease is kept and retried
            log.warning("[pop] group %s: redirect of %s@%d:%d failed (%s); retry in %d ms",
                        state.group, state.topic, state.queue_id, offset, error,
                        REDIRECT_RETRY_MS, exc_info=not isinstance(error, StorageError))
            with state.lock:
                lease.redirecting = False
                lease.deadline_ms = now_ms + REDIRECT_RETRY_MS
                self._book.schedule(state, offset, lease)
            return
        with state.lock:
            state.leases.pop(offset, None)
            self._book.commit(state)
            held = bool(state.held)
        if held:  # a FIFO message group is free again
            self._broker.wake_waiters()
        if dead:
            self.dead_lettered_count += 1
        else:
            self.redirected_count += 1


__all__ = ["BATCH_MAX", "LeaseExpiryService", "max_attempts", "redirect"]
