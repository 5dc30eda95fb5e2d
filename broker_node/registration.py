"""``NamesrvRegistrar``: registers this broker with external name servers, Apache's included.

``postbox broker start --namesrv host:port[;host:port]`` makes the broker one broker of a
cluster, as RocketMQ's brokers are: every ``interval_ms`` (30 s, ``registerNameServerPeriod``)
it sends REGISTER_BROKER (103) to each name server with its identity (cluster, broker name,
broker id 0, the advertised address) and a ``RegisterBrokerBody`` holding its topic table (the
same ``advertised_topics`` its own name server routes, ``TBW102`` included while auto-creation
is on), with ``bodyCrc32``. On ``stop`` it sends UNREGISTER_BROKER (104) to each.

Each name server gets one long-lived connection: Apache's name server forgets a broker whose
registering connection closes (``RouteInfoManager.onChannelDestroy``), so the connection is
kept open between registrations and reopened when it fails. A name server that cannot be
reached is logged (``[registration]``) and tried again next round; it never stops the broker
or the other registrations. A refused registration (a non-zero code) is logged with its remark.

Thread-safety: one service thread does the registering; ``stop`` joins it, then unregisters.
Nothing is persisted.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Mapping

from postbox.network.protocol.codes import SERVER_VERSION, RequestCode
from postbox.network.protocol.wire import FrameDecoder, RemotingCommand, WireError, encode
from postbox.storage_engine.clock import Clock
from postbox.storage_engine.service import Service

from .namesrv.processor import body_crc32
from .namesrv.route_bodies import register_body
from .namesrv.route_table import BrokerIdentity, QueueData

log = logging.getLogger(__name__)

REGISTER_INTERVAL_MS = 30_000
CALL_TIMEOUT_MS = 5_000
BROKER_TIMEOUT_MS = 120_000
READ_CHUNK_BYTES = 65_536


class RegistrationError(Exception):
    """A name server could not be reached or did not answer."""


def parse_namesrv_list(text: str) -> list[tuple[str, int]]:
    """``host:port[;host:port]`` → addresses; ``ValueError`` naming a bad entry."""
    addresses = []
    for entry in filter(None, (part.strip() for part in text.split(";"))):
        host, separator, port = entry.rpartition(":")
        if not separator or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"name server address {entry!r} is not host:port")
        addresses.append((host.strip("[]"), int(port)))
    if not addresses:
        raise ValueError(f"no name server address in {text!r}")
    return addresses


class NamesrvLink:
    """One connection to one name server: synchronous calls, opened on demand."""

    def __init__(self, address: tuple[str, int], timeout_ms: int = CALL_TIMEOUT_MS) -> None:
        self.address = address
        self._timeout_s = timeout_ms / 1000
        self._sock: socket.socket | None = None
        self._decoder = FrameDecoder()
        self._lock = threading.Lock()

    @property
    def text(self) -> str:
        """``host:port`` of the name server."""
        return f"{self.address[0]}:{self.address[1]}"

    def call(self, request: RemotingCommand) -> RemotingCommand:
        """Send ``request``, return its response (``RegistrationError`` on any failure)."""
        with self._lock:
            try:
                if self._sock is None:
                    self._sock = socket.create_connection(self.address, self._timeout_s)
                    self._sock.settimeout(self._timeout_s)
                    self._decoder = FrameDecoder()
                self._sock.sendall(encode(request))
                return self._read_response(request.opaque)
            except (OSError, WireError) as error:
                self._close_locked()
                raise RegistrationError(f"name server {self.text}: {error}") from error

    def _read_response(self, opaque: int) -> RemotingCommand:
        assert self._sock is not None
        while True:
            data = self._sock.recv(READ_CHUNK_BYTES)
            if not data:
                raise OSError("connection closed by the name server")
            for command in self._decoder.feed(data):
                if command.is_response and command.opaque == opaque:
                    return command

    def close(self) -> None:
        """Close the connection (the name server then forgets what came over it)."""
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None


class NamesrvRegistrar(Service):
    """Registers one broker with name servers every ``interval_ms``; unregisters on stop."""

    name = "namesrv-registrar"
    daemon = True  # network only: nothing to persist mid-call

    def __init__(self, addresses: list[tuple[str, int]], identity: BrokerIdentity,
                 topics: Callable[[], Mapping[str, QueueData]],
                 data_version: Callable[[], Mapping[str, int]], clock: Clock, *,
                 interval_ms: int = REGISTER_INTERVAL_MS,
                 timeout_ms: int = CALL_TIMEOUT_MS) -> None:
        super().__init__(clock)
        self.identity = identity
        self.interval_ms = interval_ms
        self._topics = topics
        self._data_version = data_version
        self._links = [NamesrvLink(address, timeout_ms) for address in addresses]
        self._next_due_ms = 0
        self.registered: dict[str, bool] = {link.text: False for link in self._links}

    def run_once(self, now_ms: int) -> int:
        """Register with every name server when due; 0 (the loop then waits for the next)."""
        if now_ms >= self._next_due_ms:
            self.register_all()
            self._next_due_ms = now_ms + self.interval_ms
        return 0

    def idle_wait_ms(self, now_ms: int) -> int:
        """Until the next round is due."""
        return max(1, self._next_due_ms - now_ms)

    def register_all(self) -> int:
        """One REGISTER_BROKER to each name server; how many accepted it."""
        body = register_body(self._topics(), self._data_version())
        accepted = 0
        for link in self._links:
            request = RemotingCommand.request(RequestCode.REGISTER_BROKER, {
                **self._identity_fields(), "haServerAddr": self.identity.ha_address,
                "heartbeatTimeoutMillis": BROKER_TIMEOUT_MS, "enableActingMaster": False,
                "compressed": False, "bodyCrc32": body_crc32(body)}, body,
                version=SERVER_VERSION)
            ok = self._call(link, request, "register")
            if ok and not self.registered[link.text]:
                log.info("[registration] registered %s (%s) with name server %s",
                         self.identity.broker_name, self.identity.address, link.text)
            self.registered[link.text] = ok
            accepted += ok
        return accepted

    def unregister_all(self) -> None:
        """UNREGISTER_BROKER to each name server, then close the connections."""
        for link in self._links:
            request = RemotingCommand.request(RequestCode.UNREGISTER_BROKER,
                                              self._identity_fields(), version=SERVER_VERSION)
            if self._call(link, request, "unregister"):
                log.info("[registration] unregistered from name server %s", link.text)
            link.close()
            self.registered[link.text] = False

    def stop(self, timeout_ms: int = 10_000) -> None:
        """Stop registering, then unregister from every name server."""
        super().stop(timeout_ms)
        self.unregister_all()

    def _identity_fields(self) -> dict[str, object]:
        return {"brokerName": self.identity.broker_name, "brokerAddr": self.identity.address,
                "clusterName": self.identity.cluster, "brokerId": self.identity.broker_id}

    def _call(self, link: NamesrvLink, request: RemotingCommand, what: str) -> bool:
        try:
            response = link.call(request)
        except RegistrationError as error:
            log.warning("[registration] %s failed: %s (next try in %d s)", what, error,
                        self.interval_ms // 1000)
            return False
        if response.code != 0:
            log.warning("[registration] name server %s refused the %s: code %d %s",
                        link.text, what, response.code, response.remark)
            return False
        return True


__all__ = ["NamesrvLink", "NamesrvRegistrar", "RegistrationError", "parse_namesrv_list"]
