"""The shop's tables, settings and Postbox app (its idempotent async handler)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import (
    Column,
    CursorResult,
    Integer,
    MetaData,
    String,
    Table,
    insert,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession

from postbox import migrations, outbox
from postbox.framework import App, ConsumedMessage, DeadLetter

ORDERS_TOPIC = "shop-orders"
STOCK = {"book": 1_000, "pen": 1_000, "lamp": 10}
"""What the shop sells, and how many of each it holds at first."""

tables = MetaData()
orders = Table("shop_orders", tables, Column("id", Integer, primary_key=True),
               Column("item", String(64), nullable=False),
               Column("quantity", Integer, nullable=False))
stock = Table("shop_stock", tables, Column("item", String(64), primary_key=True),
              Column("available", Integer, nullable=False))
shipments = Table("shop_shipments", tables, Column("id", Integer, primary_key=True),
                  Column("order_id", Integer, nullable=False),
                  Column("message_id", String(128), nullable=False))
"""One row per shipment, with no key of its own: a second run of the handler for one order
would show as a second row — the idempotent handler makes sure there is never one."""


@dataclass(frozen=True)
class ShopSettings:
    """Where the shop keeps things. ``from_env`` reads ``SHOP_STORE``, ``SHOP_DATABASE_URL``,
    ``SHOP_REDIS_URL`` (unset: an embedded Redis), ``SHOP_HOST`` and ``SHOP_PORT``."""

    store_url: str = ".postbox/fastapi-shop-store"
    database_url: str = "sqlite:///.postbox/fastapi-shop.db"
    redis_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000

    @classmethod
    def from_env(cls) -> ShopSettings:
        """The settings from the environment (defaults above)."""
        return cls(store_url=os.environ.get("SHOP_STORE", cls.store_url),
                   database_url=os.environ.get("SHOP_DATABASE_URL", cls.database_url),
                   redis_url=os.environ.get("SHOP_REDIS_URL") or None,
                   host=os.environ.get("SHOP_HOST", cls.host),
                   port=int(os.environ.get("SHOP_PORT", str(cls.port))))


def create_tables(database_url: str) -> None:
    """The outbox's tables (migrations), the shop's own, and the initial stock."""
    migrations.upgrade(database_url)
    engine = outbox.create_database_engine(database_url)
    try:
        tables.create_all(engine)
        with engine.begin() as connection:
            known = set(connection.execute(select(stock.c.item)).scalars())
            missing = [{"item": item, "available": count} for item, count in STOCK.items()
                       if item not in known]
            if missing:
                connection.execute(insert(stock), missing)
    finally:
        engine.dispose()


def build_app(settings: ShopSettings) -> App:
    """The Postbox app with the shop's handler; nothing opens until it starts."""
    app = App(store_url=settings.store_url, database_url=settings.database_url,
              redis_url=settings.redis_url)

    @app.handler(topic=ORDERS_TOPIC, consumer_group="shipping", idempotent=True)
    async def ship(message: ConsumedMessage, session: AsyncSession) -> None:
        """Reserve the stock and record the shipment, once per order."""
        order = json.loads(message.body)
        reserved = cast(CursorResult[Any], await session.execute(
            update(stock).where(stock.c.item == order["item"],
                                stock.c.available >= order["quantity"])
            .values(available=stock.c.available - order["quantity"])))
        if reserved.rowcount != 1:
            raise DeadLetter(f"order {order['order']}: not enough {order['item']} in stock")
        await session.execute(insert(shipments).values(order_id=order["order"],
                                                       message_id=message.msg_id))

    return app


__all__ = ["ORDERS_TOPIC", "STOCK", "ShopSettings", "build_app", "create_tables", "orders",
           "shipments", "stock", "tables"]
