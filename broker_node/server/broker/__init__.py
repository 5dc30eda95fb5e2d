"""The broker's data plane over remoting: ``BrokerRemotingServer`` serves one embedded
``storage_engine.Broker`` on a ``RemotingServer``.

Request codes served (reference §2.1–§2.3): SEND_MESSAGE 10, SEND_MESSAGE_V2 310,
SEND_BATCH_MESSAGE 320 (half messages among them), CONSUMER_SEND_MSG_BACK 36, END_TRANSACTION 37,
PULL_MESSAGE 11 (long polling), QUERY_CONSUMER_OFFSET 14, UPDATE_CONSUMER_OFFSET
15, SEARCH_OFFSET_BY_TIMESTAMP 29, GET_MAX_OFFSET 30, GET_MIN_OFFSET 31,
GET_EARLIEST_MSG_STORETIME 32, VIEW_MESSAGE_BY_ID 33, QUERY_MESSAGE 12, HEART_BEAT 34,
UNREGISTER_CLIENT 35, GET_CONSUMER_LIST_BY_GROUP 38, LOCK_BATCH_MQ 41, UNLOCK_BATCH_MQ 42; and
broker → client CHECK_TRANSACTION_STATE 39 and NOTIFY_CONSUMER_IDS_CHANGED 40. Other codes
(admin, name server) are registered on ``server.handlers`` by their own modules.

Sends run inline on the IO thread when the store answers a put without waiting (ASYNC flush on
a master that does not wait for a slave), else on the worker pool's send lane, which queries
and administration (the query lane) and heartbeats (the client lane) do not share.

Lifecycle: ``start`` starts the pull hold service, then the server, then routes the broker's
transaction checks here; ``stop`` stops routing them, stops the server (connections close,
their consumers leave), then the hold service. The broker itself belongs
to the caller.
"""

from __future__ import annotations

from typing import Any

from postbox.network.protocol.wire import RemotingCommand
from postbox.storage_engine.broker import Broker
from postbox.storage_engine.config import BrokerRole, FlushMode

from ..handlers import AccessControl
from ..limits import ServerLimits
from ..server import RemotingServer
from .clients import ClientHandlers, ClientRegistry, ConsumerInfo, HeartbeatLimits
from .offsets import OffsetHandlers
from .pull import MAX_PARKED_PULLS, PullHandler
from .send import SendHandlers
from .transactions import TransactionHandlers


class BrokerRemotingServer:
    """A remoting server with the broker's data plane registered."""

    def __init__(self, broker: Broker, host: str = "127.0.0.1", port: int = 0, *,
                 limits: ServerLimits | None = None, access: AccessControl | None = None,
                 max_parked_pulls: int = MAX_PARKED_PULLS, stats: Any = None,
                 heartbeat_limits: HeartbeatLimits | None = None) -> None:
        self.broker = broker
        self.stats = stats  # ``record_put`` / ``record_get`` (admin's runtime statistics)
        limits = limits or ServerLimits()
        long_poll_ms = broker.store.config.broker.long_polling_max_ms
        if limits.idle_timeout_ms <= long_poll_ms:
            raise ValueError(f"ServerLimits.idle_timeout_ms ({limits.idle_timeout_ms}) must "
                             f"exceed broker.long_polling_max_ms ({long_poll_ms}): a held pull "
                             "would look idle")
        self.server = RemotingServer(host, port, limits=limits, access=access,
                                     name="remoting-broker")
        self.registry = ClientRegistry()
        self.clients = ClientHandlers(broker, self.registry, heartbeat_limits)
        self.pulls = PullHandler(broker, self.registry.subscription,
                                 max_parked=max_parked_pulls, stats=stats)
        config = broker.store.config
        sends_wait = (config.flush.mode is FlushMode.SYNC
                      or config.broker_role is BrokerRole.SYNC_MASTER)
        table = self.server.handlers
        SendHandlers(broker, stats, self._check_record_topic, self._check_publish).register(
            table, inline=not sends_wait)
        self.transactions = TransactionHandlers(broker, self.registry)
        self.transactions.register(table, inline=not sends_wait)
        self.pulls.register(table)
        OffsetHandlers(broker, self._check_record_topic).register(table)
        self.clients.register(table)
        self.server.add_close_listener(self.clients.on_close)
        self.server.add_close_listener(self.pulls.hold.release)  # its parked long polls

    def _check_record_topic(self, request: RemotingCommand, topic: str) -> None:
        """The access hook's ``check_topic`` (when it has one) on the topic of a record a
        request reached by position (send-back, view by id), so it cannot read a topic it did
        not name."""
        check_topic = getattr(self.server.access, "check_topic", None)
        if check_topic is not None:
            check_topic(request, topic)

    def _check_publish(self, request: RemotingCommand, topic: str) -> None:
        """The access hook's ``check_publish`` (when it has one) on a topic a sent message
        names in a real-topic property (``RETRY_TOPIC``, ``REAL_TOPIC``)."""
        check_publish = getattr(self.server.access, "check_publish", None)
        if check_publish is not None:
            check_publish(request, topic)

    def start(self) -> None:
        """Start the hold service and the server."""
        self.pulls.start()
        try:
            self.server.start()
        except BaseException:
            self.pulls.stop()
            raise
        self.transactions.start()

    def stop(self) -> None:
        """Stop the server, then the hold service."""
        self.transactions.stop()
        self.server.stop()
        self.pulls.stop()

    def __enter__(self) -> BrokerRemotingServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def address(self) -> tuple[str, int] | None:
        """(host, port) once started."""
        return self.server.address


__all__ = ["BrokerRemotingServer", "ClientRegistry", "ConsumerInfo", "HeartbeatLimits"]
