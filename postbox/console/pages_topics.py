"""Topics (queues and offsets; create one) and consumer groups (per-queue committed offset,
lag, the oldest unconsumed message's age; reset offsets to a time)."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from postbox.cli.common import CliError
from postbox.cli.consumer_commands import read_progress, reset_offsets_by_time
from postbox.cli.query_commands import CLI_CONSUMER_GROUP
from postbox.cli.store_commands import topic_documents
from postbox.network.client.inspect_calls import InspectCalls
from postbox.storage_engine import Broker, GetStatus

from .sources import AnyBroker
from .web import Console

QUEUE_COUNT_MAX = 64
TOPICS_PER_PAGE = 100
GROUPS_PER_PAGE = 20


@dataclasses.dataclass(frozen=True)
class Paged:
    """One page of a long list: its items, the page number (from 1) and how many in all."""

    items: list[Any]
    page: int
    pages: int
    total: int


def page_of(items: list[Any], page: int, size: int) -> Paged:
    """Page ``page`` (clamped to 1..last) of ``items``, ``size`` a page."""
    pages = max(1, -(-len(items) // size))
    page = min(max(page, 1), pages)
    return Paged(items[(page - 1) * size:page * size], page, pages, len(items))


def page_number(request: Request) -> int:
    """``?page=`` (1 when missing or not a number)."""
    text = request.query_params.get("page") or "1"
    return int(text) if text.isdigit() else 1


def topic_list(broker: AnyBroker) -> list[dict[str, Any]]:
    """Every topic with its queues' min/max offsets (``postbox store topics``)."""
    if isinstance(broker, Broker):
        return topic_documents(broker.store)
    return InspectCalls(broker.context).topic_offsets()


def oldest_age_s(broker: AnyBroker, topic: str, queue_id: int, offset: int) -> float | None:
    """Seconds since the message at ``offset`` (the group's next one) was stored."""
    read = broker.store.get_message if isinstance(broker, Broker) else broker.pull
    result = read(CLI_CONSUMER_GROUP, topic, queue_id, offset, max_count=1)
    if result.status is not GetStatus.FOUND or not result.messages:
        return None
    return max(time.time() - result.messages[0].store_timestamp_ms / 1000, 0.0)


def group_list(broker: AnyBroker, group: str | None = None,
               names: list[str] | None = None) -> list[dict[str, Any]]:
    """Each group's queues (``postbox consumer progress``) with the age of the oldest
    unconsumed message of each lagging queue; ``names``: only these groups."""
    groups = []
    progresses = (read_progress(broker, group) if names is None or group is not None
                  else [progress for name in names for progress in read_progress(broker, name)])
    for progress in progresses:
        document = progress.document()
        for queue, row in zip(progress.queues, document["queues"], strict=True):
            start = queue.committed_offset if queue.committed_offset is not None \
                else queue.min_offset
            row["oldest_age_s"] = (oldest_age_s(broker, queue.topic, queue.queue_id, start)
                                   if queue.lag else None)
        groups.append(document)
    return groups


def parse_moment_ms(text: str) -> int:
    """Epoch ms from digits, or from an ISO 8601 time (UTC when it has no offset)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as error:
        raise CliError(f"not a time: {text!r} (epoch ms or ISO 8601, e.g. "
                       "2026-11-29T10:00:00)") from error
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def topics_page(console: Console, request: Request) -> Response:
    """Topics of every message source, ``TOPICS_PER_PAGE`` a page (``?page=``)."""
    page = page_number(request)
    return console.render(request, "topics.html", "Topics",
                          results=console.sources.each_broker(
                              lambda broker: page_of(topic_list(broker), page, TOPICS_PER_PAGE)),
                          params=request.query_params)


def group_page(broker: AnyBroker, group: str | None, page: int) -> Paged:
    """One group, or page ``page`` of every group (``GROUPS_PER_PAGE`` a page)."""
    if group is not None:
        found = group_list(broker, group)
        return Paged(found, 1, 1, len(found))
    names = page_of(broker.consumer_groups(), page, GROUPS_PER_PAGE)
    return dataclasses.replace(names, items=group_list(broker, names=names.items))


def groups_page(console: Console, request: Request) -> Response:
    """Consumer groups of every message source, ``GROUPS_PER_PAGE`` a page (``?page=``); one
    group with ``?group=``."""
    group = request.query_params.get("group") or None
    page = page_number(request)
    return console.render(request, "groups.html", "Consumer groups",
                          results=console.sources.each_broker(
                              lambda broker: group_page(broker, group, page)),
                          group=group, params=request.query_params)


def create_topic(console: Console, fields: dict[str, Any]) -> tuple[str, str]:
    """Create a topic on the chosen source (the broker's ``create_topic``)."""
    topic = str(fields.get("topic") or "").strip()
    source = str(fields.get("source") or "store")
    count_text = str(fields.get("queues") or "4").strip()
    if not topic:
        raise CliError("give a topic name")
    if not count_text.isdigit() or not 1 <= int(count_text) <= QUEUE_COUNT_MAX:
        raise CliError(f"queues must be 1..{QUEUE_COUNT_MAX}, got {count_text!r}")
    with console.sources.broker(source, writable=True) as broker:
        broker.create_topic(topic, int(count_text))
    return f"{source} topic {topic}", f"created with {count_text} queues"


def reset_group(console: Console, group: str, fields: dict[str, Any]) -> tuple[str, str]:
    """Reset ``group``'s offsets on a topic to a time (``postbox consumer reset``)."""
    topic = str(fields.get("topic") or "").strip()
    source = str(fields.get("source") or "store")
    if not topic:
        raise CliError("give the topic to reset")
    timestamp_ms = parse_moment_ms(str(fields.get("time") or ""))
    force = str(fields.get("force") or "") == "1"
    with console.sources.broker(source, writable=True) as broker:
        resets = reset_offsets_by_time(broker, group, topic, timestamp_ms, force=force)
    moved = ", ".join(f"q{reset.queue_id} {reset.before}→{reset.after}" for reset in resets)
    return f"{source} group {group} topic {topic}", f"reset to {timestamp_ms}: {moved}"


def routes(console: Console) -> list[Route]:
    """The topic and group pages and their two actions."""
    async def do_create(request: Request) -> Response:
        return await console.write(request, "create-topic",
                                   lambda fields: create_topic(console, fields), "/topics")

    async def do_reset(request: Request) -> Response:
        group = request.path_params["group"]
        return await console.write(request, "reset-offsets",
                                   lambda fields: reset_group(console, group, fields),
                                   f"/groups?group={group}")

    return [Route("/topics", lambda request: topics_page(console, request)),
            Route("/topics/create", do_create, methods=["POST"]),
            Route("/groups", lambda request: groups_page(console, request)),
            Route("/groups/{group}/reset", do_reset, methods=["POST"])]
