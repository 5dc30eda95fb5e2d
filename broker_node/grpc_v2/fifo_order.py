"""FIFO pop consumption: message groups in order for a consumer group that consumes orderly.

A consumer group is *FIFO* when its subscription group has ``consumeMessageOrderly`` (the
RocketMQ 5 field, kept in ``SubscriptionGroupConfig.extra``; the gRPC settings answer tells
the client ``fifo``). For such a group, within one queue:

* at most one message of a message group (property ``__SHARDINGKEY``; messages without one
  form one group per queue) is leased at a time: the next is not handed out while an earlier
  one is invisible, whatever consumer asks;
* a message read from the queue while its message group is busy is *held* in the queue state
  (``PopQueue.held``, offset order) and handed out once the group is free, before anything the
  queue holds after it;
* a lease that expires (not acked in its invisible time, a push consumer's nack through
  ``ChangeInvisibleDuration``, a terminated client) is not copied to ``%RETRY%<group>``: it is
  held again at its own offset with its delivery attempt + 1, so it is redelivered before its
  successors (``requeue``); at the group's max delivery attempts it goes to ``%DLQ%<group>``
  instead, and only then its successors are delivered.

Two message groups never block each other, even in one queue (Apache RocketMQ locks the whole
queue while a popped batch is unsettled; this is finer-grained and keeps each message group's
order the same). Held and leased messages both keep the queue's watermark (the committed
offset) below them, so after a restart consumption resumes before every unsettled message, in
order; delivery attempts restart at 1 then.

Thread-safety: ``take`` and ``requeue`` are called with the queue's lock held.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from postbox.storage_engine.broker.broker import Broker
from postbox.storage_engine.formats import PROPERTY_SHARDING_KEY, MessageView

from .pop_queue import PopQueue

ORDERLY_FIELD = "consumeMessageOrderly"


def is_fifo_group(broker: Broker, group: str) -> bool:
    """True when ``group`` consumes orderly (``consumeMessageOrderly`` of its config)."""
    return broker.subscription_group(group).extra.get(ORDERLY_FIELD) is True


def message_group(view: MessageView) -> str:
    """The message group of ``view`` ("" when it has none)."""
    return view.properties.get(PROPERTY_SHARDING_KEY) or ""


def busy_groups(state: PopQueue) -> set[str]:
    """The message groups of ``state`` that have a leased message."""
    return {message_group(lease.view) for lease in state.leases.values()}


def take(state: PopQueue, need: int, pulled: list[MessageView],
         lease: Callable[[MessageView], None]) -> None:
    """Hand out (``lease``) up to ``need`` messages: held ones first, then ``pulled`` (read
    from the queue's scan offset on), at most one per free message group; the others of
    ``pulled`` are held."""
    busy = busy_groups(state)
    given = 0
    for offset in sorted(state.held):
        view = state.held[offset]
        key = message_group(view)
        if key in busy or given >= need:
            busy.add(key)  # successors of a held message wait behind it
            continue
        del state.held[offset]
        busy.add(key)
        lease(view)
        given += 1
    for view in pulled:
        key = message_group(view)
        if key in busy or given >= need:
            busy.add(key)
            state.held[view.queue_offset] = view
            continue
        busy.add(key)
        lease(view)
        given += 1


def release(state: PopQueue, limit: int) -> list[MessageView]:
    """Up to ``limit`` held messages, oldest first, no longer held (the group stopped
    consuming orderly)."""
    return [state.held.pop(offset) for offset in sorted(state.held)[:limit]]


def requeue(state: PopQueue, offset: int, view: MessageView) -> None:
    """Hold ``view`` again at ``offset`` for its next delivery attempt (its reconsume count
    + 1), removing its lease."""
    again = copy.copy(view)
    again.reconsume_count = view.reconsume_count + 1
    state.leases.pop(offset, None)
    state.held[offset] = again


__all__ = ["ORDERLY_FIELD", "busy_groups", "is_fifo_group", "message_group", "release",
           "requeue", "take"]
