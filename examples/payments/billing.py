"""The billing consumer: one ledger row per order, exactly once."""

from __future__ import annotations

import json

from sqlalchemy import insert
from sqlalchemy.orm import Session

from postbox.framework import App, ConsumedMessage
from postbox.outbox.clock import utc_now

from .faults import FLAKY, POISON
from .models import ledger
from .orders import TAG, TOPIC

GROUP = "billing"


class PaymentDeclinedError(Exception):
    """The (simulated) card processor refused the payment."""


def bill(message: ConsumedMessage, session: Session) -> None:
    """Write the ledger row of the order in ``message`` (in the confirming transaction)."""
    order = json.loads(message.body)
    fault = order.get("fault")
    if fault == POISON:
        raise PaymentDeclinedError(f"order {order['order_id']}: card declined permanently")
    if fault == FLAKY and message.reconsume_count == 0:
        raise PaymentDeclinedError(f"order {order['order_id']}: processor timed out")
    session.execute(insert(ledger).values(order_id=order["order_id"],
                                          amount_cents=order["amount_cents"],
                                          message_id=message.msg_id, billed_at=utc_now()))


def register_billing(app: App, *, reconsume_count_max: int = 3) -> None:
    """Register the billing handler on ``app``."""
    app.handler(topic=TOPIC, consumer_group=GROUP, tags=TAG, consume_from="first",
                idempotent=True, reconsume_count_max=reconsume_count_max)(bill)


__all__ = ["GROUP", "PaymentDeclinedError", "bill", "register_billing"]
