"""The outbox: stubs by status and age, the void stubs that need manual handling (the alerts),
and re-arm / void with a reason — ``outbox.admin``'s calls, as ``postbox outbox`` makes them.
Re-arming hands a stub back to the relay: the running application (or the Celery
``relay_pending`` task) publishes it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from postbox.cli.common import CliError
from postbox.cli.outbox_commands import format_age
from postbox.outbox.admin import list_stubs, rearm, stub_stats, void
from postbox.outbox.clock import utc_now
from postbox.outbox.tables import StubStatus

from .web import Console, ids_of

LIST_LIMIT = 200


def outbox_view(engine: Engine, status: str | None, topic: str | None) -> dict[str, Any]:
    """Counts, the void stubs, and the newest stubs of the chosen status/topic."""
    chosen = StubStatus(status) if status else None
    return {"stats": stub_stats(engine),
            "void": list_stubs(engine, status=StubStatus.VOID, limit=LIST_LIMIT),
            "stubs": list_stubs(engine, status=chosen, topic=topic or None, limit=LIST_LIMIT),
            "now": utc_now()}


def outbox_page(console: Console, request: Request) -> Response:
    """The outbox page (``?status=`` and ``?topic=`` filter the list)."""
    params = request.query_params
    status = params.get("status") or None
    if status and status not in {member.value for member in StubStatus}:
        status = None
    topic = params.get("topic")
    result = console.recent.get(("outbox", status, topic), lambda: console.sources.with_database(
        lambda engine: outbox_view(engine, status, topic)))
    return console.render(request, "outbox.html", "Outbox", result=result, status=status,
                          statuses=[member.value for member in StubStatus], params=params,
                          age=lambda moment, now: format_age((now - moment).total_seconds()))


def rearm_stubs(console: Console, fields: dict[str, Any]) -> tuple[str, str]:
    """Re-arm the chosen void stubs (``outbox rearm``)."""
    ids = ids_of(fields, "id")
    if not ids:
        raise CliError("choose void stubs to re-arm")
    with console.sources.database() as engine:
        done = rearm(engine, ids)
    return f"stubs {', '.join(ids)}", f"re-armed {len(done)}"


def void_stubs(console: Console, fields: dict[str, Any]) -> tuple[str, str]:
    """Void the chosen unconfirmed stubs with a reason (``outbox void``)."""
    ids = ids_of(fields, "id")
    reason = str(fields.get("reason") or "").strip()
    if not ids:
        raise CliError("choose unconfirmed stubs to void")
    with console.sources.database() as engine:
        done = void(engine, ids, reason=reason)
    return f"stubs {', '.join(ids)}", f"voided {len(done)}: {reason}"


def routes(console: Console) -> list[Route]:
    """The outbox page and its two repairs."""
    async def do_rearm(request: Request) -> Response:
        return await console.write(request, "rearm-stubs",
                                   lambda fields: rearm_stubs(console, fields), "/outbox")

    async def do_void(request: Request) -> Response:
        return await console.write(request, "void-stubs",
                                   lambda fields: void_stubs(console, fields), "/outbox")

    return [Route("/outbox", lambda request: outbox_page(console, request)),
            Route("/outbox/rearm", do_rearm, methods=["POST"]),
            Route("/outbox/void", do_void, methods=["POST"])]
