"""An order service: its own tables, a handler that bills each order once, and the worker."""

import json
import os

from sqlalchemy import Column, Integer, MetaData, String, Table

from postbox import migrations, outbox
from postbox.framework import App

STORE = os.environ.get("SHOP_STORE", ".postbox/shop-store")
DATABASE_URL = os.environ.get("SHOP_DATABASE_URL", "sqlite:///.postbox/shop.db")

# The application creates its own tables; Postbox creates only the outbox's.
tables = MetaData()
orders = Table("orders", tables, Column("id", Integer, primary_key=True),
               Column("item", String(100), nullable=False))
ledger = Table("ledger", tables, Column("message_id", String(128), primary_key=True),
               Column("order_id", Integer, nullable=False))


def create_tables() -> None:
    """The outbox's tables (migrations) and the application's own."""
    migrations.upgrade(DATABASE_URL)         # outbox tables: same as `postbox db upgrade`
    engine = outbox.create_database_engine(DATABASE_URL)
    tables.create_all(engine)                # the application's own tables
    engine.dispose()


def build_app() -> App:
    """The app with its handler; nothing opens until it starts."""
    app = App(store_url=STORE, database_url=DATABASE_URL)

    @app.handler(topic="orders", consumer_group="billing", idempotent=True)
    def bill(message, session):              # runs once per order, however often delivered
        session.execute(ledger.insert().values(message_id=message.msg_id,
                                               order_id=json.loads(message.body)["order"]))

    return app


def build_worker() -> outbox.OutboxWorker:
    """What `make_celery` calls in the worker process: the app (its store and consumers)
    with the relay, resend, alert and cleanup tasks."""
    return outbox.OutboxWorker(build_app())
