"""``App``: the object application code configures, decorates handlers on, starts and stops.

Construction and ``@app.handler`` only record configuration — nothing opens, connects or starts
a thread until ``start()`` (or the first use of ``app.producer``, which opens the store). The
store URL is ``file:///path`` (embedded broker in this process) or
``rocketmq://host:9876`` (a RocketMQ cluster's name servers, ``docs/remote-transport.md``;
``access_key``/``secret_key`` when it enforces access control); ``database_url`` and
``redis_url`` are kept for the layers above (the outbox, middleware). ``start()`` opens the
broker, plans one consumer per consumer group and starts them; ``stop()`` drains them, persists
offsets and closes what the app opened. Thread-safe after ``start()``.

After ``stop()`` the app opens nothing by itself: its producer (also one a caller kept) and
``app.producer`` raise ``AppStateError`` instead of reopening the store behind the caller's
back; ``start()`` makes it usable again.

``with app:`` is the normal form (start on entry, stop on exit, also when the block raises);
``async with app:`` is the same for asyncio servers (start and stop run in a worker thread).
An app that is started (or whose producer opened the store) and never stopped is stopped at
interpreter exit, before Python joins the remaining threads: consumers drain, offsets persist
and the store closes cleanly (no ``abort`` file), so a script that raises between ``start()``
and ``stop()`` still exits instead of waiting forever for the app's non-daemon threads. The
hook holds the app weakly and is armed once per app.

Layers above the framework plug in without the framework importing them: ``on_start``/
``on_stop`` run their services with the app, ``resource`` shares one object per app (a database
engine), and middleware declare the ``@app.handler`` options they add; ``start()`` builds a
middleware registered in the ``postbox.middleware`` entry-point group when a handler sets one
of its options and no added middleware declares it (``framework.plugins``). With
OpenTelemetry installed the app traces (``tracing=``, ``framework.tracing``): its producer makes
PRODUCER spans and its consumers run ``TracingMiddleware`` outside the app's middleware.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import logging
import os
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from postbox.storage_engine import Broker, Clock, ConsumeFrom, SystemClock
from postbox.storage_engine.contract import BrokerClient

from . import environment
from .consumer import Consumer, ConsumerOptions
from .errors import AppStateError, ConfigurationError
from .handlers import (
    RECONSUME_COUNT_MAX_DEFAULT,
    HandlerSpec,
    check_handler_call,
    parse_consume_from,
    plan_groups,
)
from .metrics import AppMetrics, MetricsServer
from .middleware import Middleware
from .plugins import MiddlewarePlugins
from .producer import Producer
from .tracing import TracingSetting, resolve_tracing, traced_chain
from .transport import check_store_url, embedded_broker, open_client

log = logging.getLogger(__name__)

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class App:
    """A Postbox application: one broker connection, a producer, and decorated handlers.

    Args:
        store_url: ``file:///var/lib/postbox`` (or a plain path) for the embedded store, or
            ``rocketmq://host:9876[;host2:9876][?namespace=NS]`` (name servers) for a Postbox
            broker or an Apache RocketMQ cluster.
        database_url: SQLAlchemy URL for the layers above: the outbox, middleware (optional).
        redis_url: Redis URL for middleware that use one (optional).
        broker_conf: RocketMQ ``broker.conf`` keys (a mapping or a file path) for the embedded
            store (a network broker is configured where it runs).
        broker: an already-open broker to share (several apps in one process, tests); the app
            then never closes it.
        clock: time source (tests pass a ``FakeClock``).
        consumer_options: pull/consume tuning shared by every consumer of the app.
        instance_name: stable name of this process among the group's consumers (broadcast
            offsets are kept per instance).
        access_key, secret_key: credentials for a ``rocketmq://`` broker with access control
            (ACL 1.0 signatures).
        tracing: ``True`` (default): OpenTelemetry spans when ``opentelemetry`` is installed,
            with the global tracer provider; ``False``: none; a ``framework.tracing.Tracing``
            with a provider (or propagator) of its own.
    """

    def __init__(self, store_url: str | os.PathLike[str] | None = None, *,
                 database_url: str | None = None, redis_url: str | None = None,
                 broker_conf: Mapping[str, str] | str | os.PathLike[str] | None = None,
                 broker: BrokerClient | None = None, clock: Clock | None = None,
                 consumer_options: ConsumerOptions | None = None,
                 instance_name: str | None = None, access_key: str | None = None,
                 secret_key: str | None = None, tracing: TracingSetting = True) -> None:
        if (store_url is None) == (broker is None):
            raise ConfigurationError("App needs exactly one of store_url= or broker=")
        self.store_url = store_url
        self.database_url = database_url
        self.redis_url = redis_url
        self.broker_conf = broker_conf
        self.clock = clock or SystemClock()
        self.consumer_options = consumer_options or ConsumerOptions()
        self.instance_name = instance_name
        self._credentials = (access_key, secret_key)
        self.tracing = resolve_tracing(tracing)
        self.middleware: list[Middleware] = []
        self.plugins = MiddlewarePlugins()
        """Middleware registered by entry point, built by ``start()`` when handlers need them."""
        self.handlers: list[HandlerSpec] = []
        self.consumers: list[Consumer] = []
        self._client = broker
        self._owns_client = broker is None
        self._producer: Producer | None = None
        self._lock = threading.RLock()
        self._started = False
        self._stopped = False
        """``stop()`` ran and ``start()`` has not since: nothing may reopen the broker."""
        self._start_callbacks: list[Callable[[], object]] = []
        self._stop_callbacks: list[Callable[[], None]] = []
        self._resources: dict[str, tuple[Any, Callable[[Any], None] | None]] = {}
        self._exit_hook_armed = False
        self._metrics: AppMetrics | None = None
        if store_url is not None:  # validate the URL and options now, open later
            check_store_url(store_url, broker_conf, access_key=access_key,
                            secret_key=secret_key)
        elif access_key is not None or secret_key is not None:
            raise ConfigurationError("access_key=/secret_key= go with a remote store_url")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **options: Any) -> App:
        """An app configured by the ``POSTBOX_*`` variables the command line and the Celery
        worker read (``framework.environment``, ``docs/configuration.md``): the store from
        ``POSTBOX_STORE`` (default ``.postbox/store``), ``database_url`` from
        ``POSTBOX_DATABASE_URL`` (default ``sqlite:///.postbox/app.db``), ``redis_url`` from
        ``POSTBOX_REDIS_URL`` (unset: an embedded Redis where one is needed).

        ``env`` defaults to ``os.environ``; ``options`` are other ``App`` arguments, and
        ``store_url=``, ``database_url=`` or ``redis_url=`` among them win over the variables.
        Call it in the application's entry point: the framework reads the environment nowhere
        else, so an ``App(...)`` built with arguments never depends on it.
        """
        settings: dict[str, Any] = {
            "store_url": environment.env_value(environment.STORE, env),
            "database_url": environment.env_value(environment.DATABASE_URL, env),
            "redis_url": environment.env_value(environment.REDIS_URL, env),
        }
        if "broker" in options:  # an already-open broker replaces the store
            del settings["store_url"]
        settings.update(options)
        return cls(**settings)

    # ---- registration ------------------------------------------------------------------------

    def handler(self, *, topic: str, consumer_group: str, tags: str = "*",
                consume_from: str | ConsumeFrom = ConsumeFrom.LAST,
                consume_timestamp_ms: int | None = None, orderly: bool = False,
                broadcast: bool = False,
                reconsume_count_max: int | None = RECONSUME_COUNT_MAX_DEFAULT,
                batch_size: int = 1, max_concurrency: int | None = None,
                **options: Any) -> Callable[[F], F]:
        """Register the decorated function as the handler of ``topic`` for ``consumer_group``.

        The function is returned unchanged. It receives a ``ConsumedMessage`` (a list of them
        when ``batch_size`` > 1). Returning means success; raising ``RetryLater`` or any
        exception retries it through ``%RETRY%group`` (delay level 3 + attempts, up to
        ``reconsume_count_max`` times, then the DLQ); raising ``DeadLetter`` sends it to the
        DLQ at once. ``orderly`` consumes each queue in order and retries in place;
        ``broadcast`` delivers every message to every consumer of the group. An ``async def``
        handler runs on the consumer's event loop (same rules; it must not block), at most
        ``max_concurrency`` of its coroutines at once (None: up to the consume threads).
        Other keyword options are those the app's middleware declare (``idempotent=True``, for
        one, when the ``postbox`` package is installed); an unknown one is a
        ``ConfigurationError`` naming the known ones. The function must take exactly what it
        will be passed: the message, then what the middleware pass (``(message, session)``
        with ``idempotent=True``); otherwise this raises ``ConfigurationError``. Add middleware
        before registering the handlers that use its options.
        """

        def register(function: F) -> F:
            spec = HandlerSpec(function, topic, consumer_group, tags or "*",
                               parse_consume_from(consume_from),
                               consume_timestamp_ms, orderly, broadcast, reconsume_count_max,
                               batch_size, options, max_concurrency)
            with self._lock:
                if self._started:
                    raise AppStateError("register handlers before app.start()")
                self.plugins.check_options(spec, self.middleware)
                check_handler_call(spec, self.plugins.handler_arguments(spec, self.middleware))
                plan_groups([*self.handlers, spec])  # conflicts are reported at decoration
                self.handlers.append(spec)
            return function

        return register

    def add_middleware(self, middleware: Middleware) -> None:
        """Add a middleware (outermost first) to every consumer started afterwards."""
        with self._lock:
            if self._started:
                raise AppStateError("add middleware before app.start()")
            self.middleware.append(middleware)

    def on_start(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` after the consumers start (at once if the app is running)."""
        with self._lock:
            self._start_callbacks.append(callback)
            running = self._started
        if running:
            callback()

    def on_stop(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` at ``stop()``, after the consumers drained and before the broker
        closes; callbacks run newest first."""
        with self._lock:
            self._stop_callbacks.append(callback)

    def resource(self, name: str, factory: Callable[[], T], *,
                 close: Callable[[T], None] | None = None) -> T:
        """The app's shared object called ``name``, made by ``factory`` on first use and
        closed with ``close`` at ``stop()``."""
        with self._lock:
            if name not in self._resources:
                self._resources[name] = (factory(), close)
            value: T = self._resources[name][0]
            return value

    # ---- metrics -----------------------------------------------------------------------------

    @property
    def metrics(self) -> AppMetrics:
        """This app's Prometheus registry and its sources (``framework.metrics``)."""
        with self._lock:
            if self._metrics is None:
                self._metrics = AppMetrics(self)
            return self._metrics

    def metrics_server(self, port: int = 0, host: str = "127.0.0.1") -> MetricsServer:
        """Serve this app's metrics over HTTP (port 0: any free one, see ``.port``); the
        server stops at ``stop()``. Raises ``MetricsServerError`` if the port is taken."""
        return self.metrics.serve(port, host)

    # ---- lifecycle ---------------------------------------------------------------------------

    @property
    def client(self) -> BrokerClient:
        """The broker connection, opened on first use."""
        with self._lock:
            if self._client is None:
                self._check_not_stopped("open the store")
                assert self.store_url is not None
                access_key, secret_key = self._credentials
                self._client = open_client(self.store_url, self.broker_conf, clock=self.clock,
                                           access_key=access_key, secret_key=secret_key)
                self._arm_exit_hook()
            return self._client

    @property
    def broker(self) -> Broker:
        """The embedded broker (only for ``file://`` stores, or an embedded ``broker=``)."""
        broker = embedded_broker(self.client)
        if broker is None:
            raise AppStateError("this app talks to a remote broker; there is no embedded one")
        return broker

    @property
    def producer(self) -> Producer:
        """The app's producer (opens the store on first use)."""
        with self._lock:
            if self._producer is None:
                self._check_not_stopped("send")
                self._producer = Producer(self.client, clock=self.clock,
                                          tracing=self.tracing)
            return self._producer

    def start(self, *, threads: bool = True) -> App:
        """Open the broker and start one consumer per consumer group.

        ``threads=False`` starts consumers without threads, for ``framework.testing``.
        """
        with self._lock:
            if self._started:
                return self
            self._stopped = False
            client = self.client
            self._arm_exit_hook()
            for spec in self.handlers:  # again: middleware added after the handler
                check_handler_call(spec, self.plugins.handler_arguments(spec, self.middleware))
            for plugin in self.plugins.needed(self.handlers, self.middleware):
                self.middleware.append(plugin.from_app(self))  # innermost
            chain = traced_chain(self.middleware, self.tracing, client)  # tracing outermost
            for plan in plan_groups(self.handlers):
                consumer = Consumer(client, plan, clock=self.clock,
                                    options=self.consumer_options,
                                    middleware=chain,
                                    instance_name=self.instance_name)
                self.consumers.append(consumer)
            self._started = True
        for consumer in self.consumers:
            consumer.start(threads=threads)
        with self._lock:
            callbacks = list(self._start_callbacks)
        for callback in callbacks:
            callback()
        return self

    def stop(self) -> None:
        """Drain consumers, persist offsets, and close the broker if this app opened it."""
        with self._lock:
            consumers, self.consumers = self.consumers, []
            self._started = False
        for consumer in reversed(consumers):
            consumer.stop()
        with self._lock:
            callbacks = list(self._stop_callbacks)
            resources, self._resources = self._resources, {}
        for callback in reversed(callbacks):
            self._run_closer(callback)
        for value, close in reversed(resources.values()):
            if close is not None:
                self._run_closer(functools.partial(close, value))
        with self._lock:
            self._stopped = True
            if self._producer is not None:
                self._producer.close("the app was stopped (app.stop()); start it again, or "
                                     "send before stopping it")
                self._producer = None
            if self._owns_client and self._client is not None:
                self._client.close()
                self._client = None

    def _check_not_stopped(self, action: str) -> None:
        """Refuse to ``action`` after ``stop()`` (called with ``_lock`` held)."""
        if self._stopped:
            raise AppStateError(f"cannot {action}: the app was stopped (app.stop()); call "
                                "app.start() to use it again")

    @property
    def running(self) -> bool:
        """Whether ``stop()`` has something to do: consumers started or a store opened."""
        with self._lock:
            return self._started or (self._owns_client and self._client is not None)

    def _arm_exit_hook(self) -> None:
        """Make sure this app is stopped at interpreter exit if nobody stops it (called with
        ``_lock`` held; once per app)."""
        if self._exit_hook_armed:
            return
        self._exit_hook_armed = True
        # threading's hooks run before non-daemon threads are joined (atexit's only after)
        register = getattr(threading, "_register_atexit", atexit.register)
        try:
            register(_stop_at_exit, weakref.ref(self))
        except RuntimeError:  # the interpreter is already shutting down
            self._exit_hook_armed = False

    @staticmethod
    def _run_closer(callback: Callable[[], None]) -> None:
        try:
            callback()
        except Exception:  # one failing closer must not keep the others from running
            log.exception("stop callback %r failed", callback)

    def __enter__(self) -> App:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    async def __aenter__(self) -> App:
        """``async with app:`` — ``start()`` in a worker thread, so the caller's loop keeps
        serving meanwhile."""
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc_info: Any) -> None:
        """Stop (drain consumers) in a worker thread; the caller's loop keeps serving."""
        await asyncio.to_thread(self.stop)

    def consumer(self, consumer_group: str) -> Consumer:
        """The running consumer of a group."""
        for consumer in self.consumers:
            if consumer.group == consumer_group:
                return consumer
        raise KeyError(f"no running consumer for group {consumer_group!r}")


def _stop_at_exit(app_ref: weakref.ref[App]) -> None:
    """The interpreter-exit hook: stop an app its owner left running."""
    app = app_ref()
    if app is None or not app.running:
        return
    log.warning("[app] stopping an app left running at interpreter exit (use `with app:` or "
                "call app.stop())")
    try:
        app.stop()
    except Exception:  # an exit hook must not keep the other hooks from running
        log.exception("[app] stopping the app at interpreter exit failed")
