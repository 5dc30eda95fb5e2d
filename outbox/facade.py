"""``Outbox``: the outbox of one ``App`` — its database engine, a session factory and a relay
that runs while the app runs.

    app = App(store_url="file:///var/lib/postbox", database_url="postgresql+psycopg://…")
    box = Outbox(app)
    with box.session.begin() as session:
        session.add(Order(...))
        outbox.send(session, "orders", b"...", tags="created")
    # published right after the commit while the app runs; polled for otherwise

Constructing an ``Outbox`` attaches its relay to the engine at once (sends made before
``app.start()`` are remembered) and registers the relay thread to start and stop with the app.
"""

from __future__ import annotations

from sqlalchemy import Engine
from sqlalchemy.orm import sessionmaker

from framework import App

from .database import database_engine
from .metrics import outbox_metrics
from .options import RelayOptions
from .relay import Relay


class Outbox:
    """The outbox of ``app``: ``engine``, ``session`` (a ``sessionmaker``) and ``relay``.

    Args:
        app: the application; its producer publishes and its ``database_url`` names the
            database unless ``engine`` is given.
        engine: use this engine (e.g. the application's own) instead of the app's.
        options: relay tuning.
    """

    def __init__(self, app: App, *, engine: Engine | None = None,
                 options: RelayOptions | None = None) -> None:
        self.app = app
        self.engine = engine if engine is not None else database_engine(app)
        self.session = sessionmaker(self.engine)
        self.relay = Relay(lambda: app.producer, self.engine, options=options)
        self.relay.attach()
        outbox_metrics(app).add_relay(self.relay)
        app.on_start(self.relay.start)
        app.on_stop(self.relay.stop)


__all__ = ["Outbox"]
