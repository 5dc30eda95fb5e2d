"""An asyncio order service: FastAPI, the outbox in an ``AsyncSession`` transaction, and an
idempotent ``async def`` handler in the same process.

- ``POST /orders`` writes the order row and ``await outbox.send(session, ...)`` in one async
  transaction: the order and its message commit together or not at all.
- The relay (started with the app) publishes the message right after the commit.
- ``ship`` (``async def``, ``idempotent=True``) reserves the stock and records the shipment in
  the ``AsyncSession`` transaction that also confirms the stub: once per order, however often
  the message arrives.
- ``async with app:`` in FastAPI's lifespan starts the consumers and the relay with the server
  and drains them when it stops.

Run it with ``python -m examples.fastapi_shop`` (settings: ``shop.ShopSettings.from_env``);
``tests/examples/test_fastapi_shop.py`` runs it under uvicorn and posts orders over HTTP.
"""
