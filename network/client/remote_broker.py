"""``RemotingBroker``: the framework's ``BrokerClient`` over RocketMQ's remoting protocol.

It implements the broker contract's ``BrokerClient`` (``storage_engine.contract``): the methods,
arguments, return values, request rules and exceptions of the embedded ``storage_engine.Broker``
(this package imports neither the broker nor the framework), against a Postbox broker
(``postbox broker start``) or an Apache RocketMQ cluster, named by its name servers. Its parts
share one ``ClientContext``:

- sending: ``sending.Sender`` (SEND_MESSAGE_V2, coalesced into SEND_BATCH_MESSAGE);
- topics, groups, progress, dead letters, lookups: ``admin_calls.AdminCalls``;
- the consumer side (pull and long polling, offsets, send-back, membership, queue locks):
  ``consuming``;
- transactional messages (half sends, their ends, checks): ``transactions``.

Names: with ``namespace="NS"`` every topic and group goes on the wire as RocketMQ clients name
them (``NS%orders``, ``%RETRY%NS%group``, ``%DLQ%NS%group``) and comes back without it, so
applications (and test runs) share a cluster without seeing each other. Queues: the framework's
``queue_id`` is the topic's global queue number (``routes``). Credentials: with
``access_key``/``secret_key`` every request carries RocketMQ's ACL 1.0 signature
(``acl_signature``). Unreachable brokers and name servers raise ``BrokerUnavailableError``.

Thread-safety: every method may be called from any thread. ``close`` closes every connection;
calls after it raise ``StoreClosedError``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence

from postbox.storage_engine.clock import Clock, SystemClock
from postbox.storage_engine.contract.config_beans import SubscriptionGroupConfig, TopicConfig
from postbox.storage_engine.contract.message import GetResult, Message
from postbox.storage_engine.contract.model import (
    ConsumeFrom,
    QueueProgress,
    SendBackResult,
    SendResult,
)
from postbox.storage_engine.contract.rules import DELAY_LEVEL_COUNT
from postbox.storage_engine.contract.transactions import (
    HalfReceipt,
    TransactionCheck,
    TransactionState,
)
from postbox.storage_engine.errors import StoreClosedError
from postbox.storage_engine.formats import MessageView

from ..protocol.acl_signature import sign_request
from ..protocol.wire import DEFAULT_LIMITS, FrameLimits, RemotingCommand
from .admin_calls import AdminCalls
from .connection import Connections
from .consuming import Consuming
from .context import DEFAULT_TIMEOUT_MS, ClientContext
from .naming import Namespace
from .routes import RouteTable
from .sending import Sender
from .transactions import RemoteTransactions

QueueKey = tuple[str, int]


def split_namesrv_addresses(addresses: str | Sequence[str]) -> list[str]:
    """``host:port;host2:port`` (or a list) as a list; ``ValueError`` when empty."""
    items = addresses.split(";") if isinstance(addresses, str) else list(addresses)
    result = [item.strip() for item in items if item.strip()]
    if not result:
        raise ValueError("no name server address given")
    return result


class RemotingBroker:
    """A ``BrokerClient`` over remoting (see the module docstring)."""

    remote = True  # the contract's capability: the broker is elsewhere
    delay_level_count = DELAY_LEVEL_COUNT  # RocketMQ's default messageDelayLevel

    def __init__(self, namesrv_addresses: str | Sequence[str], *, namespace: str = "",
                 access_key: str | None = None, secret_key: str | None = None,
                 clock: Clock | None = None, timeout_ms: int = DEFAULT_TIMEOUT_MS,
                 limits: FrameLimits = DEFAULT_LIMITS, coalesce_sends: bool = True) -> None:
        if (access_key is None) != (secret_key is None):
            raise ValueError("access_key and secret_key go together")
        signer: Callable[[RemotingCommand], RemotingCommand] | None = None
        if access_key is not None and secret_key is not None:
            key, secret = access_key, secret_key
            signer = lambda command: sign_request(command, key, secret)  # noqa: E731
        self.namesrv_addresses = split_namesrv_addresses(namesrv_addresses)
        self._connections = Connections(limits=limits, before_send=signer)
        clock = clock or SystemClock()
        routes = RouteTable(self.namesrv_addresses, self._connections, Namespace(namespace),
                            clock=clock, timeout_ms=timeout_ms)
        self._context = ClientContext(self._connections, routes, clock, timeout_ms)
        self._sender = Sender(self._context, coalesce=coalesce_sends)
        self._admin = AdminCalls(self._context)
        self._consuming = Consuming(self._context)
        self._consuming.send = self.send  # a refused send-back's fallback (RocketMQ's client)
        self._transactions = RemoteTransactions(self._context,
                                                f"postbox-producer@{os.getpid()}@{id(self):x}")
        self._closed = False

    def __repr__(self) -> str:
        namespace = self._context.namespace.name
        return (f"RemotingBroker({';'.join(self.namesrv_addresses)!r}"
                + (f", namespace={namespace!r})" if namespace else ")"))

    @property
    def namespace(self) -> str:
        """The namespace this client's topics and groups live in ("" for none)."""
        return self._context.namespace.name

    @property
    def context(self) -> ClientContext:
        """The shared state of this client (connections, routes, namespace)."""
        return self._context

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{self!r} is closed")

    # -- producer --------------------------------------------------------------------------

    def send(self, message: Message, *, queue_id: int | None = None,
             sharding_key: str | None = None) -> SendResult:
        """Store a message (see ``Broker.send``)."""
        self._check_open()
        return self._sender.send(message, queue_id, sharding_key)

    def send_batch(self, messages: Sequence[Message], *, queue_id: int | None = None,
                   sharding_key: str | None = None) -> list[SendResult]:
        """Store messages of one topic in one queue with one call (see ``Broker.send_batch``)."""
        self._check_open()
        return self._sender.send_batch(messages, queue_id, sharding_key)

    # -- transactions ----------------------------------------------------------------------

    def send_half(self, message: Message, producer_group: str, *, queue_id: int | None = None,
                  sharding_key: str | None = None) -> SendResult:
        """Store a half message (see ``Broker.send_half``)."""
        self._check_open()
        return self._transactions.send_half(message, producer_group, queue_id=queue_id,
                                            sharding_key=sharding_key)

    def end_transaction(self, receipt: HalfReceipt, state: TransactionState, *,
                        from_check: bool = False) -> SendResult | None:
        """Commit or roll back a half (see ``Broker.end_transaction``); None: the broker does
        not say where a committed message went."""
        self._check_open()
        self._transactions.end_transaction(receipt, state, from_check=from_check)
        return None

    def register_transaction_checker(self, producer_group: str,
                                     checker: Callable[[TransactionCheck], object]) -> None:
        """Answer the brokers' checks of ``producer_group`` (see ``transactions``)."""
        self._check_open()
        self._transactions.register_transaction_checker(producer_group, checker)

    def unregister_transaction_checker(self, producer_group: str,
                                       checker: Callable[[TransactionCheck], object]) -> None:
        """Stop answering checks of ``producer_group`` with ``checker``."""
        self._transactions.unregister_transaction_checker(producer_group, checker)

    # -- admin -----------------------------------------------------------------------------

    def create_topic(self, topic: str, queue_count: int | None = None, *, perm: int = 6,
                     order: bool = False) -> TopicConfig:
        """Create or update a topic on every master of the cluster."""
        self._check_open()
        return self._admin.create_topic(topic, queue_count, perm, order)

    def topic_config(self, topic: str) -> TopicConfig | None:
        """The topic's config (from its route), or None when it does not exist."""
        self._check_open()
        return self._admin.topic_config(topic)

    def queue_ids(self, topic: str) -> list[int]:
        """Readable queue ids of a topic (global numbering); [] when unknown."""
        self._check_open()
        return self._admin.queue_ids(topic)

    def subscription_group(self, group: str) -> SubscriptionGroupConfig:
        """The group's config, created with defaults when missing."""
        self._check_open()
        return self._admin.subscription_group(group)

    def consumer_progress(self, group: str) -> list[QueueProgress]:
        """The group's position on every queue it has one on."""
        self._check_open()
        return self._admin.consumer_progress(group)

    def consumer_groups(self) -> list[str]:
        """The groups of this namespace, sorted."""
        self._check_open()
        return self._admin.consumer_groups()

    def dead_letters(self, group: str, offset: int = 0, max_count: int = 100
                     ) -> list[MessageView]:
        """Dead letters of ``group`` from ``offset`` (nothing committed)."""
        self._check_open()
        return self._admin.dead_letters(group, offset, max_count)

    def find_by_unique_key(self, topic: str, unique_key: str) -> list[MessageView]:
        """Messages stored in ``topic`` with this ``UNIQ_KEY``."""
        self._check_open()
        return self._admin.find_by_unique_key(topic, unique_key)

    # -- consumer side (``consuming``) -----------------------------------------------------

    def pull(self, group: str, topic: str, queue_id: int, offset: int, max_count: int = 32, *,
             tags: str | None = None, suspend_timeout_ms: int = 0) -> GetResult:
        """Read from a queue (see ``Broker.pull``)."""
        self._check_open()
        result: GetResult = self._consuming.pull(group, topic, queue_id, offset, max_count,
                                                 tags=tags,
                                                 suspend_timeout_ms=suspend_timeout_ms)
        return result

    def wait_for_arrival(self, positions: Mapping[QueueKey, int], timeout_ms: int,
                         cancel: Callable[[], bool] | None = None) -> bool:
        """Block until a queue in ``positions`` has a message past its position."""
        self._check_open()
        return bool(self._consuming.wait_for_arrival(positions, timeout_ms, cancel))

    def wake_waiters(self) -> None:
        """End every ``wait_for_arrival``."""
        self._consuming.wake_waiters()

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record the group's next offset on a queue."""
        self._check_open()
        self._consuming.commit_offset(group, topic, queue_id, offset)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The committed next offset, or None."""
        self._check_open()
        offset: int | None = self._consuming.query_offset(group, topic, queue_id)
        return offset

    def start_offset(self, group: str, topic: str, queue_id: int,
                     consume_from: ConsumeFrom = ConsumeFrom.LAST,
                     timestamp_ms: int | None = None) -> int:
        """Committed offset, else where ``consume_from`` starts."""
        self._check_open()
        return int(self._consuming.start_offset(group, topic, queue_id, consume_from,
                                                timestamp_ms))

    def send_back(self, group: str, message: MessageView, *, delay_level: int = 0,
                  max_reconsume_times: int | None = None,
                  reason: str | None = None) -> SendBackResult:
        """Send a failed message to ``%RETRY%group`` or the DLQ (``reason``: its DLQ_REASON)."""
        self._check_open()
        result: SendBackResult = self._consuming.send_back(
            group, message, delay_level=delay_level, max_reconsume_times=max_reconsume_times,
            reason=reason)
        return result

    def register_consumer(self, group: str, client_id: str, topics: Iterable[str]) -> bool:
        """Heartbeat; True when it changed the group's membership."""
        self._check_open()
        return bool(self._consuming.register_consumer(group, client_id, topics))

    def unregister_consumer(self, group: str, client_id: str) -> None:
        """Leave the group."""
        self._check_open()
        self._consuming.unregister_consumer(group, client_id)

    def consumer_ids(self, group: str) -> list[str]:
        """Live members of ``group``, sorted."""
        self._check_open()
        return list(self._consuming.consumer_ids(group))

    def add_membership_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(group)`` when a group's members change."""
        self._consuming.add_membership_listener(listener)

    def lock_queues(self, group: str, client_id: str, queues: Iterable[QueueKey]
                    ) -> set[QueueKey]:
        """Lock (or renew) queues for orderly consumption; the ones now held."""
        self._check_open()
        return set(self._consuming.lock_queues(group, client_id, queues))

    def unlock_queues(self, group: str, client_id: str, queues: Iterable[QueueKey]) -> None:
        """Release queues held by ``client_id``."""
        self._check_open()
        self._consuming.unlock_queues(group, client_id, queues)

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the consumer side and close every connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._transactions.close()
        try:
            close = getattr(self._consuming, "close", None)
            if close is not None:
                close()
        finally:
            self._connections.close()

    def __enter__(self) -> RemotingBroker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

