"""``MetricsServer``: the HTTP endpoint Prometheus scrapes (``GET /metrics``, any path).

A ``wsgiref`` server on prometheus-client's WSGI app, one thread per request, started on a
daemon thread of its own and stopped (socket closed, thread joined) by ``stop()``. Port 0 binds
any free port; ``port`` is the bound one. A port in use, or an address that cannot be bound, is
a ``MetricsServerError`` naming the address. Each scrape runs the registry's collectors on the
request thread; the server holds nothing else.
"""

from __future__ import annotations

import logging
import socketserver
import threading
from typing import Any, Self
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from ..errors import FrameworkError

log = logging.getLogger(__name__)


class MetricsServerError(FrameworkError):
    """The metrics endpoint cannot be served (address in use, bad host)."""


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = False  # a port another server holds must be refused, not shared


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """One line per scrape would flood the logs: keep them at debug level."""
        log.debug("[metrics] %s %s", self.address_string(), format % args)


class MetricsServer:
    """Serves ``registry`` on ``host:port`` until ``stop()``."""

    def __init__(self, registry: CollectorRegistry, port: int = 0, host: str = "127.0.0.1"
                 ) -> None:
        self.registry = registry
        self.host = host
        self._requested_port = port
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        """Bind and serve; raises ``MetricsServerError`` if the address cannot be bound."""
        try:
            server = make_server(self.host, self._requested_port, make_wsgi_app(self.registry),
                                 server_class=_ThreadingServer, handler_class=_QuietHandler)
        except OSError as error:
            raise MetricsServerError(f"cannot serve metrics on {self.host}:"
                                     f"{self._requested_port}: {error.strerror or error} "
                                     "(choose another port, or 0 for any free one)") from error
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="postbox-metrics",
                                        daemon=True)
        self._thread.start()
        log.info("[metrics] serving on http://%s:%d/metrics", self.host, self.port)
        return self

    @property
    def port(self) -> int:
        """The bound port (0 before ``start``)."""
        return 0 if self._server is None else int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://host:port/metrics``."""
        return f"http://{self.host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        server, thread, self._server, self._thread = self._server, self._thread, None, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join()

    def __enter__(self) -> Self:
        return self if self._server is not None else self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


__all__ = ["MetricsServer", "MetricsServerError"]
