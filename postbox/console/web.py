"""The console's web plumbing: the ``Console`` every page gets (sources, guard, templates),
page and fragment rendering, the session cookie, and the POST handling every write shares.

A page is one URL; the same URL with ``?fragment=1`` answers only its live part, which the
page's few lines of script fetch again every ``refresh_s`` seconds (not while the operator is
typing in it or has ticked a box) — no reload, no build step.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from postbox.cli.outbox_commands import format_age
from postbox.cli.render import format_time_ms
from postbox.storage_engine import Broker

from .cache import Recent
from .security import SESSION_COOKIE, Guard, Refused, audit, operator
from .settings import ConsoleSettings
from .sources import SOURCE_ERRORS, SourceError, Sources, describe

TEMPLATES = Path(__file__).with_name("templates")
NAVIGATION = (("/", "Overview"), ("/topics", "Topics"), ("/groups", "Consumer groups"),
              ("/messages", "Messages"), ("/dlq", "Dead letters"), ("/outbox", "Outbox"),
              ("/reports", "Reconciliation"))


def refused_response(refusal: Refused) -> HTMLResponse:
    """The answer to a refused POST: the reason, with the refusal's status."""
    return HTMLResponse(f"<p class='error'>refused: {refusal}</p>", status_code=refusal.status)

class Console:
    """What every page works with: the settings, the sources, the guard and the templates."""

    def __init__(self, settings: ConsoleSettings, live_broker: Broker | None = None) -> None:
        self.settings = settings
        self.sources = Sources(settings, live_broker)
        self.guard = Guard(settings.write_token)
        self.templates = Environment(loader=FileSystemLoader(TEMPLATES),
                                     autoescape=select_autoescape(["html"]))
        self.templates.filters["ms_iso"] = format_time_ms
        self.templates.filters["age"] = lambda seconds: (
            "—" if seconds is None else format_age(seconds))
        self.recent = Recent(settings.refresh_s)
        """Slow figures (outbox aggregates, report entries), kept per refresh interval."""
        self.samples: list[tuple[float, int, int]] = []
        """(time s, messages stored, messages consumed): the overview's rates."""

    def render(self, request: Request, template: str, title: str, refresh: bool = True,
               **context: Any) -> Response:
        """The page, or (``?fragment=1``) its live part only; sets the session cookie."""
        session = self.guard.session_id(request) or secrets.token_hex(16)
        context.update(request=request, csrf=self.guard.csrf_token(session),
                       can_write=self.guard.can_write(request),
                       writable=self.settings.writable, sources=self.settings.sources(),
                       is_error=lambda value: isinstance(value, SourceError))
        fragment = self.templates.get_template(template).render(**context)
        if request.query_params.get("fragment"):
            response: Response = HTMLResponse(fragment)
        else:
            page = self.templates.get_template("page.html").render(
                title=title, fragment=fragment, navigation=NAVIGATION, path=request.url.path,
                refresh_ms=int(self.settings.refresh_s * 1000) if refresh else 0, **context)
            response = HTMLResponse(page)
        if self.guard.session_id(request) is None:
            response.set_cookie(SESSION_COOKIE, session, httponly=True, samesite="strict")
        return response

    async def write(self, request: Request, action: str,
                    work: Callable[[dict[str, Any]], tuple[str, str]], back: str) -> Response:
        """Run one write action: CSRF and role checked, ``work(form)`` → (target, outcome),
        audited either way; then back to ``back`` with the outcome shown."""
        form = await read_form(request)
        fields = {key: values if len(values) > 1 else values[0] for key, values in form.items()}
        who = operator(request)
        try:
            self.guard.check_post(request, form)
        except Refused as refusal:
            audit(None, who, action, request.url.path, f"refused: {refusal}")
            return refused_response(refusal)
        try:
            target, outcome = work(fields)
            ok = True
        except SOURCE_ERRORS as error:
            target, outcome, ok = request.url.path, f"failed: {describe(error)}", False
        self.recent.clear()
        self.audit(who, action, target, outcome)
        query = urlencode({"done" if ok else "failed": f"{action}: {outcome}"})
        return RedirectResponse(f"{back}{'&' if '?' in back else '?'}{query}",
                                status_code=303)

    def audit(self, who: str, action: str, target: str, outcome: str) -> None:
        """The audit line, and its row when the database is given."""
        if not self.settings.database_url:
            audit(None, who, action, target, outcome)
            return
        try:
            with self.sources.database() as engine:
                audit(engine, who, action, target, outcome)
        except SOURCE_ERRORS:
            audit(None, who, action, target, outcome)


FORM_BYTES_MAX = 1 << 20


class Form(dict[str, list[str]]):
    """A posted form: every field's values; ``get`` gives the first."""

    def get(self, key: str, default: Any = None) -> Any:
        """The field's first value, or ``default``."""
        values = super().get(key)
        return values[0] if values else default


async def read_form(request: Request) -> Form:
    """The request's ``application/x-www-form-urlencoded`` body (the only kind the pages
    post; anything else reads as an empty form, which the CSRF check then refuses)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip()
    body = await request.body()
    if kind != "application/x-www-form-urlencoded" or len(body) > FORM_BYTES_MAX:
        return Form()
    return Form(parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True))


def ids_of(fields: dict[str, Any], name: str) -> list[str]:
    """A form field that may repeat, as a list of non-empty strings."""
    value = fields.get(name)
    values = value if isinstance(value, list) else [value] if value is not None else []
    return [str(item).strip() for item in values if str(item).strip()]
