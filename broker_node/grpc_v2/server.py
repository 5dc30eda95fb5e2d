"""``BrokerServer``: the network broker — a gRPC server over one embedded ``Broker``.

Serves Apache RocketMQ 5's ``apache.rocketmq.v2.MessagingService`` (``servicer``), so the
official RocketMQ 5 clients produce to and consume from it.

Life cycle::

    server = BrokerServer(broker, "127.0.0.1:0", access=None)
    server.start()            # binds (``server.port`` is the bound port), starts lease expiry
    ...
    server.stop(grace_s=5)    # refuse new calls, end long polls, let calls finish, stop expiry

``stop`` does not close the broker: its owner does that afterwards, which persists the
consumer offsets (pop consumption commits each queue's watermark into them) and closes the
store cleanly.

Limits: a request larger than ``max_request_bytes`` (default: the store's
``commit_log.max_message_size_bytes`` + ``REQUEST_OVERHEAD_BYTES``) is refused by gRPC
(``RESOURCE_EXHAUSTED``) before it is decoded; at most ``workers`` calls run at once (each
Telemetry stream and each long-polling receive holds one worker while it lasts) and further
calls are refused with ``RESOURCE_EXHAUSTED`` instead of queueing. The port is bound without
``SO_REUSEPORT``, so a second server on a busy port fails instead of sharing it.

Thread-safety: ``start`` and ``stop`` are for the owning thread; ``stop`` is idempotent.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from concurrent import futures

import grpc

from postbox.storage_engine.broker.broker import Broker
from postbox.storage_engine.clock import Clock

from .auth import AccessControl
from .call_context import ServiceParts
from .client_sessions import ClientSessions
from .lease_book import LeaseBook
from .lease_expiry import LeaseExpiryService
from .pop_service import PopService
from .protocol import service_grpc
from .servicer import MessagingServicer
from .transaction_calls import TelemetryStreams

log = logging.getLogger(__name__)

DEFAULT_LISTEN = "127.0.0.1:8081"
DEFAULT_WORKERS = 128
REQUEST_OVERHEAD_BYTES = 1024 * 1024
"""Room above the largest body for properties, framing and batching in one request."""
DEFAULT_INVISIBLE_MS = 30_000
"""Lease of an auto-renew (push consumer) receive, renewed while the client is alive."""
RENEW_MAX_MS = 3_600_000
"""An auto-renew lease is renewed for at most this long after the first delivery."""


class ServerError(Exception):
    """The server could not start (bad listen address, port in use)."""


def parse_listen(listen: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` → (host, port)."""
    host, separator, port = listen.rpartition(":")
    if not separator or not host or not port.isdigit() or int(port) > 65535:
        raise ServerError(f"listen address {listen!r} is not host:port")
    return host.strip("[]"), int(port)


class BrokerServer:
    """A gRPC server exposing one ``Broker``."""

    def __init__(self, broker: Broker, listen: str = DEFAULT_LISTEN, *,
                 access: AccessControl | None = None, max_request_bytes: int | None = None,
                 workers: int = DEFAULT_WORKERS, default_invisible_ms: int = DEFAULT_INVISIBLE_MS,
                 renew_max_ms: int = RENEW_MAX_MS, clock: Clock | None = None) -> None:
        if workers < 4:
            raise ServerError(f"workers must be >= 4, got {workers}")
        self._broker = broker
        self._listen = listen
        self._host, requested_port = parse_listen(listen)
        self._access = access
        config = broker.store.config
        self.max_request_bytes = max_request_bytes or (
            config.commit_log.max_message_size_bytes + REQUEST_OVERHEAD_BYTES)
        self._workers = workers
        self._port = requested_port
        self._clock = clock or broker.store.clock
        self._stopping = threading.Event()
        self._stopped = False
        sessions = ClientSessions()
        book = LeaseBook(broker)
        expiry = LeaseExpiryService(broker, book, self._clock, client_alive=sessions.is_alive,
                                    renew_ms=default_invisible_ms, renew_max_ms=renew_max_ms)
        self.parts = ServiceParts(
            broker=broker, access=access, clock=self._clock, sessions=sessions, book=book,
            pop=PopService(broker, book, self._clock), expiry=expiry, stopping=self._stopping,
            advertised=(self._advertised_host(), requested_port),
            long_polling_max_ms=config.broker.long_polling_max_ms,
            default_invisible_ms=default_invisible_ms)
        self.telemetry = TelemetryStreams()  # producers' streams: the transaction checks' route
        self._server: grpc.Server | None = None
        self._executor: futures.ThreadPoolExecutor | None = None

    def _advertised_host(self) -> str:
        return "127.0.0.1" if self._host in ("0.0.0.0", "::", "") else self._host

    @property
    def port(self) -> int:
        """The bound port (after ``start``; the requested one before)."""
        return self._port

    @property
    def address(self) -> str:
        """``host:port`` clients can use (the listen host, loopback for a wildcard)."""
        host = self._advertised_host()
        return f"[{host}]:{self._port}" if ":" in host else f"{host}:{self._port}"

    def start(self) -> None:
        """Bind, register the services, start lease expiry and the server."""
        if self._server is not None:
            return
        self._executor = futures.ThreadPoolExecutor(max_workers=self._workers,
                                                    thread_name_prefix="postbox-rpc")
        server = grpc.server(
            self._executor,
            options=[("grpc.max_receive_message_length", self.max_request_bytes),
                     ("grpc.max_send_message_length", -1),
                     ("grpc.so_reuseport", 0)],
            maximum_concurrent_rpcs=self._workers)
        try:
            port = server.add_insecure_port(self._listen)
        except RuntimeError as error:
            raise ServerError(f"cannot listen on {self._listen}: {error}") from error
        if port == 0:
            raise ServerError(f"cannot listen on {self._listen} (in use or not local)")
        self._port = port
        self.parts = dataclasses.replace(self.parts, advertised=(self._advertised_host(), port))
        service_grpc.add_MessagingServiceServicer_to_server(MessagingServicer(self.parts,
                                                                              self.telemetry),
                                                            server)
        server.start()
        self.parts.expiry.start()
        self._broker.transactions.add_route(self.telemetry.route_check)
        self._server = server
        log.info("[server] listening on %s (workers=%d, max request %d bytes, acl %s)",
                 self.address, self._workers, self.max_request_bytes,
                 "on" if self._access else "off")

    def stop(self, grace_s: float = 5.0) -> None:
        """Refuse new calls, end long polls, give running calls ``grace_s`` to finish (then
        cancel them), stop lease expiry. The broker stays open (its owner closes it)."""
        if self._stopped:
            return
        self._stopped = True
        self._stopping.set()
        self._broker.transactions.remove_route(self.telemetry.route_check)
        self._broker.wake_waiters()
        if self._server is not None:
            self._server.stop(grace_s).wait()
        if self._executor is not None:
            self._executor.shutdown(wait=True)  # grpc leaves the pool it was given running
        self.parts.expiry.stop()
        log.info("[server] stopped (%d leases open: redelivered from the committed offsets)",
                 self.parts.book.lease_count())

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the server terminates (True) or ``timeout_s`` passes (False)."""
        if self._server is None:
            return True
        return self._server.wait_for_termination(timeout_s)


__all__ = ["DEFAULT_LISTEN", "BrokerServer", "ServerError", "parse_listen"]
