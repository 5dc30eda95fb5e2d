"""What every MessagingService call needs: the shared ``ServiceParts`` and the per-call helpers
(access check as a status, peer address, the status-answering wrapper for unary calls).

``answers(response_type)`` wraps a unary handler so that a ``RequestError``, an
``AccessDeniedError`` or a store error becomes a response carrying the matching v2 status
(``statuses.status_for``); anything unexpected is logged with its traceback and answered
``INTERNAL_SERVER_ERROR``. Handlers therefore raise instead of building error responses.
Thread-safety: ``ServiceParts`` is immutable; its members are thread-safe.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import unquote

import grpc

from postbox.storage_engine.broker.broker import Broker
from postbox.storage_engine.clock import Clock
from postbox.storage_engine.errors import StorageError

from .auth import AccessControl, AccessDeniedError
from .client_sessions import ClientSessions
from .lease_book import LeaseBook
from .lease_expiry import LeaseExpiryService
from .pop_service import PopService
from .statuses import RequestError, status_for

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServiceParts:
    """The pieces the MessagingService handlers share."""

    broker: Broker
    access: AccessControl | None
    clock: Clock
    sessions: ClientSessions
    book: LeaseBook
    pop: PopService
    expiry: LeaseExpiryService
    stopping: threading.Event
    advertised: tuple[str, int]
    long_polling_max_ms: int
    default_invisible_ms: int

    def authorize(self, context: grpc.ServicerContext, *, topics: Iterable[str] = (),
                  groups: Iterable[str] = (), write: bool = False,
                  describe: Iterable[str] = ()) -> None:
        """Check the caller's signature and rights (no-op without an ACL; see
        ``AccessControl.check``); a ``write`` to a topic that does not exist also needs the
        create right. ``RequestError`` with v2 ``UNAUTHORIZED`` / ``FORBIDDEN`` when refused."""
        if self.access is None:
            return
        topics = tuple(topics)
        auto_create = write and self.broker.store.config.broker.auto_create_topic
        create = [topic for topic in topics
                  if self.broker.topic_config(topic) is None] if auto_create else []
        try:
            self.access.check(context.invocation_metadata(), topics=topics, groups=groups,
                              write=write, create=create, describe=describe)
        except AccessDeniedError as error:
            raise RequestError(error.v2_code, str(error)) from error

    def authorize_handle(self, context: grpc.ServicerContext, topic: str) -> None:
        """SUB on the topic a receipt handle names (the request's topic, or the group's retry
        topic, which comes with SUB on the group)."""
        self.authorize(context, topics=[topic])

    def cancelled(self, context: grpc.ServicerContext) -> Callable[[], bool]:
        """A ``cancel`` callable for long polls: server stopping or call gone."""
        return lambda: self.stopping.is_set() or not context.is_active()


def metadata(context: grpc.ServicerContext) -> list[tuple[str, str]]:
    """The call's metadata as (key, value) pairs."""
    return [(key, value) for key, value in context.invocation_metadata()
            if isinstance(value, str)]


def peer_host(context: grpc.ServicerContext) -> tuple[str, int]:
    """(ip, port) of the caller; ("127.0.0.1", 0) for non-IP transports."""
    kind, _, rest = unquote(context.peer()).partition(":")
    if kind in ("ipv4", "ipv6"):
        host, _, port = rest.rpartition(":")
        if port.isdigit():
            return host.strip("[]"), int(port)
    return "127.0.0.1", 0


HandlerT = TypeVar("HandlerT", bound=Callable[..., Any])


def answers(response_type: type) -> Callable[[HandlerT], HandlerT]:
    """Wrap a unary handler: errors become ``response_type(status=…)``."""

    def decorate(handler: HandlerT) -> HandlerT:
        @functools.wraps(handler)
        def call(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
            try:
                return handler(self, request, context)
            except Exception as error:  # every failure is answered with a status
                report(handler.__name__, error)
                return response_type(status=status_for(error))

        return call  # type: ignore[return-value]

    return decorate


def report(call: str, error: BaseException) -> None:
    """Log a failed call: refusals at debug level, unexpected errors with a traceback."""
    if isinstance(error, RequestError | StorageError):
        log.debug("[rpc] %s refused: %s", call, error)
    else:
        log.error("[rpc] %s failed", call, exc_info=error)


__all__ = ["ServiceParts", "answers", "metadata", "peer_host", "report"]
