"""The overview page (every source at a glance) and signing in/out with the write token."""

from __future__ import annotations

import functools
import itertools
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from postbox.cli.store_commands import topic_documents
from postbox.network.client.inspect_calls import InspectCalls
from postbox.outbox.admin import stub_stats
from postbox.storage_engine import Broker
from postbox.storage_engine.store.retention import disk_used_ratio

from .charts import gauge, line_chart
from .security import OPERATOR_COOKIE, OPERATOR_NAME_MAX, WRITE_COOKIE, Refused, operator
from .sources import AnyBroker, SourceError, read_summary
from .web import Console, read_form, refused_response

SAMPLES_KEPT = 120


def store_figures(broker: AnyBroker) -> dict[str, Any]:
    """Disk use against the watermarks and the totals the rates come from (embedded store), or
    every master's runtime table (remote broker)."""
    if not isinstance(broker, Broker):
        return {"runtime": InspectCalls(broker.context).runtime_info()}
    store = broker.store
    stats = store.stats()
    retention = store.config.retention
    marks = {"clean": retention.disk_max_used_space_ratio / 100,
             "force clean": retention.disk_space_clean_forcibly_ratio / 100,
             "refuse writes": retention.disk_space_warning_level_ratio / 100}
    stored = sum(queue["max_offset"] for document in topic_documents(store)
                 for queue in document["queues"] if not document["topic"].startswith("%"))
    consumed = sum(max(queue.committed_offset or 0, 0) for group in broker.consumer_groups()
                   for queue in broker.consumer_progress(group)
                   if not queue.topic.startswith("%"))
    ratio = disk_used_ratio(store.root_dir)
    return {"stats": stats, "gauge": gauge(ratio, marks, f"disk of {store.root_dir}"),
            "services_failed": [state for state in broker.service_states() if state.failure],
            "stored": stored, "consumed": consumed, "computed_at": time.monotonic(),
            "log_bytes": stats["commit_log"]["max_position"] - stats["commit_log"]["min_position"]}


def rates(console: Console, figures: dict[str, Any]) -> dict[str, Any]:
    """Put and consume rates (messages/s) between this sample and the previous one, and the
    chart of the samples kept (figures kept from an earlier request add no sample)."""
    samples = console.samples
    if not samples or samples[-1][0] != figures["computed_at"]:
        samples.append((figures["computed_at"], figures["stored"], figures["consumed"]))
        del samples[:-SAMPLES_KEPT]
    put_rates, consume_rates = [], []
    for (t0, s0, c0), (t1, s1, c1) in itertools.pairwise(samples):
        span = max(t1 - t0, 1e-3)
        put_rates.append(max(s1 - s0, 0) / span)
        consume_rates.append(max(c1 - c0, 0) / span)
    return {"put": put_rates[-1] if put_rates else 0.0,
            "consume": consume_rates[-1] if consume_rates else 0.0,
            "chart": line_chart([f"{len(samples)} sample{'' if len(samples) == 1 else 's'}"],
                                {"put/s": put_rates, "consume/s": consume_rates},
                                "messages per second")}


def overview(console: Console, request: Request) -> Response:
    """Stores and brokers, disk, rates, open alerts, the last reconciliation."""
    sources = console.sources
    brokers = [(source, console.recent.get(("store_figures", source),
                                           functools.partial(sources.with_broker, source,
                                                             store_figures)))
               for source in sources.broker_sources]
    for _, figures in brokers:
        if isinstance(figures, dict) and "stored" in figures:
            figures["rates"] = rates(console, figures)
    database = (console.recent.get("stub_stats", lambda: sources.with_database(stub_stats))
                if console.settings.database_url else None)
    redis = sources.redis_info() if console.settings.redis_url else None
    runs = sources.report_runs() if console.settings.reports_dir else None
    last = None
    if isinstance(runs, list) and runs:
        last = {"name": runs[-1].name or ".", "summary": read_summary(runs[-1])}
    return console.render(request, "overview.html", "Overview", brokers=brokers,
                          database=database, redis=redis, runs=runs, last=last,
                          SourceError=SourceError)


async def login(console: Console, request: Request) -> Response:
    """POST the write token (and a name for the audit): the write role for this browser."""
    form = await read_form(request)
    try:
        console.guard.check_post(request, form, write=False)
    except Refused as refusal:
        return refused_response(refusal)
    session = console.guard.session_id(request) or ""
    if not console.guard.check_token(str(form.get("token") or "")):
        console.audit(operator(request), "sign-in", "write role", "refused: wrong token")
        return HTMLResponse("<p class='error'>refused: wrong write token</p>", status_code=403)
    back = str(form.get("next") or "/")
    if not back.startswith("/") or back.startswith("//"):
        back = "/"  # only this console's own pages
    response = RedirectResponse(back, status_code=303)
    response.set_cookie(WRITE_COOKIE, console.guard.write_mark(session), httponly=True,
                        samesite="strict")
    name = "".join(ch for ch in str(form.get("name") or "operator")
                   if ch.isalnum() or ch in "-_.@")[:OPERATOR_NAME_MAX]
    response.set_cookie(OPERATOR_COOKIE, name or "operator", httponly=True, samesite="strict")
    console.audit(f"{name}@{request.client.host if request.client else '?'}", "sign-in",
                  "write role", "ok")
    return response


async def logout(console: Console, request: Request) -> Response:
    """Drop the write role of this browser."""
    form = await read_form(request)
    try:
        console.guard.check_post(request, form, write=False)
    except Refused as refusal:
        return refused_response(refusal)
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(WRITE_COOKIE)
    return response


def routes(console: Console) -> list[Route]:
    """The overview's and the sign-in's routes."""
    async def do_login(request: Request) -> Response:
        return await login(console, request)

    async def do_logout(request: Request) -> Response:
        return await logout(console, request)

    return [Route("/", lambda request: overview(console, request)),
            Route("/login", do_login, methods=["POST"]),
            Route("/logout", do_logout, methods=["POST"])]
