"""Middleware: hooks around every handler call, so cross-cutting behaviour (exactly-once
effects, metrics, tracing) plugs in without touching handlers.

A middleware overrides ``before_consume`` / ``after_consume``, or ``around_consume`` for full
control (run the handler inside a database transaction, skip it, change its arguments). The
chain runs in registration order: the first middleware is the outermost. ``before_consume`` may
raise ``SkipMessage`` to finish the message as a success without calling the handler; any other
exception from a middleware is treated like a handler failure (the message is retried later,
nothing is lost). Middleware instances are shared by all consume threads: keep them thread-safe.

Concurrent (and broadcast) consumption also calls ``before_batch`` / ``after_batch`` once per
consume task, around the handler calls of the messages it carries, so a middleware can do per
message work for all of them at once (one database transaction instead of one per message).
They are an optimisation only: a middleware must give every message its full treatment in
``around_consume`` when they were not called (orderly consumption, direct ``invoke`` callers).

A middleware may add keyword options to ``@app.handler`` by declaring them in
``handler_options`` (name → default), check a handler's use of them in ``check_handler``, and be
built by ``App.start()`` itself with ``from_app`` when a package registers it by entry point
(``framework.plugins``). It reads its options from ``context.handler.options``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from .consumed_message import ConsumedMessage
from .outcomes import SUCCESS, ConsumeOutcome, OutcomeKind, SkipMessage

if TYPE_CHECKING:
    from .app import App
    from .handlers import HandlerSpec

log = logging.getLogger(__name__)

NextCall = Callable[[], ConsumeOutcome]


@dataclass
class ConsumeContext:
    """One handler invocation: the messages (one unless ``batch_size`` > 1) and its handler."""

    consumer_group: str
    handler: HandlerSpec
    messages: list[ConsumedMessage]
    handler_args: list[Any] = field(default_factory=list)
    """Extra positional arguments for the handler after the message (e.g. a DB session)."""
    state: dict[str, Any] = field(default_factory=dict)
    """Scratch space middleware share during this invocation."""
    skipped: bool = False

    @property
    def message(self) -> ConsumedMessage:
        """The first (usually only) message."""
        return self.messages[0]


class Middleware:
    """Base class: every hook does nothing."""

    handler_options: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    """The ``@app.handler`` keyword options this middleware adds, each with its default; a
    handler's values are in ``HandlerSpec.options`` (only those it passed)."""

    @classmethod
    def check_handler(cls, spec: HandlerSpec) -> None:
        """Raise ``ConfigurationError`` if ``spec`` uses this middleware's options wrongly
        (called when the handler is registered)."""

    @classmethod
    def from_app(cls, app: App) -> Middleware:
        """Build this middleware from ``app``'s configuration (for a middleware registered in
        the ``postbox.middleware`` entry-point group, which ``App.start()`` adds itself)."""
        raise NotImplementedError(f"{cls.__qualname__} cannot be built from an app: add it "
                                  "with app.add_middleware(...)")

    def before_consume(self, context: ConsumeContext) -> None:
        """Called before the handler; raise ``SkipMessage`` to skip it."""

    def after_consume(self, context: ConsumeContext, outcome: ConsumeOutcome) -> None:
        """Called after the handler (or the skip) with its outcome."""

    def before_batch(self, contexts: list[ConsumeContext]) -> None:
        """Called once per consume task before its first handler call, with the contexts it
        will run in order (if the queue is dropped or the consumer stops, the later ones never
        run). Must not raise: an exception is logged and ignored."""

    def after_batch(self, contexts: list[ConsumeContext]) -> None:
        """Called once per consume task after its last handler call (or after it stopped
        early). Must not raise: an exception is logged and ignored."""

    def around_consume(self, context: ConsumeContext, call_next: NextCall) -> ConsumeOutcome:
        """Wrap the rest of the chain; the default calls the two hooks around it."""
        try:
            self.before_consume(context)
        except SkipMessage:
            context.skipped = True
            outcome = SUCCESS
        else:
            outcome = call_next()
        self.after_consume(context, outcome)
        return outcome


def invoke(context: ConsumeContext, middleware: list[Middleware]) -> ConsumeOutcome:
    """Run the handler of ``context`` through ``middleware``; never raises."""

    def call_handler() -> ConsumeOutcome:
        spec = context.handler
        argument: Any = context.messages if spec.batch_size > 1 else context.messages[0]
        try:
            spec.function(argument, *context.handler_args)
        except Exception as error:  # the handler's failure is an outcome, not a crash
            return ConsumeOutcome.from_error(error)
        return SUCCESS

    call: NextCall = call_handler
    for layer in reversed(middleware):
        call = _bind(layer, context, call)
    try:
        return call()
    except SkipMessage:
        context.skipped = True
        return SUCCESS
    except Exception as error:  # a middleware failed: retry later, lose nothing
        return ConsumeOutcome(OutcomeKind.RETRY, error, reason=f"middleware: {error}")


def before_batch(contexts: list[ConsumeContext], middleware: list[Middleware]) -> None:
    """Call every layer's ``before_batch`` (outermost first); never raises."""
    for layer in middleware:
        _call_batch_hook(layer.before_batch, contexts)


def after_batch(contexts: list[ConsumeContext], middleware: list[Middleware]) -> None:
    """Call every layer's ``after_batch`` (innermost first); never raises."""
    for layer in reversed(middleware):
        _call_batch_hook(layer.after_batch, contexts)


def _call_batch_hook(hook: Callable[[list[ConsumeContext]], None],
                     contexts: list[ConsumeContext]) -> None:
    if not contexts:
        return
    try:
        hook(contexts)
    except Exception:  # an optimisation failed: the messages still get around_consume
        log.exception("[consume] middleware hook %s failed for %d messages", hook.__qualname__,
                      len(contexts))


def _bind(layer: Middleware, context: ConsumeContext, call_next: NextCall) -> NextCall:
    return lambda: layer.around_consume(context, call_next)
