"""Handler options that middleware declare, and middleware that packages register.

A ``Middleware`` subclass may declare the ``@app.handler`` keyword options it adds
(``handler_options``: name → default, as dramatiq's middleware declare ``actor_options``). The
framework knows none of them by name: ``App.handler`` accepts an option only when a middleware
the app can use declares it, stores it in ``HandlerSpec.options``, and has the declaring class
check the handler (``check_handler``); the middleware reads its own option from the spec.

A package makes its middleware available to every app by registering the class in the
``postbox.middleware`` entry-point group (``pyproject.toml``)::

    [project.entry-points."postbox.middleware"]
    mypackage = "mypackage.middleware:MyMiddleware"

Those classes are imported only when a handler passes an option the app's own middleware do
not declare. At ``App.start()`` a registered class whose option some handler sets to other than
its default is built with ``from_app(app)`` and added as the innermost middleware — unless a
middleware declaring that option was added with ``app.add_middleware``, which then serves it
(that is how an application chooses the engine or client itself). Registering by entry point
rather than at import keeps the framework free of import-time globals and of any knowledge of
the packages above it, and keeps the option working without an import in application code.

Not thread-safe: an app registers handlers and starts from one thread (``App`` holds its lock).
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from .errors import ConfigurationError
from .middleware import Middleware

if TYPE_CHECKING:
    from .handlers import HandlerSpec

log = logging.getLogger(__name__)

MIDDLEWARE_ENTRY_POINTS = "postbox.middleware"
"""Entry-point group of ``Middleware`` subclasses that ``App.start()`` may build by itself."""


class MiddlewarePlugins:
    """The middleware registered in an entry-point group, loaded on first need."""

    def __init__(self, group: str = MIDDLEWARE_ENTRY_POINTS) -> None:
        self.group = group
        self._loaded: dict[str, type[Middleware]] | None = None
        self._failures: dict[str, str] = {}

    def classes(self) -> dict[str, type[Middleware]]:
        """Entry-point name → middleware class (one that fails to load is left out, and named
        when an option only it could have declared is refused)."""
        if self._loaded is None:
            self._loaded = {}
            found = importlib.metadata.entry_points(group=self.group)
            for entry in sorted(found, key=lambda entry: entry.name):
                try:
                    loaded = entry.load()
                except Exception as error:  # a broken plugin must not break unrelated apps
                    self._failures[entry.name] = f"{type(error).__name__}: {error}"
                    log.warning("[plugins] middleware %r (%s) failed to load: %s", entry.name,
                                entry.value, error)
                    continue
                if not (isinstance(loaded, type) and issubclass(loaded, Middleware)):
                    self._failures[entry.name] = f"{entry.value} is not a Middleware subclass"
                    continue
                self._loaded[entry.name] = loaded
        return self._loaded

    def check_options(self, spec: HandlerSpec, added: Iterable[Middleware]) -> None:
        """Refuse ``spec`` if it passes an option no usable middleware declares, or one its
        declaring middleware rejects (``ConfigurationError`` naming the known options)."""
        if not spec.options:
            return
        providers = option_providers([type(layer) for layer in added])
        if not set(spec.options) <= set(providers):
            providers = option_providers([*providers.values(), *self.classes().values()])
        unknown = sorted(set(spec.options) - set(providers))
        if unknown:
            raise ConfigurationError(self._unknown_message(spec, unknown, providers))
        for declaring in dict.fromkeys(providers[name] for name in spec.options):
            declaring.check_handler(spec)

    def handler_arguments(self, spec: HandlerSpec, added: Iterable[Middleware]
                          ) -> list[tuple[str, str]]:
        """What ``spec``'s handler is passed after the message: (argument, source) pairs of
        the added middleware and of the classes declaring ``spec``'s options, in chain order
        (call after ``check_options``)."""
        classes = [type(layer) for layer in added]
        if spec.options:
            providers = option_providers([*classes, *self.classes().values()])
            classes += [providers[name] for name in spec.options if name in providers]
        passed: list[tuple[str, str]] = []
        for cls in dict.fromkeys(classes):
            options = ", ".join(f"{name}={spec.options[name]!r}" for name in cls.handler_options
                                if name in spec.options)
            source = cls.__qualname__ + (f" ({options})" if options else "")
            passed += [(name, source) for name in cls.handler_arguments(spec)]
        return passed

    def needed(self, specs: Iterable[HandlerSpec],
               added: Iterable[Middleware]) -> list[type[Middleware]]:
        """The registered classes ``App.start()`` must build: those declaring an option a
        handler sets to other than its default, that no added middleware declares."""
        served = set(option_providers([type(layer) for layer in added]))
        wanted = {name for spec in specs for name in spec.options} - served
        if not wanted:
            return []
        providers = option_providers(self.classes().values())
        needed = [cls for name, cls in providers.items() if name in wanted and any(
            spec.options.get(name, cls.handler_options[name]) != cls.handler_options[name]
            for spec in specs)]
        return list(dict.fromkeys(needed))

    def _unknown_message(self, spec: HandlerSpec, unknown: list[str],
                         providers: Mapping[str, type[Middleware]]) -> str:
        known = ", ".join(f"{name} ({cls.__module__}.{cls.__qualname__})"
                          for name, cls in sorted(providers.items())) or "none"
        message = (f"handler {spec.name} (topic {spec.topic!r}, group {spec.consumer_group!r}) "
                   f"got unknown option(s) {', '.join(unknown)}; options added by middleware: "
                   f"{known} (add the middleware that declares it before registering "
                   f"handlers, or install the package that registers it in the "
                   f"{self.group!r} entry-point group)")
        if self._failures:
            failed = "; ".join(f"{name}: {why}" for name, why in sorted(self._failures.items()))
            message += f"; middleware that failed to load: {failed}"
        return message


def option_providers(classes: Iterable[type[Middleware]]) -> dict[str, type[Middleware]]:
    """Option name → the middleware class declaring it; two classes declaring one name is a
    ``ConfigurationError``."""
    providers: dict[str, type[Middleware]] = {}
    for cls in classes:
        for name in cls.handler_options:
            other = providers.get(name)
            if other is not None and other is not cls and not issubclass(cls, other) \
                    and not issubclass(other, cls):
                raise ConfigurationError(
                    f"handler option {name!r} is declared by both {other.__qualname__} and "
                    f"{cls.__qualname__}; a handler option belongs to one middleware")
            providers.setdefault(name, cls)
    return providers


__all__ = ["MIDDLEWARE_ENTRY_POINTS", "MiddlewarePlugins", "option_providers"]
