"""``PopService``: RocketMQ 5 pop consumption over the embedded broker.

``receive`` hands out up to ``batch_size`` messages of a topic to one consumer of a group:
it looks at the group's retry queues (``%RETRY%<group>``) first, then every queue of the topic
(starting at a rotating queue so receivers share them), reads from each queue's
``scan_offset`` through ``Broker.pull`` (tag filter on the topic's queues; a retry message is
handed out to a receive on any topic of the group and shows its original topic), and leases
each message for the invisible duration (``PopQueue``). When nothing is there it long-polls:
``Broker.wait_for_arrival`` on those queues, in chunks of ``WAIT_CHUNK_MS`` so that a
cancelled call or a stopping server ends the wait quickly.

``ack`` settles a lease, ``change_invisible`` moves its deadline under a new token,
``forward_to_dead_letter`` stores the dead letter and settles it, ``client_gone`` expires a
terminated client's auto-renew leases at once so they are redelivered promptly. Every change
commits the queue's watermark as the group's consumer offset (``LeaseBook.commit``).
Expiry is ``LeaseExpiryService``.

A FIFO consumer group (``fifo_order``) gets at most one message of a message group at a time,
in queue order; a failed one is redelivered before its successors.

Limits: ``batch_size`` ≤ ``BATCH_SIZE_MAX``; at most ``leases_per_queue_max`` open leases and
held messages per queue (a queue at the limit reads nothing new until leases settle).

Thread-safety: every method may be called from any thread (gRPC worker threads).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from postbox.storage_engine.broker.broker import Broker
from postbox.storage_engine.clock import Clock
from postbox.storage_engine.contract.message import GetStatus
from postbox.storage_engine.formats import MessageView
from postbox.storage_engine.formats.topic_names import retry_topic

from . import fifo_order
from .lease_book import LeaseBook
from .lease_expiry import redirect
from .pop_queue import Lease, PopQueue
from .receipt_handle import ReceiptHandle, new_token

log = logging.getLogger(__name__)

BATCH_SIZE_MAX = 32
"""Most messages one receive hands out (RocketMQ's proxy caps at 32 too)."""
LEASES_PER_QUEUE_MAX = 4096
WAIT_CHUNK_MS = 1000
"""Longest single wait of a long-polling receive before it re-checks everything."""
_CORRECTED = (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY,
              GetStatus.NO_MATCHED_MESSAGE)


@dataclass(frozen=True)
class ReceiveRequest:
    """What one ``ReceiveMessage`` call asks for."""

    group: str
    topic: str
    tags: str | None
    batch_size: int
    invisible_ms: int
    client_id: str | None
    auto_renew: bool


@dataclass(frozen=True)
class Delivery:
    """A leased message and the handle that settles it."""

    view: MessageView
    handle: ReceiptHandle
    invisible_ms: int


class PopService:
    """Receive / ack / change-invisible / dead-letter over a ``LeaseBook``."""

    def __init__(self, broker: Broker, book: LeaseBook, clock: Clock, *,
                 leases_per_queue_max: int = LEASES_PER_QUEUE_MAX) -> None:
        self._broker = broker
        self._book = book
        self._clock = clock
        self._leases_max = leases_per_queue_max
        self._rotation = itertools.count()

    # ---- receive -----------------------------------------------------------------------------

    def receive(self, request: ReceiveRequest, wait_ms: int,
                cancel: Callable[[], bool]) -> list[Delivery]:
        """Lease up to ``request.batch_size`` messages, waiting up to ``wait_ms`` for some."""
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            deliveries = self.receive_now(request)
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if deliveries or remaining_ms <= 0 or cancel():
                return deliveries
            positions = {(state.topic, state.queue_id): state.scan_offset
                         for state in self._candidates(request)
                         if len(state.leases) + len(state.held) < self._leases_max}
            if positions:
                self._broker.wait_for_arrival(positions, min(remaining_ms, WAIT_CHUNK_MS),
                                              cancel)
            else:  # every queue is at its lease limit: wait for acks
                time.sleep(min(remaining_ms, WAIT_CHUNK_MS) / 1000)

    def receive_now(self, request: ReceiveRequest) -> list[Delivery]:
        """Lease what is there now (no waiting)."""
        deliveries: list[Delivery] = []
        fifo = fifo_order.is_fifo_group(self._broker, request.group)
        for state in self._candidates(request):
            need = request.batch_size - len(deliveries)
            if need <= 0:
                break
            tags = None if state.topic != request.topic else request.tags
            deliveries.extend(self._take(state, need, tags, request, fifo))
        return deliveries

    def _candidates(self, request: ReceiveRequest) -> list[PopQueue]:
        """Retry queues of the group first, then the topic's queues from a rotating start."""
        retry = retry_topic(request.group)
        retry_ids = self._broker.queue_ids(retry) or [0]
        topic_ids = self._broker.queue_ids(request.topic) or list(
            range(self._broker.store.config.broker.default_topic_queue_count))
        start = next(self._rotation) % len(topic_ids)
        ordered = topic_ids[start:] + topic_ids[:start]
        return ([self._book.queue(request.group, retry, queue_id) for queue_id in retry_ids]
                + [self._book.queue(request.group, request.topic, queue_id)
                   for queue_id in ordered])

    def _take(self, state: PopQueue, need: int, tags: str | None,
              request: ReceiveRequest, fifo: bool = False) -> list[Delivery]:
        with state.lock:
            if not fifo and state.held:  # held while the group consumed orderly: first
                messages = fifo_order.release(state, need)
            else:
                room = self._leases_max - len(state.leases) - len(state.held)
                if room <= 0 and not state.held:
                    return []
                messages = self._read(state, min(need, room), tags, request) if room > 0 else []
            now_ms = self._clock.now_ms()
            deliveries: list[Delivery] = []

            def lease_out(view: MessageView) -> None:
                lease = Lease(view, new_token(), now_ms + request.invisible_ms,
                              request.client_id, request.auto_renew, now_ms)
                state.leases[view.queue_offset] = lease
                self._book.schedule(state, view.queue_offset, lease)
                deliveries.append(Delivery(view, self._handle(state, view.queue_offset, lease),
                                           request.invisible_ms))

            if fifo:
                fifo_order.take(state, need, messages, lease_out)
            else:
                for view in messages:
                    lease_out(view)
            self._book.commit(state)
            return deliveries

    def _read(self, state: PopQueue, count: int, tags: str | None,
              request: ReceiveRequest) -> list[MessageView]:
        """Up to ``count`` messages from the queue's scan offset, which moves past them."""
        result = self._broker.pull(request.group, state.topic, state.queue_id,
                                   state.scan_offset, count, tags=tags)
        if result.status is GetStatus.FOUND:
            state.scan_offset = max(state.scan_offset, result.next_offset)
        elif result.status in _CORRECTED:
            state.scan_offset = result.next_offset
        return result.messages

    @staticmethod
    def _handle(state: PopQueue, offset: int, lease: Lease) -> ReceiptHandle:
        return ReceiptHandle(state.topic, state.queue_id, offset, lease.token)

    # ---- settle ------------------------------------------------------------------------------

    def ack(self, group: str, handle: ReceiptHandle) -> bool:
        """Settle a delivery; False when the handle is not a live lease of ``group``."""
        state = self._book.find(group, handle.topic, handle.queue_id)
        if state is None:
            return False
        with state.lock:
            if state.live_lease(handle.offset, handle.token) is None:
                return False
            del state.leases[handle.offset]
            self._book.commit(state)
            held = bool(state.held)
        if held:  # a FIFO message group is free again
            self._broker.wake_waiters()
        return True

    def change_invisible(self, group: str, handle: ReceiptHandle,
                         invisible_ms: int) -> ReceiptHandle | None:
        """Make a delivery invisible for ``invisible_ms`` from now (no auto-renew from then
        on), under a new handle; None when the handle is not a live lease."""
        state = self._book.find(group, handle.topic, handle.queue_id)
        if state is None:
            return None
        with state.lock:
            lease = state.live_lease(handle.offset, handle.token)
            if lease is None:
                return None
            lease.token = new_token()
            lease.deadline_ms = self._clock.now_ms() + invisible_ms
            lease.auto_renew = False
            self._book.schedule(state, handle.offset, lease)
            return self._handle(state, handle.offset, lease)

    def forward_to_dead_letter(self, group: str, handle: ReceiptHandle, reason: str) -> bool:
        """Store the delivery's dead letter in ``%DLQ%<group>`` and settle it; False when the
        handle is not a live lease."""
        state = self._book.find(group, handle.topic, handle.queue_id)
        if state is None:
            return False
        with state.lock:
            lease = state.live_lease(handle.offset, handle.token)
            if lease is None:
                return False
            lease.redirecting = True
        try:
            self._broker.send_back(group, lease.view, delay_level=-1, reason=reason)
        except BaseException:
            with state.lock:
                lease.redirecting = False
            raise
        with state.lock:
            state.leases.pop(handle.offset, None)
            self._book.commit(state)
            held = bool(state.held)
        if held:
            self._broker.wake_waiters()
        return True

    def client_gone(self, client_id: str) -> int:
        """Expire the auto-renew leases of a terminated client now; returns how many."""
        now_ms = self._clock.now_ms()
        expired = 0
        for state in self._book.queues():
            with state.lock:
                for offset, lease in state.leases.items():
                    if lease.client_id == client_id and lease.auto_renew \
                            and not lease.redirecting:
                        lease.auto_renew = False
                        lease.deadline_ms = now_ms
                        self._book.schedule(state, offset, lease)
                        expired += 1
        return expired


__all__ = ["BATCH_SIZE_MAX", "Delivery", "PopService", "ReceiveRequest", "redirect"]
