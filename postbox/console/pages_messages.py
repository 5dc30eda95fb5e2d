"""Message search (by id, key, unique key, queue offset, time range) and the message page: its
fields, body, retry and dead-letter copies, and with the database its stub and per-group log
rows, and what the last reconciliation said about it — one message end to end.

Every lookup is the ``postbox query`` command's own: ``find_by_id``/``find_remotely``,
``query_by_key``, ``find_by_unique_key``, ``message_at``.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from sqlalchemy import Engine, select
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from postbox.cli.common import CliError
from postbox.cli.query_commands import (
    CLI_CONSUMER_GROUP,
    find_by_id,
    find_remotely,
    message_at,
)
from postbox.network.client.admin_calls import AdminCalls
from postbox.outbox.admin import get_stub
from postbox.outbox.tables import message_log, message_processed, message_resend
from postbox.storage_engine import Broker, MessageView
from postbox.storage_engine.contract.model import ConsumeFrom
from postbox.storage_engine.formats.topic_names import DLQ_TOPIC_PREFIX, RETRY_TOPIC_PREFIX

from .pages_topics import parse_moment_ms
from .sources import AnyBroker, SourceError, attempt
from .web import Console

SEARCH_KINDS = {"id": "message id", "key": "key", "unique": "unique key",
                "offset": "queue + offset", "time": "time range"}
RESULTS_MAX = 100
BODY_SHOWN_BYTES = 64 * 1024
SEARCH_CHUNK_BYTES = 4 << 20


def message_link(source: str, view: MessageView) -> str:
    """The message page of a stored record."""
    return "/message?" + urlencode({"source": source, "topic": view.topic,
                                    "queue": view.queue_id, "offset": view.queue_offset})


def need(params: Any, name: str, *, number: bool = False) -> str:
    """A search field, required; digits when ``number``; a ``CliError`` naming it otherwise."""
    value = str(params.get(name) or "").strip()
    if not value:
        raise CliError(f"give {name}")
    if number and not value.isdigit():
        raise CliError(f"{name} must be a whole number >= 0, got {value!r}")
    return value


def reader(broker: AnyBroker) -> Any:
    """The pull that commits nothing: the store's ``get_message`` or the broker's ``pull``."""
    return broker.store.get_message if isinstance(broker, Broker) else broker.pull


def time_range(broker: AnyBroker, topic: str, begin_ms: int, end_ms: int) -> list[MessageView]:
    """Messages of ``topic`` stored between the two times, from each queue's offset for
    ``begin_ms`` (the ``query time`` lookup), at most ``RESULTS_MAX``."""
    found: list[MessageView] = []
    for queue_id in broker.queue_ids(topic):
        offset = broker.start_offset(CLI_CONSUMER_GROUP, topic, queue_id,
                                     ConsumeFrom.TIMESTAMP, begin_ms)
        while len(found) < RESULTS_MAX:
            result = reader(broker)(CLI_CONSUMER_GROUP, topic, queue_id, offset, max_count=32)
            batch = [view for view in result.messages if view.store_timestamp_ms <= end_ms]
            found.extend(batch)
            if len(batch) < len(result.messages) or not result.messages:
                break
            offset = result.next_offset
    return sorted(found, key=lambda view: view.store_timestamp_ms)[:RESULTS_MAX]


def search(broker: AnyBroker, kind: str, params: Any) -> list[MessageView]:
    """Run one search on one message source."""
    topic = str(params.get("topic") or "").strip() or None
    if kind == "id":
        msg_id = need(params, "q")
        if isinstance(broker, Broker):
            view, copies, _ = find_by_id(broker.store, msg_id, topic)
        else:
            view, copies, _ = find_remotely(broker, msg_id, topic)
        return [] if view is None else [view, *copies]
    topic = need(params, "topic")
    if kind == "key":
        if isinstance(broker, Broker):
            return broker.store.query_by_key(topic, need(params, "q"), max_count=RESULTS_MAX)
        return AdminCalls(broker.context).query_by_key(topic, need(params, "q"), RESULTS_MAX)
    if kind == "unique":
        return broker.find_by_unique_key(topic, need(params, "q"))
    if kind == "offset":
        _, view, _ = message_at(reader(broker), topic, int(need(params, "queue", number=True)),
                                int(need(params, "offset", number=True)))
        return [] if view is None else [view]
    if kind == "time":
        return time_range(broker, topic, parse_moment_ms(need(params, "begin")),
                          parse_moment_ms(need(params, "end")))
    raise CliError(f"unknown search {kind!r}: one of {', '.join(SEARCH_KINDS)}")


def search_page(console: Console, request: Request) -> Response:
    """The search form and, once submitted, the results of every message source."""
    params = request.query_params
    kind = params.get("by") or ""
    results: list[tuple[str, Any]] = []
    if kind:
        results = [(source, console.sources.with_broker(
                        source, lambda broker: search(broker, kind, params)))
                   for source in console.sources.broker_sources]
    return console.render(request, "messages.html", "Messages", refresh=False, kinds=SEARCH_KINDS,
                          kind=kind, params=params, results=results, link=message_link)


def body_views(body: bytes) -> dict[str, str]:
    """How a body reads: ``json`` (pretty), ``text``, and always ``hex``."""
    shown = body[:BODY_SHOWN_BYTES]
    views = {"hex": " ".join(f"{byte:02x}" for byte in shown[:4096])}
    try:
        text = shown.decode("utf-8")
    except UnicodeDecodeError:
        return views
    views["text"] = text
    try:
        views["json"] = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        pass
    return views


def database_rows(engine: Engine, message_id: str) -> dict[str, Any]:
    """The message's stub and its rows per consumer group in the log tables."""
    rows: dict[str, Any] = {"stub": get_stub(engine, message_id)}
    with engine.connect() as connection:
        for table in (message_log, message_processed, message_resend):
            rows[table.name] = [dict(row._mapping) for row in connection.execute(
                select(table).where(table.c.message_id == message_id))]
    return rows


