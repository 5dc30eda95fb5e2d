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

asyncio: ``Outbox(app, async_engine=engine)`` (an ``AsyncEngine`` on the same database, e.g.
``create_async_database_engine(app.database_url)``) has the relay watch that engine too —
``await outbox.send(async_session, ...)`` is handed over after the commit — and gives
``box.async_session`` (an ``async_sessionmaker``). The relay itself publishes through its sync
engine. The async engine stays the application's: it disposes it on its own loop.

A producer-only app over a broker in another process (``store_url="rocketmq://…"``, no
handlers: a web process whose consumers run elsewhere) has nothing to start, so its relay also
starts at the first commit that sent something and publishes it at once, from the web process,
with no periodic task in the way (``relay_pending`` stays the safety net for what a process
never handed over; ``Relay.start_on_notify``). It stops with ``app.stop()`` (which the app also
runs at interpreter exit); after that a commit starts nothing until ``app.start()``. An
embedded store (``file://``) is never opened that way: it belongs to the one process that
starts its app.
"""

from __future__ import annotations

from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.orm import sessionmaker

from framework import App, ConfigurationError
from framework.transport import remote_address

from .commit_hook import CommitHook
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
        async_engine: an ``AsyncEngine`` on the same database the application sends through
            too (see the module docstring).
        options: relay tuning.
    """

    def __init__(self, app: App, *, engine: Engine | None = None,
                 async_engine: AsyncEngine | None = None,
                 options: RelayOptions | None = None) -> None:
        self.app = app
        self.engine = engine if engine is not None else database_engine(app)
        self.session = sessionmaker(self.engine)
        self.relay = Relay(lambda: app.producer, self.engine, options=options)
        self.relay.attach()
        self.relay.start_on_notify = app.store_url is not None and \
            remote_address(app.store_url) is not None  # a producer-only app's web process
        self.async_engine = async_engine
        self._async_sessions: async_sessionmaker[AsyncSession] | None = None
        self.async_hook: CommitHook | None = None
        """The relay's hook on ``async_engine.sync_engine`` (attached, like the relay's own)."""
        if async_engine is not None:
            self._async_sessions = async_sessionmaker(async_engine, expire_on_commit=False)
            self.async_hook = CommitHook(async_engine.sync_engine, self.relay.notify)
            self.async_hook.attach()
        outbox_metrics(app).add_relay(self.relay)
        app.on_start(self.relay.start)
        app.on_stop(self.relay.stop)

    @property
    def async_session(self) -> async_sessionmaker[AsyncSession]:
        """An ``async_sessionmaker`` on ``async_engine`` (``async with box.async_session.begin()
        as session:``); ``ConfigurationError`` when the outbox has none."""
        if self._async_sessions is None:
            raise ConfigurationError("this Outbox has no async engine: Outbox(app, "
                                     "async_engine=create_async_database_engine(url))")
        return self._async_sessions


__all__ = ["Outbox"]
