"""The order service: an order and its message, in one transaction."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import CursorResult, insert, update
from sqlalchemy.orm import Session

from postbox import outbox
from postbox.outbox.clock import utc_now

from .models import orders

TOPIC = "orders"
TAG = "created"


def place_order(session: Session, customer: str, amount_cents: int, *,
                fault: str | None = None) -> tuple[int, str]:
    """Insert an order and send its ``orders`` message in the session's open transaction;
    returns (order id, message id). ``fault`` marks the order for ``faults.FaultInjector``
    (``lose``, ``flaky``, ``poison``)."""
    now = utc_now()
    inserted = session.execute(insert(orders).values(
        customer=customer, amount_cents=amount_cents, fault=fault, message_id="pending",
        created_at=now))
    key = cast("CursorResult[Any]", inserted).inserted_primary_key  # an INSERT's result
    assert key is not None  # a one-row INSERT has one
    order_id = key[0]
    body = {"order_id": order_id, "customer": customer, "amount_cents": amount_cents}
    if fault:
        body["fault"] = fault
    message_id = outbox.send(session, TOPIC, body, tags=TAG, keys=[f"order-{order_id}"])
    session.execute(update(orders).where(orders.c.id == order_id).values(
        message_id=message_id))
    return order_id, message_id


__all__ = ["TAG", "TOPIC", "place_order"]
