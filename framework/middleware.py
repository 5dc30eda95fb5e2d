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

Async handlers (``async def``, see ``framework.event_loop``): the sync chain above runs in the
consume thread exactly as for a sync handler; its innermost step runs one coroutine on the
consumer's event loop which nests the ``around_consume_async`` of every middleware that
overrides it (registration order, outermost first) around ``await handler(message, *args)``.
``around_consume_async`` returns what ``call_next`` returned (the handler's return value, which
the framework ignores); exceptions propagate and become the outcome as a handler's would
(``SkipMessage`` finishes the message as a success, ``RetryLater``/``DeadLetter``/others as
usual). So a middleware runs an async handler inside an ``AsyncSession`` transaction with::

    async def around_consume_async(self, context, call_next):
        async with self.sessions() as session, session.begin():
            context.handler_args.append(session)
            return await call_next()

Sync hooks (``before_consume``, ``around_consume``, the batch hooks) always run in consume
threads, never on the loop, so they may block; async hooks run on the loop and must not.
``context.run_coroutine(factory)`` runs one-off async work on the loop from a sync hook.

A middleware may add keyword options to ``@app.handler`` by declaring them in
``handler_options`` (name → default), check a handler's use of them in ``check_handler``, and be
built by ``App.start()`` itself with ``from_app`` when a package registers it by entry point
(``framework.plugins``). It reads its options from ``context.handler.options``. A middleware that
passes the handler arguments after the message (``context.handler_args``) names them in
``handler_arguments``, so a handler whose signature cannot take them is refused when it is
registered (``framework.handlers.check_handler_call``), not on every delivery.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from .consumed_message import ConsumedMessage
from .errors import AppStateError
from .outcomes import SUCCESS, ConsumeOutcome, OutcomeKind, SkipMessage

if TYPE_CHECKING:
    from .app import App
    from .event_loop import EventLoopThread
    from .handlers import HandlerSpec

log = logging.getLogger(__name__)

T = TypeVar("T")
NextCall = Callable[[], ConsumeOutcome]
AsyncNextCall = Callable[[], Awaitable[Any]]


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
    event_loop: EventLoopThread | None = field(default=None, repr=False)
    """The consumer's event loop (``run_coroutine``); None outside a consumer."""

    @property
    def message(self) -> ConsumedMessage:
        """The first (usually only) message."""
        return self.messages[0]

    @property
    def is_async(self) -> bool:
        """Whether the handler is a coroutine function (it runs on the event loop, inside the
        ``around_consume_async`` hooks)."""
        return self.handler.is_async

    def run_coroutine(self, factory: Callable[[], Awaitable[T]]) -> T:
        """Run ``factory()``'s coroutine on the consumer's event loop and wait for its result
        (from a sync hook, in the consume thread; never from a coroutine on the loop).

        Raises:
            AppStateError: the context has no event loop (built outside a consumer).
            framework.event_loop.EventLoopError: called on the loop thread itself.
        """
        if self.event_loop is None:
            raise AppStateError(f"no event loop for group {self.consumer_group!r}: "
                                "run_coroutine works inside a consumer")
        return self.event_loop.run(factory)


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
    def handler_arguments(cls, spec: HandlerSpec) -> tuple[str, ...]:
        """The arguments this middleware passes ``spec``'s handler after the message, by name
        (for the registration check and its error); none by default."""
        return ()

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

    async def around_consume_async(self, context: ConsumeContext,
                                   call_next: AsyncNextCall) -> Any:
        """Async handlers only, on the event loop, inside every sync hook: wrap the rest of the
        async chain and return what ``await call_next()`` returned; exceptions propagate (see
        the module docs). Not overriding it costs nothing (the layer is left out)."""
        return await call_next()


def overrides_async_hook(layer: Middleware) -> bool:
    """Whether ``layer``'s class overrides ``around_consume_async``."""
    return type(layer).around_consume_async is not Middleware.around_consume_async


def invoke(context: ConsumeContext, middleware: list[Middleware]) -> ConsumeOutcome:
    """Run the handler of ``context`` through ``middleware``; never raises."""

    def call_handler() -> ConsumeOutcome:
        spec = context.handler
        argument: Any = context.messages if spec.batch_size > 1 else context.messages[0]
        try:
            if spec.is_async:
                context.run_coroutine(lambda: _async_chain(context, middleware))
            else:
                _check_not_awaitable(spec, spec.function(argument, *context.handler_args))
        except SkipMessage:  # from an async hook
            context.skipped = True
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


async def _async_chain(context: ConsumeContext, middleware: list[Middleware]) -> Any:
    """On the loop: the async hooks around the handler, under its ``max_concurrency``."""
    spec = context.handler
    argument: Any = context.messages if spec.batch_size > 1 else context.messages[0]

    async def call_handler() -> Any:
        return await spec.function(argument, *context.handler_args)

    call: AsyncNextCall = call_handler
    for layer in reversed(middleware):
        if overrides_async_hook(layer):
            call = _bind_async(layer, context, call)
    if spec.max_concurrency is None or context.event_loop is None:
        return await call()
    async with context.event_loop.semaphore(spec, spec.max_concurrency):
        return await call()


def _bind_async(layer: Middleware, context: ConsumeContext,
                call_next: AsyncNextCall) -> AsyncNextCall:
    return lambda: layer.around_consume_async(context, call_next)


def _check_not_awaitable(spec: HandlerSpec, result: object) -> None:
    """A sync-looking handler that returned a coroutine did nothing yet: fail, do not drop."""
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()
        raise TypeError(f"handler {spec.name} returned an awaitable but is not a coroutine "
                        "function: define it with async def")


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
