"""Dead letters per consumer group, grouped by failure class (``DLQ_FINGERPRINT``), and the
requeue of one, a selection, a whole class or the whole group — ``postbox dlq resend``'s own
calls (``offsets_to_resend``, ``resend_one``): a fresh copy to the group's retry topic, never
to the original topic's other groups."""

from __future__ import annotations

import dataclasses
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from postbox.cli.common import CliError
from postbox.cli.dlq_commands import (
    failure_class,
    iter_dead_letters,
    offsets_to_resend,
    original_topic,
    resend_one,
)
from postbox.cli.remote import remote_resend_marks
from postbox.storage_engine import Broker, MessageView
from postbox.storage_engine.broker.dlq_resends import ResendMark
from postbox.storage_engine.formats import PROPERTY_DLQ_REASON
from postbox.storage_engine.formats.topic_names import DLQ_TOPIC_PREFIX

from .pages_topics import topic_list
from .sources import AnyBroker
from .web import Console, ids_of

SHOWN_MAX = 500


@dataclasses.dataclass
class FailureClass:
    """Dead letters of one group that failed the same way."""

    fingerprint: str
    shape: str
    letters: list[tuple[MessageView, ResendMark | None]]


def dead_letter_groups(broker: AnyBroker) -> list[str]:
    """Consumer groups that have a dead-letter topic (``%DLQ%group``)."""
    return sorted(document["topic"][len(DLQ_TOPIC_PREFIX):] for document in topic_list(broker)
                  if document["topic"].startswith(DLQ_TOPIC_PREFIX))


def classes_of(broker: AnyBroker, group: str) -> list[FailureClass]:
    """The group's dead letters (first ``SHOWN_MAX``) by failure class, biggest first."""
    views = []
    for view in iter_dead_letters(broker, group, 0):
        views.append(view)
        if len(views) >= SHOWN_MAX:
            break
    marks = (broker.dlq_resends.marks(group) if isinstance(broker, Broker)
             else remote_resend_marks(broker, group, views))
    classes: dict[str, FailureClass] = {}
    for view in views:
        fingerprint, shape = failure_class(view)
        entry = classes.setdefault(fingerprint, FailureClass(fingerprint,
                                                             shape or "(no reason given)", []))
        entry.letters.append((view, marks.get(view.queue_offset)))
    return sorted(classes.values(), key=lambda entry: -len(entry.letters))


def dlq_page(console: Console, request: Request) -> Response:
    """Groups with dead letters; with ``?group=`` that group's dead letters by class."""
    group = request.query_params.get("group") or None

    def read(broker: AnyBroker) -> dict[str, Any]:
        return {"groups": dead_letter_groups(broker),
                "classes": classes_of(broker, group) if group else []}

    return console.render(request, "dlq.html", "Dead letters", group=group,
                          results=console.sources.each_broker(read), original_topic=original_topic,
                          reason_of=lambda view: view.properties.get(PROPERTY_DLQ_REASON),
                          params=request.query_params)


def requeue(console: Console, group: str, fields: dict[str, Any]) -> tuple[str, str]:
    """Re-send the chosen dead letters (``offset`` values, a ``fingerprint``, or ``all``) to
    the group's retry topic."""
    source = str(fields.get("source") or "store")
    offsets_text = ids_of(fields, "offset")
    if not all(text.isdigit() for text in offsets_text):
        raise CliError(f"offsets must be whole numbers, got {offsets_text}")
    fingerprint = str(fields.get("fingerprint") or "")
    everything = str(fields.get("all") or "") == "1"
    if not offsets_text and not fingerprint and not everything:
        raise CliError("choose dead letters to requeue")
    with console.sources.broker(source, writable=True) as broker:
        targets, missing = offsets_to_resend(broker, group, [int(text) for text in offsets_text],
                                             everything or bool(fingerprint))
        if fingerprint:
            targets = [view for view in targets if failure_class(view)[0] == fingerprint]
        if missing:
            raise CliError(f"no dead letter at offset(s) {missing}; nothing re-sent")
        receipts = [resend_one(broker, group, view) for view in targets]
    where = ", ".join(f"dlq {view.queue_offset}→{receipt.topic} q{receipt.queue_id} "
                      f"o{receipt.queue_offset}" for view, receipt in zip(targets, receipts,
                                                                          strict=True))
    return f"{source} group {group}", f"re-sent {len(receipts)}: {where}"


def routes(console: Console) -> list[Route]:
    """The dead-letter page and the requeue action."""
    async def do_requeue(request: Request) -> Response:
        group = request.path_params["group"]
        return await console.write(request, "requeue-dead-letters",
                                   lambda fields: requeue(console, group, fields),
                                   f"/dlq?group={group}")

    return [Route("/dlq", lambda request: dlq_page(console, request)),
            Route("/dlq/{group}/requeue", do_requeue, methods=["POST"])]
