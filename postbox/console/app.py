"""The console's Starlette application, and serving it with uvicorn."""

from __future__ import annotations

import threading
import time

from starlette.applications import Starlette
from starlette.routing import BaseRoute

from postbox.storage_engine import Broker

from . import pages_dlq, pages_messages, pages_outbox, pages_overview, pages_reports, pages_topics
from .settings import ConsoleConfigError, ConsoleSettings, check_settings
from .web import Console

START_TIMEOUT_S = 30.0
PAGE_MODULES = (pages_overview, pages_topics, pages_messages, pages_dlq, pages_outbox,
                pages_reports)


def build_app(settings: ConsoleSettings, live_broker: Broker | None = None) -> Starlette:
    """The console over ``settings``'s sources (checked first: ``ConsoleConfigError``); with
    ``live_broker``, the store is that running broker's."""
    check_settings(settings)
    console = Console(settings, live_broker)
    routes: list[BaseRoute] = []
    for module in PAGE_MODULES:
        routes.extend(module.routes(console))
    app = Starlette(routes=routes)
    app.state.console = console
    return app


class ConsoleThread:
    """The console served from a thread of a process that runs something else (the broker)."""

    def __init__(self, settings: ConsoleSettings, live_broker: Broker | None = None) -> None:
        import uvicorn

        self._server = uvicorn.Server(uvicorn.Config(
            build_app(settings, live_broker), host=settings.host, port=settings.port,
            log_level="warning", access_log=False))
        self._thread = threading.Thread(target=self._server.run, name="postbox-console",
                                        daemon=True)

    def start(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """Serve; returns ``HOST:PORT`` once it listens (a ``ConsoleConfigError`` when it
        could not bind in time)."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ConsoleConfigError("the console could not start (address in use?)")
            time.sleep(0.05)
        host, port = self._server.servers[0].sockets[0].getsockname()[:2]
        return f"{host}:{port}"

    def stop(self) -> None:
        """Stop serving and wait for the thread."""
        self._server.should_exit = True
        self._thread.join()


def serve(settings: ConsoleSettings) -> None:
    """Serve the console until interrupted (uvicorn, one process)."""
    import uvicorn

    app = build_app(settings)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning",
                access_log=False)
