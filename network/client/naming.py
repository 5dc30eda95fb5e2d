"""Namespaces: several applications (or test runs) sharing one RocketMQ cluster.

As RocketMQ's own clients do, a namespace ``NS`` prefixes every topic and group the client names
on the wire: ``NS%orders``, ``NS%billing``, and for the group's retry and dead-letter topics
``%RETRY%NS%billing`` and ``%DLQ%NS%billing``. Names read back from a broker are stripped the
same way, so the application only ever sees its own names. System topics (``TBW102``,
``RMQ_SYS_*``, ``SCHEDULE_TOPIC_XXXX``...) are never prefixed. An empty namespace changes
nothing. Pure; immutable.
"""

from __future__ import annotations

import re

from postbox.storage_engine.formats.topic_names import (
    DLQ_TOPIC_PREFIX,
    RETRY_TOPIC_PREFIX,
    is_system_resource,
)

SEPARATOR = "%"
_NAMESPACE = re.compile(r"[A-Za-z0-9_-]{1,64}")


class Namespace:
    """Wraps application names into wire names and back."""

    __slots__ = ("_prefix", "name")

    def __init__(self, name: str = "") -> None:
        if name and not _NAMESPACE.fullmatch(name):
            raise ValueError(f"namespace {name!r}: 1 to 64 letters, digits, '_' or '-'")
        self.name = name
        self._prefix = name + SEPARATOR if name else ""

    def wrap(self, name: str) -> str:
        """The wire name of an application topic or group (retry/DLQ topics included)."""
        if not self.name or is_system_resource(name):
            return name
        for prefix in (RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX):
            if name.startswith(prefix):
                rest = name[len(prefix):]
                return name if rest.startswith(self._prefix) else prefix + self._prefix + rest
        return name if name.startswith(self._prefix) else self._prefix + name

    def unwrap(self, name: str) -> str:
        """The application name of a wire name (names outside the namespace unchanged)."""
        if not self.name:
            return name
        for prefix in (RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX):
            if name.startswith(prefix):
                rest = name[len(prefix):]
                return prefix + rest[len(self._prefix):] if rest.startswith(self._prefix) \
                    else name
        return name[len(self._prefix):] if name.startswith(self._prefix) else name

    def owns(self, name: str) -> bool:
        """Whether a wire name belongs to this namespace (always, when there is none)."""
        if not self.name:
            return True
        for prefix in (RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX):
            if name.startswith(prefix):
                return name[len(prefix):].startswith(self._prefix)
        return name.startswith(self._prefix)

    def __repr__(self) -> str:
        return f"Namespace({self.name!r})"
