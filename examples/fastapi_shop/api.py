"""The HTTP side: FastAPI routes, and the lifespan that runs the Postbox app with the server.

The routes use ``box.async_session`` (an ``AsyncEngine`` on the app's database, opened and
disposed by the lifespan on the server's loop); the relay publishes through its own sync engine
and is told about each commit by the outbox's hook on the async engine.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel, Field
from sqlalchemy import CursorResult, func, insert, select

from postbox import outbox
from postbox.framework import App

from .shop import ORDERS_TOPIC, ShopSettings, build_app, orders, shipments, stock


class OrderIn(BaseModel):
    """``POST /orders`` body."""

    item: str = Field(min_length=1, max_length=64)
    quantity: int = Field(gt=0, le=1_000)


@dataclass
class Shop:
    """What the routes use: the running Postbox app and its outbox."""

    app: App
    box: outbox.Outbox


def create_api(settings: ShopSettings | None = None) -> FastAPI:
    """The FastAPI application (``settings``: ``ShopSettings.from_env()`` by default)."""
    settings = settings or ShopSettings.from_env()

    @asynccontextmanager
    async def lifespan(api: FastAPI) -> AsyncIterator[None]:
        app = build_app(settings)
        async_engine = outbox.create_async_database_engine(settings.database_url)
        api.state.shop = Shop(app, outbox.Outbox(app, async_engine=async_engine))
        try:
            async with app:  # consumers and relay start with the server, drain when it stops
                yield
        finally:
            await async_engine.dispose()

    api = FastAPI(title="Postbox FastAPI shop", lifespan=lifespan)
    api.add_api_route("/orders", place_order, methods=["POST"], status_code=201)
    api.add_api_route("/orders/{order_id}", read_order, methods=["GET"])
    api.add_api_route("/stock/{item}", read_stock, methods=["GET"])
    api.add_api_route("/health", health, methods=["GET"])
    return api


async def place_order(order: OrderIn, request: Request) -> dict[str, Any]:
    """Store the order and its message in one async transaction."""
    shop: Shop = request.app.state.shop
    async with shop.box.async_session.begin() as session:
        known = await session.scalar(select(stock.c.item).where(stock.c.item == order.item))
        if known is None:
            raise HTTPException(404, f"no such item: {order.item}")
        inserted = await session.execute(insert(orders).values(item=order.item,
                                                               quantity=order.quantity))
        key = cast(CursorResult[Any], inserted).inserted_primary_key
        assert key is not None, "an INSERT returns its primary key"
        order_id = key[0]
        message_id = await outbox.send(session, ORDERS_TOPIC,
                                       {"order": order_id, "item": order.item,
                                        "quantity": order.quantity},
                                       tags="created", keys=f"order-{order_id}")
    # committed: the relay publishes it now; rolled back (an exception above): nothing sent
    return {"order": order_id, "message_id": message_id}


async def read_order(order_id: int, request: Request) -> dict[str, Any]:
    """The order and how many shipments it has (1 once shipped, never more)."""
    shop: Shop = request.app.state.shop
    async with shop.box.async_session() as session:
        row = (await session.execute(select(orders).where(orders.c.id == order_id))).first()
        if row is None:
            raise HTTPException(404, f"no such order: {order_id}")
        shipped = await session.scalar(select(func.count()).select_from(shipments)
                                       .where(shipments.c.order_id == order_id))
    return {"order": order_id, "item": row.item, "quantity": row.quantity,
            "shipments": shipped}


async def read_stock(item: str, request: Request) -> dict[str, Any]:
    """How many of ``item`` are still available."""
    shop: Shop = request.app.state.shop
    async with shop.box.async_session() as session:
        available = await session.scalar(select(stock.c.available)
                                          .where(stock.c.item == item))
    if available is None:
        raise HTTPException(404, f"no such item: {item}")
    return {"item": item, "available": available}


async def health() -> dict[str, str]:
    """Served once the lifespan has started the app."""
    return {"status": "ok"}


__all__ = ["OrderIn", "Shop", "create_api"]
