"""Handler registrations: ``HandlerSpec`` (one ``@app.handler``) and ``ConsumerGroupPlan``
(all handlers of one consumer group, which one ``Consumer`` runs).

Registration is pure: it validates options and records them; nothing connects. Conflicts are
found when the app starts: one group may handle several topics, but not the same topic twice,
and all its handlers must agree on orderly/broadcast/consume-from (they share one consumer).

A handler's signature is checked when it is registered (``check_handler_call``): it is called
with the message (a list of them when ``batch_size`` > 1) followed by the arguments the app's
middleware pass it (``Middleware.handler_arguments``: a database ``session`` for
``idempotent=True``), and one that cannot take exactly those — a ``session`` parameter without
the option that passes it, or the option without the parameter — is refused there instead of
failing on every delivery until its messages are dead-lettered.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from postbox.storage_engine import ConsumeFrom, validate_topic
from postbox.storage_engine.formats.topic_names import is_system_group_topic

from .errors import ConfigurationError, HandlerRegistrationError
from .event_loop import is_coroutine_callable

RECONSUME_COUNT_MAX_DEFAULT = 16
BATCH_SIZE_MAX = 1024


@dataclass(frozen=True)
class HandlerSpec:
    """One registered handler and its options (see ``App.handler``)."""

    function: Callable[..., Any]
    topic: str
    consumer_group: str
    tags: str = "*"
    consume_from: ConsumeFrom = ConsumeFrom.LAST
    consume_timestamp_ms: int | None = None
    orderly: bool = False
    broadcast: bool = False
    reconsume_count_max: int | None = RECONSUME_COUNT_MAX_DEFAULT
    batch_size: int = 1
    options: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Options added by middleware (``Middleware.handler_options``), as the handler gave them."""
    max_concurrency: int | None = None
    """Async handlers: at most this many of its coroutines in flight (None: bounded by the
    consumer's consume threads only)."""
    is_async: bool = field(init=False, compare=False)
    """Whether ``function`` is a coroutine function (it runs on the consumer's event loop)."""

    def __post_init__(self) -> None:
        if not callable(self.function):
            raise ConfigurationError(f"handler for {self.topic!r} is not callable")
        object.__setattr__(self, "is_async", is_coroutine_callable(self.function))
        if self.max_concurrency is not None and (
                type(self.max_concurrency) is not int or self.max_concurrency < 1):
            raise ConfigurationError("max_concurrency must be an int >= 1 or None, got "
                                     f"{self.max_concurrency!r}")
        if self.max_concurrency is not None and not self.is_async:
            raise ConfigurationError(f"max_concurrency={self.max_concurrency} is for async "
                                     f"handlers; {self.name} is not a coroutine function (sync "
                                     "handlers are bounded by consume_thread_count)")
        try:
            validate_topic(self.topic)
        except ValueError as error:
            raise ConfigurationError(f"handler topic: {error}") from error
        if is_system_group_topic(self.topic):
            raise ConfigurationError(f"handler topic {self.topic!r}: subscribe to the original "
                                     "topic; retries are delivered to its handler")
        if not isinstance(self.consumer_group, str) or not self.consumer_group:
            raise ConfigurationError("handler consumer_group must be a non-empty string")
        if not isinstance(self.consume_from, ConsumeFrom):
            object.__setattr__(self, "consume_from", parse_consume_from(self.consume_from))
        if self.reconsume_count_max is not None and (
                type(self.reconsume_count_max) is not int or self.reconsume_count_max < 0):
            raise ConfigurationError("reconsume_count_max must be an int >= 0 or None, got "
                                     f"{self.reconsume_count_max!r}")
        if type(self.batch_size) is not int or not 1 <= self.batch_size <= BATCH_SIZE_MAX:
            raise ConfigurationError(f"batch_size must be in 1..{BATCH_SIZE_MAX}, got "
                                     f"{self.batch_size!r}")
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        if self.orderly and self.broadcast:
            raise ConfigurationError("a handler cannot be both orderly and broadcast")

    @property
    def name(self) -> str:
        """``module.function`` for logs."""
        function = self.function
        return f"{getattr(function, '__module__', '?')}.{getattr(function, '__qualname__', '?')}"


def parse_consume_from(value: object) -> ConsumeFrom:
    """``"last"`` / ``"first"`` / ``"timestamp"`` (or the enum)."""
    if isinstance(value, ConsumeFrom):
        return value
    try:
        return ConsumeFrom(str(value).lower())
    except ValueError:
        choices = ", ".join(repr(c.value) for c in ConsumeFrom)
        raise ConfigurationError(f"consume_from={value!r}; choose one of {choices}") from None


@dataclass(frozen=True)
class ConsumerGroupPlan:
    """Everything one consumer of a group runs: its handlers by topic and its mode."""

    consumer_group: str
    handlers: dict[str, HandlerSpec]

    @property
    def orderly(self) -> bool:
        """Whether the group consumes each queue in order."""
        return self._first.orderly

    @property
    def broadcast(self) -> bool:
        """Whether every consumer of the group gets every message."""
        return self._first.broadcast

    @property
    def has_async(self) -> bool:
        """Whether some handler of the group is a coroutine function."""
        return any(spec.is_async for spec in self.handlers.values())

    @property
    def _first(self) -> HandlerSpec:
        return next(iter(self.handlers.values()))


def check_handler_call(spec: HandlerSpec, passed: Sequence[tuple[str, str]]) -> None:
    """Raise ``ConfigurationError`` unless ``spec.function`` can be called with the message
    followed by ``passed`` ((argument, the middleware and option that pass it) pairs). A
    callable whose signature Python cannot read (some builtins) is not checked."""
    try:
        signature = inspect.signature(spec.function)
    except (TypeError, ValueError):
        return
    first = "messages" if spec.batch_size > 1 else "message"
    arguments = [first, *(name for name, _ in passed)]
    try:
        signature.bind(*arguments)
    except TypeError as error:
        call = f"{getattr(spec.function, '__name__', 'handler')}({', '.join(arguments)})"
        if passed:
            given = "; ".join(f"{name} from {source}" for name, source in passed)
            hint = (f"it is passed {given}: add the parameter(s), or drop the option that "
                    "passes them")
        else:
            hint = ("arguments after the message come only from middleware (a database "
                    "session from idempotent=True, for one): set the option that passes the "
                    "parameter, give it a default, or remove it")
        raise ConfigurationError(
            f"handler {spec.name}{signature} (topic {spec.topic!r}, group "
            f"{spec.consumer_group!r}) is called as {call}, which its signature refuses "
            f"({error}); {hint}") from None


def plan_groups(specs: Iterable[HandlerSpec]) -> list[ConsumerGroupPlan]:
    """Group handlers by consumer group, rejecting conflicts."""
    by_group: dict[str, dict[str, HandlerSpec]] = {}
    for spec in specs:
        handlers = by_group.setdefault(spec.consumer_group, {})
        if spec.topic in handlers:
            raise HandlerRegistrationError(
                f"group {spec.consumer_group!r} already has a handler for topic {spec.topic!r} "
                f"({handlers[spec.topic].name}); one handler per topic and group")
        for other in handlers.values():
            for option in ("orderly", "broadcast", "consume_from"):
                if getattr(other, option) != getattr(spec, option):
                    raise HandlerRegistrationError(
                        f"group {spec.consumer_group!r}: {spec.name} and {other.name} disagree "
                        f"on {option}; handlers of one group share one consumer")
        handlers[spec.topic] = spec
    return [ConsumerGroupPlan(group, handlers) for group, handlers in by_group.items()]