def report_rows(run: Path, message_id: str) -> list[dict[str, str]]:
    """What the run's ``classification.csv`` says about the message (one row per group)."""
    path = run / "classification.csv"
    if not path.is_file():
        return []
    with path.open("rb") as handle:
        if not message_id or os.fstat(handle.fileno()).st_size == 0:
            text = handle.read().decode()
            return [row for row in csv.DictReader(io.StringIO(text, newline=""))
                    if row.get("message_id") == message_id]
        return matching_rows(handle, message_id)


def matching_rows(handle: io.BufferedReader, message_id: str) -> list[dict[str, str]]:
    """The CSV rows of ``handle`` whose ``message_id`` is ``message_id``: only the lines that
    contain it are parsed (a byte search, not a read of every row). The file is read
    ``SEARCH_CHUNK_BYTES`` of whole lines at a time: a mapping of it would keep every page the
    search went through in the process (a large report is a hundred megabytes)."""
    header = next(csv.reader([handle.readline().decode()]))
    needle, lines = message_id.encode(), []
    buffer = bytearray(SEARCH_CHUNK_BYTES)  # reused: no new pages per chunk
    kept = 0  # bytes of an unfinished line at its front
    while True:
        if kept == len(buffer):  # one line longer than the buffer
            buffer.extend(bytes(len(buffer)))
        with memoryview(buffer) as view:
            read = handle.readinto(view[kept:])
        filled = kept + read
        cut = buffer.rfind(b"\n", 0, filled) + 1 if read else filled  # whole lines up to it
        at = buffer.find(needle, 0, cut)
        while at >= 0:
            start = buffer.rfind(b"\n", 0, at) + 1
            end = buffer.find(b"\n", at, cut)
            end = cut if end < 0 else end
            lines.append(buffer[start:end].decode())
            at = buffer.find(needle, end, cut)
        if not read:
            break
        buffer[:filled - cut] = buffer[cut:filled]
        kept = filled - cut
    return [row for row in csv.DictReader(lines, fieldnames=header)
            if row.get("message_id") == message_id]


def locate(broker: AnyBroker, params: Any) -> tuple[MessageView, list[MessageView]]:
    """The record the page is about, and the other records with its UNIQ_KEY in its topic and
    the retry and dead-letter topics (not every topic of the store: one key-index lookup per
    topic, a thousand topics make that half a second)."""
    topic = need(params, "topic")
    _, view, _ = message_at(reader(broker), topic, int(need(params, "queue", number=True)),
                            int(need(params, "offset", number=True)))
    if view is None:
        raise CliError(f"no message at {topic} queue {params.get('queue')} offset "
                       f"{params.get('offset')}")
    copies: list[MessageView] = []
    if view.unique_key and isinstance(broker, Broker):
        store = broker.store  # every record with the UNIQ_KEY, as ``query id`` finds them
        names = sorted(name for name in store.topics() if name == view.topic or
                       name.startswith((RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX)))
        copies = [copy for name in names
                  for copy in store.query_by_unique_key(name, view.unique_key)
                  if (copy.topic, copy.queue_id, copy.queue_offset)
                  != (view.topic, view.queue_id, view.queue_offset)]
    return view, copies


def message_page(console: Console, request: Request) -> Response:
    """One message end to end."""
    params = request.query_params
    source = params.get("source") or "store"
    found = console.sources.with_broker(source, lambda broker: locate(broker, params))
    context: dict[str, Any] = {"source": source, "found": found, "link": message_link}
    if not isinstance(found, SourceError):
        view = found[0]
        context["bodies"] = body_views(view.body)
        message_id = view.unique_key or ""
        if console.settings.database_url and message_id:
            context["database"] = console.sources.with_database(
                lambda engine: database_rows(engine, message_id))
        runs = console.sources.report_runs() if console.settings.reports_dir else None
        if isinstance(runs, list) and runs:
            context["report"] = {"run": runs[-1].name, "rows": attempt(
                "reports", lambda: report_rows(runs[-1], message_id))}
    return console.render(request, "message.html", "Message", **context)


def routes(console: Console) -> list[Route]:
    """The search and message pages."""
    return [Route("/messages", lambda request: search_page(console, request)),
            Route("/message", lambda request: message_page(console, request))]
