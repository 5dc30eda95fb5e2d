"""The example's business tables (its own ``MetaData``; the outbox tables come from
``migrations``)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, DateTime, Integer, MetaData, String, Table

business = MetaData()

orders = Table(
    "payments_order", business,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("customer", String(64), nullable=False),
    Column("amount_cents", BigInteger, nullable=False),
    Column("fault", String(16)),
    Column("message_id", String(128), nullable=False, unique=True),
    Column("created_at", DateTime, nullable=False),
)

ledger = Table(
    "payments_ledger", business,
    Column("order_id", Integer, primary_key=True),
    Column("amount_cents", BigInteger, nullable=False),
    Column("message_id", String(128), nullable=False),
    Column("billed_at", DateTime, nullable=False),
)

__all__ = ["business", "ledger", "orders"]
