"""The soak's business tables and settings shared by the harness and its child processes."""

from __future__ import annotations

from sqlalchemy import Column, Float, Integer, MetaData, String, Table

from postbox.outbox import RelayOptions, ResendRules

TOPIC = "soak-orders"
LEDGER_GROUP = "soak-ledger"
"""Two consumer processes, a sync ``idempotent=True`` handler."""
SHIPPING_GROUP = "soak-shipping"
"""One consumer process, an ``async def`` ``idempotent=True`` handler."""
GROUPS = (LEDGER_GROUP, SHIPPING_GROUP)

RULES = ResendRules(max_send_count=5, grace_ms=2_000, backoff_schedule_ms=(3_000,),
                    recheck_ms=1_000, lease_ms=5_000, consumer_groups={TOPIC: GROUPS})
"""Short resend rules, so the soak's faults run past their horizon (``RULES.horizon()``)."""
RELAY_OPTIONS = RULES.relay_options(RelayOptions(
    poll_interval_ms=200, lease_ms=5_000, outage_backoff_ms=200, outage_backoff_max_ms=2_000))
"""A relay that polls often (its producers are other processes) and whose claims expire soon
after it is killed."""

business = MetaData()
orders = Table(
    "soak_orders", business,
    Column("order_no", String(64), primary_key=True),
    Column("producer", Integer, nullable=False),
    Column("message_id", String(128), nullable=False),
    Column("committed_at", Float(53), nullable=False),
)
"""One row per committed order; ``committed_at``: the producer's clock just before commit."""
effects = Table(
    "soak_effects", business,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("consumer_group", String(64), nullable=False),
    Column("order_no", String(64), nullable=False),
    Column("message_id", String(128), nullable=False),
    Column("handled_at", Float(53), nullable=False),
    Column("pid", Integer, nullable=False),
)
"""One row per handling, no key of its own: a second application of an order shows."""
