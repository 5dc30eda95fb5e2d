"""The console's Starlette application, and serving it with uvicorn."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.routing import BaseRoute

from . import pages_dlq, pages_messages, pages_outbox, pages_overview, pages_reports, pages_topics
from .settings import ConsoleSettings, check_settings
from .web import Console

PAGE_MODULES = (pages_overview, pages_topics, pages_messages, pages_dlq, pages_outbox,
                pages_reports)


def build_app(settings: ConsoleSettings) -> Starlette:
    """The console over ``settings``'s sources (checked first: ``ConsoleConfigError``)."""
    check_settings(settings)
    console = Console(settings)
    routes: list[BaseRoute] = []
    for module in PAGE_MODULES:
        routes.extend(module.routes(console))
    app = Starlette(routes=routes)
    app.state.console = console
    return app


def serve(settings: ConsoleSettings) -> None:
    """Serve the console until interrupted (uvicorn, one process)."""
    import uvicorn

    app = build_app(settings)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning",
                access_log=False)
