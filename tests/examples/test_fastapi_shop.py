"""The FastAPI example under a real ASGI server: uvicorn on a free loopback port, real HTTP
through httpx, the example's real database (SQLite file, or ``POSTBOX_TEST_DATABASE_URL``
through its async driver) and store. Orders posted over HTTP ship exactly once — also when their
message is delivered again, and across a ``kill -9`` of the server process and its restart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import uvicorn
from sqlalchemy import Engine, func, select

from examples.fastapi_shop.api import Shop, create_api
from examples.fastapi_shop.shop import (
    ORDERS_TOPIC,
    STOCK,
    ShopSettings,
    create_tables,
    orders,
    shipments,
    stock,
)
from postbox import outbox
from postbox.idempotency import IdempotencyMiddleware
from postbox.outbox import RelayOptions
from tests.support.polling import wait_until
from tests.support.services import free_port
from tests.support.transports import StoreUnderTest

REPOSITORY = Path(__file__).resolve().parents[2]
SHIP_TIMEOUT_S = 30.0


@pytest.fixture
def settings(store: StoreUnderTest, database_url: str, redis_url: str) -> ShopSettings:
    create_tables(database_url)
    return ShopSettings(store_url=store.url("shop"), database_url=database_url,
                        redis_url=redis_url, port=free_port())


@pytest.fixture
def engine(make_engine: Callable[..., Engine], settings: ShopSettings) -> Engine:
    return make_engine(settings.database_url)


class ServerThread:
    """uvicorn serving ``api`` in a thread of this process (its own event loop)."""

    def __init__(self, api: object, port: int) -> None:
        self.server = uvicorn.Server(uvicorn.Config(api, host="127.0.0.1", port=port,  # type: ignore[arg-type]
                                                    log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        wait_until(lambda: self.server.started or not self.thread.is_alive(),
                   what="uvicorn started")
        assert self.server.started, "uvicorn did not start (see the log)"
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        assert not self.thread.is_alive(), "uvicorn did not stop"


def _shipments_per_order(engine: Engine) -> dict[int, int]:
    with engine.connect() as connection:
        return dict(connection.execute(select(shipments.c.order_id, func.count())
                                       .group_by(shipments.c.order_id)).all())


def _available(engine: Engine, item: str) -> int:
    with engine.connect() as connection:
        return connection.execute(select(stock.c.available)
                                  .where(stock.c.item == item)).scalar_one()


def _order_count(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(select(func.count()).select_from(orders)).scalar_one()


def test_orders_posted_over_http_ship_once_also_when_redelivered(settings: ShopSettings,
                                                                 engine: Engine):
    api = create_api(settings)
    with ServerThread(api, settings.port), \
            httpx.Client(base_url=f"http://127.0.0.1:{settings.port}", timeout=10) as http:
        placed = [http.post("/orders", json={"item": "book", "quantity": quantity})
                  for quantity in range(1, 9)]
        assert [response.status_code for response in placed] == [201] * 8
        sent = {response.json()["order"]: response.json()["message_id"] for response in placed}
        assert http.post("/orders", json={"item": "unicorn", "quantity": 1}).status_code == 404
        assert http.post("/orders", json={"item": "book", "quantity": 0}).status_code == 422
        assert _order_count(engine) == 8  # the refused ones wrote nothing

        wait_until(lambda: all(http.get(f"/orders/{order}").json()["shipments"] == 1
                               for order in sent), SHIP_TIMEOUT_S, what="every order shipped")
        shop: Shop = api.state.shop
        middleware = next(layer for layer in shop.app.middleware
                          if isinstance(layer, IdempotencyMiddleware))
        for order, message_id in sent.items():  # the same messages, delivered twice more
            body = json.dumps({"order": order, "item": "book", "quantity": order}).encode()
            for _ in range(2):
                shop.app.producer.send(ORDERS_TOPIC, body, tags="created",
                                       unique_key=message_id)
        wait_until(lambda: middleware.stats.duplicates_by_redis
                   + middleware.stats.duplicates_by_database >= 2 * len(sent),
                   SHIP_TIMEOUT_S, what="every copy rejected")
        assert http.get("/stock/book").json() == {"item": "book",
                                                  "available": STOCK["book"] - sum(range(1, 9))}

    assert _shipments_per_order(engine) == dict.fromkeys(sent, 1)
    assert middleware.stats.processed == len(sent)
    with engine.connect() as connection:
        statuses = set(connection.execute(select(outbox.message_stub.c.status)).scalars())
    assert statuses == {"confirmed"}


@pytest.mark.embedded_only("kills the process that owns the store")
def test_orders_ship_once_across_a_kill_9_and_restart(settings: ShopSettings, engine: Engine):
    """``python -m examples.fastapi_shop`` killed right after taking orders; the restarted shop
    (in this process) ships each order once."""
    env = {**os.environ, "SHOP_STORE": settings.store_url,
           "SHOP_DATABASE_URL": settings.database_url, "SHOP_REDIS_URL": settings.redis_url or "",
           "SHOP_PORT": str(settings.port)}
    base_url = f"http://127.0.0.1:{settings.port}"
    server = subprocess.Popen([sys.executable, "-m", "examples.fastapi_shop"], cwd=REPOSITORY,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _healthy(base_url) or server.poll() is not None, 60,
                   what="the shop serving")
        assert server.poll() is None, "the shop exited"
        with httpx.Client(base_url=base_url, timeout=10) as http:
            placed = [http.post("/orders", json={"item": "pen", "quantity": 2}).json()["order"]
                      for _ in range(6)]
    finally:
        server.send_signal(signal.SIGKILL)  # some shipped, some maybe mid-handler, some not
        server.wait(10)

    with ServerThread(create_api(settings), settings.port):
        # a stub the killed shop's relay had claimed waits out the claim's lease (once in CI
        # an order came after the 30 s this wait had, the lease's own length)
        wait_until(lambda: _shipments_per_order(engine) == dict.fromkeys(placed, 1),
                   RelayOptions().lease_ms / 1000 + SHIP_TIMEOUT_S,
                   what="every order shipped once after the restart",
                   detail=lambda: _shipments_per_order(engine))
    assert _available(engine, "pen") == STOCK["pen"] - 2 * len(placed)


def _healthy(base_url: str) -> bool:
    try:
        return httpx.get(base_url + "/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
