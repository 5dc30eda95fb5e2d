"""The console's sources, opened through the command line's own openers.

A store is opened read-only for reads (``open_broker``: a ``Broker`` over it, services off;
one view shared by the reads and opened again once older than the refresh interval,
``snapshots``),
writable for a write (refused while an application holds it: the page says to use the
broker); a broker is reached with ``remote_broker`` (``RemotingBroker``); the database with
``open_outbox`` (its outbox tables checked); Redis with a client that is asked ``PING`` and
``INFO``. Whatever goes wrong with one source becomes a ``SourceError`` (its name and one line)
that its part of the page shows, while the other sources keep working.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from redis.exceptions import RedisError
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from postbox.cli.common import CliError, StoreOptions, open_broker
from postbox.cli.outbox_commands import open_outbox
from postbox.cli.remote import remote_broker
from postbox.network.client.remote_broker import RemotingBroker
from postbox.outbox.admin import AdminError
from postbox.storage_engine import Broker, StorageError

from .settings import ConsoleSettings
from .snapshots import Snapshots

AnyBroker = Broker | RemotingBroker
T = TypeVar("T")
SOURCE_ERRORS = (CliError, StorageError, OSError, SQLAlchemyError, RedisError, AdminError,
                 ValueError, TimeoutError, ConnectionError)
"""What a source may raise that the page shows as that source's error (never a traceback)."""
REDIS_TIMEOUT_S = 2.0


@dataclasses.dataclass(frozen=True)
class SourceError:
    """One source's failure, as the page shows it."""

    source: str
    message: str


def describe(error: BaseException) -> str:
    """One line for an error: its message, else its type."""
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def attempt(source: str, work: Callable[[], T]) -> T | SourceError:
    """``work()``, or the ``SourceError`` it raised."""
    try:
        return work()
    except SOURCE_ERRORS as error:
        return SourceError(source, describe(error))


class Sources:
    """The sources of one console; every method opens, uses and closes, but the store's
    read-only view, which is kept (``snapshots``)."""

    def __init__(self, settings: ConsoleSettings, live_broker: Broker | None = None) -> None:
        self.settings = settings
        self.live_broker = live_broker
        """The broker of the process the console runs in (``postbox broker start
        --console``): the store's reads and writes go through it, never a second opening."""
        self.snapshots = Snapshots(
            lambda previous: open_broker(self.store_options(), tail_mark=None if previous is None
                                         else previous.store.tail_mark),
            settings.refresh_s, SOURCE_ERRORS,
            after_read=lambda broker: broker.store.release_pages())
        """The store's shared read-only view, opened again once older than the refresh (the
        new view's tail scan starts where the previous one's log ended, when that still
        holds); the pages a read mapped are dropped after it."""

    @property
    def broker_sources(self) -> list[str]:
        """``store`` and/or ``broker``: the sources that hold messages."""
        return [name for name in ("store", "broker") if name in self.settings.sources()]

    def store_options(self) -> StoreOptions:
        """The command line's store options for the console's store."""
        settings = self.settings
        return StoreOptions(settings.store_dir, settings.broker_conf,
                            settings.segment_size_bytes)

    @contextlib.contextmanager
    def broker(self, source: str, *, writable: bool = False) -> Iterator[AnyBroker]:
        """A broker over the store (read-only unless ``writable``) or the remote broker."""
        if source == "store" and self.live_broker is not None:
            yield self.live_broker
        elif source == "store" and "store" in self.broker_sources and not writable:
            with self.snapshots.read() as broker:
                yield broker
        elif source == "store" and "store" in self.broker_sources:
            self.snapshots.drop()  # the page shown after the write reads a view opened after it
            try:
                with open_broker(self.store_options(), writable=True) as broker:
                    yield broker
            finally:
                self.snapshots.drop()
        elif source == "broker" and self.settings.broker_url:
            with remote_broker(self.settings.broker_url, self.settings.access_key,
                               self.settings.secret_key) as remote:
                yield remote
        else:
            raise CliError(f"no message source {source!r} (this console has "
                           f"{', '.join(self.broker_sources) or 'none'})")

    def with_broker(self, source: str, work: Callable[[AnyBroker], T], *,
                    writable: bool = False) -> T | SourceError:
        """``work(broker)`` on ``source``, or its ``SourceError``."""
        def run() -> T:
            with self.broker(source, writable=writable) as broker:
                return work(broker)
        return attempt(source, run)

    def each_broker(self, work: Callable[[AnyBroker], T]) -> list[tuple[str, T | SourceError]]:
        """``work`` on every message source: [(source, result or error)]."""
        return [(source, self.with_broker(source, work)) for source in self.broker_sources]

    @contextlib.contextmanager
    def database(self) -> Iterator[Engine]:
        """An engine on the outbox database (tables checked), disposed afterwards."""
        if not self.settings.database_url:
            raise CliError("no --database-url given")
        with open_outbox(self.settings.database_url) as engine:
            yield engine

    def with_database(self, work: Callable[[Engine], T]) -> T | SourceError:
        """``work(engine)``, or the database's ``SourceError``."""
        def run() -> T:
            with self.database() as engine:
                return work(engine)
        return attempt("database", run)

    def redis_info(self) -> dict[str, Any] | SourceError:
        """Redis's ``PING`` and a few ``INFO`` figures."""
        import redis

        def run() -> dict[str, Any]:
            client = redis.Redis.from_url(str(self.settings.redis_url),
                                          socket_timeout=REDIS_TIMEOUT_S,
                                          socket_connect_timeout=REDIS_TIMEOUT_S)
            try:
                client.ping()
                info = client.info()
                return {"keys": client.dbsize(), "version": info.get("redis_version"),
                        "used_memory": info.get("used_memory_human"),
                        "clients": info.get("connected_clients")}
            finally:
                client.close()
        return attempt("redis", run)

    def report_runs(self) -> list[Path] | SourceError:
        """Reconciliation runs under ``--reports``: folders with a ``summary.json`` (the
        folder itself counts), oldest first by their summary's ``as_of``."""
        root = self.settings.reports_dir

        def run() -> list[Path]:
            if root is None or not root.is_dir():
                raise CliError(f"no reports folder at {root}")
            runs = [path.parent for path in root.glob("*/summary.json")]
            if (root / "summary.json").is_file():
                runs.append(root)
            return sorted(runs, key=lambda path: (read_summary(path).get("as_of") or "",
                                                  path.name))
        return attempt("reports", run)


def read_summary(run: Path) -> dict[str, Any]:
    """A run's ``summary.json`` ({} when unreadable)."""
    try:
        document = json.loads((run / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}
