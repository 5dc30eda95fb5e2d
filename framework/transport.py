"""``BrokerClient``: the one interface the framework talks to, and how a store URL opens one.

Implementations share it (DESIGN §3.4): embedded — ``storage_engine.Broker`` in this process,
which already has exactly these methods — and remote, over RocketMQ's classic remoting protocol
to the name servers of a ``rocketmq://host:9876[;host2:9876]`` URL (a ``postbox broker`` process
or an Apache RocketMQ cluster; being built by issue 21, ``docs/remote-transport.md``).
``open_client`` turns a store URL into one: ``file:///path`` (or a plain path) plus optional
broker.conf keys opens an embedded broker (``open_broker``). ``grpc://`` URLs named Postbox's
former private gRPC service, which is gone: they fail with a ``ConfigurationError`` that names
``rocketmq://``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urlparse

from storage_engine import (
    Broker,
    Clock,
    ConsumeFrom,
    GetResult,
    Message,
    MessageView,
    QueueProgress,
    SendBackResult,
    SendResult,
    StoreConfig,
    SubscriptionGroupConfig,
    TopicConfig,
)

from .errors import ConfigurationError

QueueKey = tuple[str, int]
GRPC_SCHEME = "grpc"
REMOTE_SCHEME = "rocketmq"
GRPC_GONE = ("grpc:// named Postbox's private gRPC service, which is gone: reach a broker "
             "through its name servers with rocketmq://host:9876[;host2:9876]")


class BrokerClient(Protocol):
    """Broker operations the producer and consumers use (embedded or remote)."""

    def send(self, message: Message, *, queue_id: int | None = None,
             sharding_key: str | None = None) -> SendResult: ...

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

    def create_topic(self, topic: str, queue_count: int | None = None, *, perm: int = 6,
                     order: bool = False) -> TopicConfig: ...

    def topic_config(self, topic: str) -> TopicConfig | None: ...

    def queue_ids(self, topic: str) -> list[int]: ...

    def subscription_group(self, group: str) -> SubscriptionGroupConfig: ...

    def register_consumer(self, group: str, client_id: str, topics: Iterable[str]) -> bool: ...

    def unregister_consumer(self, group: str, client_id: str) -> None: ...

    def consumer_ids(self, group: str) -> list[str]: ...

    def add_membership_listener(self, listener: Callable[[str], None]) -> None: ...

    def lock_queues(self, group: str, client_id: str, queues: Iterable[QueueKey]
                    ) -> set[QueueKey]: ...

    def unlock_queues(self, group: str, client_id: str, queues: Iterable[QueueKey]) -> None: ...

    def consumer_progress(self, group: str) -> list[QueueProgress]: ...

    def consumer_groups(self) -> list[str]: ...

    def dead_letters(self, group: str, offset: int = 0, max_count: int = 100
                     ) -> list[MessageView]: ...

    def find_by_unique_key(self, topic: str, unique_key: str) -> list[MessageView]: ...

    def close(self) -> None: ...


if TYPE_CHECKING:  # `make lint` (mypy) holds the implementations to the protocol

    def _implementations(embedded: Broker) -> list[BrokerClient]:
        """Type-checked only: each implementation is a ``BrokerClient``."""
        return [embedded]


def store_path(store_url: str | os.PathLike[str]) -> Path:
    """The directory a ``file://`` URL (or plain path) names."""
    text = os.fspath(store_url)
    parsed = urlparse(text)
    if parsed.scheme in ("", "file"):
        path = unquote(parsed.path) if parsed.scheme else text
        if parsed.netloc not in ("", "localhost"):
            raise ConfigurationError(f"store URL {text!r}: file URLs name a local directory "
                                     "(file:///var/lib/postbox)")
        if not path:
            raise ConfigurationError(f"store URL {text!r} names no directory")
        return Path(path)
    if parsed.scheme == GRPC_SCHEME:
        raise ConfigurationError(f"store URL {text!r}: {GRPC_GONE}")
    if parsed.scheme == REMOTE_SCHEME:
        raise ConfigurationError(f"store URL {text!r}: the rocketmq:// transport is not "
                                 "available in this build yet (issue 21)")
    raise ConfigurationError(f"store URL {text!r}: scheme must be file:// or rocketmq://")


def store_config(store_url: str | os.PathLike[str],
                 broker_conf: Mapping[str, str] | str | os.PathLike[str] | None = None,
                 **overrides: Any) -> StoreConfig:
    """The store configuration for a URL plus optional RocketMQ broker.conf keys."""
    root = store_path(store_url)
    if broker_conf is None:
        return StoreConfig(root_dir=root, **overrides)
    return StoreConfig.from_broker_conf(broker_conf, root_dir=root, **overrides)


def check_store_url(store_url: str | os.PathLike[str],
                    broker_conf: Mapping[str, str] | str | os.PathLike[str] | None = None, *,
                    access_key: str | None = None, secret_key: str | None = None) -> None:
    """Validate a store URL with the options that go with it, opening nothing."""
    if (access_key is None) != (secret_key is None):
        raise ConfigurationError("access_key= and secret_key= go together")
    store_config(store_url, broker_conf)
    if access_key is not None:
        raise ConfigurationError("access_key=/secret_key= are for a remote broker; an "
                                 "embedded store has no access control")


def open_client(store_url: str | os.PathLike[str],
                broker_conf: Mapping[str, str] | str | os.PathLike[str] | None = None, *,
                clock: Clock | None = None, access_key: str | None = None,
                secret_key: str | None = None) -> BrokerClient:
    """The broker a store URL names (embedded for ``file://``)."""
    check_store_url(store_url, broker_conf, access_key=access_key, secret_key=secret_key)
    return open_broker(store_config(store_url, broker_conf), clock)


def open_broker(config: StoreConfig, clock: Clock | None = None) -> Broker:
    """Open an embedded broker (and its store) in this process."""
    return Broker.open(config, clock=clock)
