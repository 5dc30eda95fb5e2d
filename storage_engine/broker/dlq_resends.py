"""What an operator re-sent from a group's dead-letter queue: ``config/dlqResends.json``.

``Broker.resend_dead_letter`` sends a dead letter again to the group that dead-lettered it only,
through that group's ``%RETRY%group`` topic with ``RETRY_TOPIC`` set to the topic it first failed
on (so no other group sees it again, and consumers see it under its original topic), and records
the resend here: per group, per DLQ offset, how often it was re-sent, when last, and the
offsetMsgId of the last copy. The DLQ is a log and keeps its records; this mark is what tells an
operator (and ``postbox dlq list``) which of them were already re-sent. It is a config file of
the store (crash-safe replace with a ``.bak``, ``ConfigFile``), so it survives restarts; a
Postbox extension that RocketMQ neither reads nor writes.

A store opened read-only loads it and never writes it.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

from ..clock import Clock
from ..contract.message import GetStatus
from ..errors import MessageNotFoundError
from ..formats import PROPERTY_RETRY_TOPIC, MessageView
from ..formats.topic_names import DLQ_TOPIC_PREFIX, dead_letter_topic
from ..store.message_store import MessageStore
from .config_file import ConfigFile

RESENDS_FILE_NAME = "dlqResends.json"


@dataclasses.dataclass(frozen=True)
class ResendMark:
    """One dead letter's resends: how many, the last one's time and new offsetMsgId."""

    count: int
    last_ms: int
    last_msg_id: str

    def document(self) -> dict[str, Any]:
        """The JSON form (also the file's)."""
        return {"count": self.count, "last_ms": self.last_ms, "last_msg_id": self.last_msg_id}


def dead_letter_at(store: MessageStore, group: str, queue_offset: int) -> tuple[MessageView, str]:
    """The dead letter at ``queue_offset`` of ``%DLQ%group`` and the topic it first failed on.

    Raises:
        MessageNotFoundError: no dead letter there, or one without a known original topic.
    """
    topic = dead_letter_topic(group)
    result = store.get_message(group, topic, 0, queue_offset, 1)
    if result.status is not GetStatus.FOUND or result.messages[0].queue_offset != queue_offset:
        raise MessageNotFoundError(
            f"no dead letter at offset {queue_offset} of {topic} queue 0 (status "
            f"{result.status.value}, offsets [{result.min_offset}, {result.max_offset}))")
    view = result.messages[0]
    target = view.properties.get(PROPERTY_RETRY_TOPIC) or view.topic
    if target.startswith(DLQ_TOPIC_PREFIX):
        raise MessageNotFoundError(f"dead letter at offset {queue_offset} of {topic} has no "
                                   f"{PROPERTY_RETRY_TOPIC}: its original topic is unknown",
                                   log_position=view.log_position)
    return view, target


def _parse(raw: Any) -> dict[str, dict[int, ResendMark]]:
    """The file's document, checked; ``ValueError`` when it has another shape."""
    if not isinstance(raw, dict) or not isinstance(raw.get("groups", {}), dict):
        raise ValueError("expected {\"groups\": {group: {offset: mark}}}")
    marks: dict[str, dict[int, ResendMark]] = {}
    for group, offsets in raw.get("groups", {}).items():
        if not isinstance(offsets, dict):
            raise ValueError(f"group {group!r}: expected an object of offsets")
        try:
            marks[group] = {int(offset): ResendMark(int(mark["count"]), int(mark["last_ms"]),
                                                    str(mark["last_msg_id"]))
                            for offset, mark in offsets.items()}
        except (KeyError, TypeError) as error:
            raise ValueError(f"group {group!r}: {error}") from error
    return marks


class DlqResends:
    """The resend marks of every group, in memory and in ``config/dlqResends.json``."""

    def __init__(self, config_dir: Path, clock: Clock) -> None:
        self._file = ConfigFile(config_dir / RESENDS_FILE_NAME, clock=clock)
        self._lock = threading.Lock()
        self._marks: dict[str, dict[int, ResendMark]] = {}

    def load(self) -> None:
        """Read the file (nothing re-sent yet when it is absent)."""
        marks = self._file.load(_parse)
        with self._lock:
            self._marks = marks or {}

    def marks(self, group: str) -> dict[int, ResendMark]:
        """DLQ offset → mark, for the group's re-sent dead letters."""
        with self._lock:
            return dict(self._marks.get(group, {}))

    def record(self, group: str, dlq_offset: int, msg_id: str, now_ms: int) -> ResendMark:
        """Count one more resend of ``dlq_offset`` and persist the file at once."""
        with self._lock:
            previous = self._marks.setdefault(group, {}).get(dlq_offset)
            mark = ResendMark((previous.count if previous else 0) + 1, now_ms, msg_id)
            self._marks[group][dlq_offset] = mark
            document = {"groups": {name: {str(offset): entry.document()
                                          for offset, entry in sorted(offsets.items())}
                                   for name, offsets in sorted(self._marks.items())}}
        self._file.persist(document)
        return mark
