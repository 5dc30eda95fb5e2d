"""``Outbox``: the outbox of one ``App`` — its database engine, a session factory and a relay
that runs while the app runs.

    app = App(store_url="file:///var/lib/postbox", database_url="postgresql+psycopg://…")
    box = Outbox(app)
    with box.session.begin() as session:
        session.add(Order(...))
        outbox.send(session, "orders", b"...", tags="created")
    # published right after the commit while the app runs; polled for otherwise

Several consumer groups on one topic (one order event, several services): declare them,
``Outbox(app, consumer_groups={"orders": ["billing", "shipping"]})``. Every stub of a declared
topic records the groups (``message_stub.expected_groups``) and is confirmed only once each of
them has handled it; the resend rule, the dead-letter alerts and reconciliation judge each
(message, group) on its own. The declaration is the producer's, stored on each stub when it
is sent, so the consumers in other processes, the resend worker and reconciliation all read
the same list without sharing configuration, and changing it never rewrites what was sent.
Declare only groups that take every message of the topic (no tag filter that skips some).

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

from collections.abc import Mapping, Sequence

from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.orm import sessionmaker

from postbox.framework import App, ConfigurationError
from postbox.framework.transport import remote_address

from .commit_hook import CommitHook
from .database import database_engine
from .metrics import outbox_metrics
from .options import RelayOptions
from .relay import Relay
from .send import GROUPS_EXECUTION_OPTION
from .tables import GROUP_LENGTH, group_names_text


class Outbox:
    """The outbox of ``app``: ``engine``, ``session`` (a ``sessionmaker``) and ``relay``.

    Args:
        app: the application; its producer publishes and its ``database_url`` names the
            database unless ``engine`` is given.
        engine: use this engine (e.g. the application's own) instead of the app's.
        async_engine: an ``AsyncEngine`` on the same database the application sends through
            too (see the module docstring).
        options: relay tuning.
        consumer_groups: topic → the consumer groups every message of the topic must reach
            (see the module docstring); topics not listed are confirmed by the first group
            that handles them.
    """

    def __init__(self, app: App, *, engine: Engine | None = None,
                 async_engine: AsyncEngine | None = None,
                 options: RelayOptions | None = None,
                 consumer_groups: Mapping[str, Sequence[str]] | None = None) -> None:
        self.app = app
        self.engine = engine if engine is not None else database_engine(app)
        self.consumer_groups = declared_groups(consumer_groups or {})
        """Topic → the consumer groups its messages must reach, as declared."""
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
        declared = {topic: group_names_text(groups)
                    for topic, groups in self.consumer_groups.items()}
        for target in (self.engine, *([async_engine.sync_engine] if async_engine else [])):
            target.update_execution_options(**{GROUPS_EXECUTION_OPTION: declared})
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


def declared_groups(consumer_groups: Mapping[str, Sequence[str]]
                    ) -> dict[str, tuple[str, ...]]:
    """``consumer_groups`` checked: topic names to non-empty lists of group names (no blanks,
    no spaces, at most ``GROUP_LENGTH`` characters); ``ConfigurationError`` otherwise."""
    checked: dict[str, tuple[str, ...]] = {}
    for topic, groups in consumer_groups.items():
        if not isinstance(topic, str) or not topic:
            raise ConfigurationError(f"consumer_groups: a topic name must be a non-empty "
                                     f"string, got {topic!r}")
        if isinstance(groups, str) or not groups:
            raise ConfigurationError(f"consumer_groups[{topic!r}] must be a non-empty list of "
                                     f"group names, got {groups!r}")
        for group in groups:
            if (not isinstance(group, str) or not group or len(group) > GROUP_LENGTH
                    or any(character.isspace() for character in group)):
                raise ConfigurationError(
                    f"consumer_groups[{topic!r}]: {group!r} is not a consumer group name "
                    f"(1-{GROUP_LENGTH} characters, no spaces)")
        checked[topic] = tuple(sorted(set(groups)))
    return checked


__all__ = ["Outbox", "declared_groups"]
