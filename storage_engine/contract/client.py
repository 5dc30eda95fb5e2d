"""``BrokerClient``: what a producer, a consumer and an operator call on a broker, wherever it runs.

Two implementations: ``storage_engine.Broker`` (the embedded broker, in this process) and
``network.client.RemotingBroker`` (RocketMQ's remoting protocol to a Postbox broker or an Apache
RocketMQ cluster). Both take and return the values of this package (``Message``, ``SendResult``,
``GetResult``, ``TopicConfig``, ...) and apply its request rules (``rules``), so a caller cannot
tell them apart except through the two capabilities ``remote`` and ``delay_level_count``.

The interface is split by role: ``Producing`` (sends), ``Transacting`` (half messages and
their ends), ``Consuming`` (pulls, offsets, send-back, membership, orderly locks) and
``Administering`` (topics, groups, progress, dead letters, lookups); ``BrokerClient`` is all
four plus the capabilities and ``close``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from ..formats import MessageView
from .config_beans import SubscriptionGroupConfig, TopicConfig
from .message import GetResult, Message
from .model import ConsumeFrom, QueueProgress, SendBackResult, SendResult
from .rules import QueueKey
from .transactions import HalfReceipt, TransactionCheck, TransactionState


class Producing(Protocol):
    """Sending: one message, or a batch to one queue."""

    def send(self, message: Message, *, queue_id: int | None = None,
             sharding_key: str | None = None) -> SendResult: ...

    def send_batch(self, messages: Sequence[Message], *, queue_id: int | None = None,
                   sharding_key: str | None = None) -> list[SendResult]: ...


class Transacting(Protocol):
    """Transactional messages: a half send, the end of its transaction, and the checker that
    answers the broker's checks of a producer group's halves (``contract.transactions``)."""

    def send_half(self, message: Message, producer_group: str, *, queue_id: int | None = None,
                  sharding_key: str | None = None) -> SendResult: ...

    def end_transaction(self, receipt: HalfReceipt, state: TransactionState, *,
                        from_check: bool = False) -> SendResult | None: ...

    def register_transaction_checker(self, producer_group: str,
                                     checker: Callable[[TransactionCheck], object]) -> None: ...

    def unregister_transaction_checker(self, producer_group: str,
                                       checker: Callable[[TransactionCheck], object]
                                       ) -> None: ...


class Consuming(Protocol):
    """The consumer side: pulls and long polling, offsets, send-back, membership, queue locks."""

    def pull(self, group: str, topic: str, queue_id: int, offset: int, max_count: int = 32, *,
             tags: str | None = None, suspend_timeout_ms: int = 0) -> GetResult: ...

    def wait_for_arrival(self, positions: Mapping[QueueKey, int], timeout_ms: int,
                         cancel: Callable[[], bool] | None = None) -> bool: ...

    def wake_waiters(self) -> None: ...

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...

    def query_offset(self, group: str, topic: str, queue_id: int) -> int | None: ...

    def start_offset(self, group: str, topic: str, queue_id: int,
                     consume_from: ConsumeFrom = ConsumeFrom.LAST,
                     timestamp_ms: int | None = None) -> int: ...

    def send_back(self, group: str, message: MessageView, *, delay_level: int = 0,
                  max_reconsume_times: int | None = None) -> SendBackResult: ...

    def register_consumer(self, group: str, client_id: str, topics: Iterable[str]) -> bool: ...

    def unregister_consumer(self, group: str, client_id: str) -> None: ...

    def consumer_ids(self, group: str) -> list[str]: ...

    def add_membership_listener(self, listener: Callable[[str], None]) -> None: ...

    def lock_queues(self, group: str, client_id: str, queues: Iterable[QueueKey]
                    ) -> set[QueueKey]: ...

    def unlock_queues(self, group: str, client_id: str, queues: Iterable[QueueKey]) -> None: ...


class Administering(Protocol):
    """Topics, groups, a group's progress, dead letters and lookups by ``UNIQ_KEY``."""

    def create_topic(self, topic: str, queue_count: int | None = None, *, perm: int = 6,
                     order: bool = False) -> TopicConfig: ...

    def topic_config(self, topic: str) -> TopicConfig | None: ...

    def queue_ids(self, topic: str) -> list[int]: ...

    def subscription_group(self, group: str) -> SubscriptionGroupConfig: ...

    def consumer_progress(self, group: str) -> list[QueueProgress]: ...

    def consumer_groups(self) -> list[str]: ...

    def dead_letters(self, group: str, offset: int = 0, max_count: int = 100
                     ) -> list[MessageView]: ...

    def find_by_unique_key(self, topic: str, unique_key: str) -> list[MessageView]: ...


class BrokerClient(Producing, Transacting, Consuming, Administering, Protocol):
    """Every broker operation the framework uses (embedded or remote), and two capabilities."""

    @property
    def remote(self) -> bool:
        """False for the embedded ``Broker`` (this object is it: its store, delay service and
        tables are at hand), True for a client of a broker elsewhere."""
        ...

    @property
    def delay_level_count(self) -> int:
        """How many delay levels a send may ask for (1..count)."""
        ...

    def close(self) -> None: ...
