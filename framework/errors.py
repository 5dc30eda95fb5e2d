"""Exception tree of the framework: one root, ``FrameworkError``.

Errors raised by the store or broker underneath (``storage_engine.StorageError`` subclasses) pass
through unchanged; these are the framework's own: configuration mistakes, handler registration
conflicts and lifecycle misuse. A message that can never be stored raises the store's
``InvalidMessageError`` (exported by ``framework`` under that name), whichever layer refused it.
"""

from __future__ import annotations


class FrameworkError(Exception):
    """Root of every error raised by ``framework``."""


class ConfigurationError(FrameworkError, ValueError):
    """An ``App``/handler option is invalid; the message names the option."""


class HandlerRegistrationError(ConfigurationError):
    """Two handlers conflict (same topic and group, or one group with different modes)."""


class AppStateError(FrameworkError):
    """The app is not in a state that allows the call (e.g. ``send`` before ``start``)."""
