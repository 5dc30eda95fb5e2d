"""How a store URL opens a ``BrokerClient``, the one interface the framework talks to.

``BrokerClient`` is the broker contract's (``storage_engine.contract``, re-exported here and as
``framework.BrokerClient``). Implementations share it: embedded — ``storage_engine.Broker`` in
this process — and remote: ``network.client.RemotingBroker``,
the same methods over RocketMQ's classic remoting protocol to a Postbox broker or an Apache
RocketMQ cluster (``docs/remote-transport.md``). ``open_client`` turns a store URL into one:
``file:///path`` (or a plain path) plus optional broker.conf keys opens an embedded broker
(``open_broker``); ``rocketmq://host:port[;host:port][?namespace=NS]`` (name servers) connects to
a cluster (``open_rocketmq_client``), with optional access-key credentials. ``grpc://`` URLs
named Postbox's former private gRPC service, which is gone: they fail with a
``ConfigurationError`` that names ``rocketmq://``.

Embedded stores get ``EMBEDDED_SEGMENT_SIZE_BYTES`` (64 MiB) commit-log segments instead of
RocketMQ's 1 GiB: a segment's blocks are preallocated when it is created (so a full disk is an
error at that moment, never a SIGBUS in the middle of a write), and an application with a
handful of messages should not hold a gigabyte of disk for them. A ``mappedFileSizeCommitLog``
in ``broker_conf`` wins, and a store that already exists keeps the segment size it was written
with (a segment size is fixed once written; ``docs/architecture.md``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qs, unquote, urlparse

from postbox.storage_engine import Broker, Clock, StoreConfig, infer_config, parse_properties
from postbox.storage_engine.contract import BrokerClient

from .errors import ConfigurationError

GRPC_SCHEME = "grpc"
ROCKETMQ_SCHEME = "rocketmq"
EMBEDDED_SEGMENT_SIZE_BYTES = 64 << 20
"""Commit-log segment size of a new embedded store (``App("file://...")``) whose broker.conf
does not set ``mappedFileSizeCommitLog``: 16 × the largest message (4 MiB), so the unused tail a
segment ends with stays small; a full one is followed by the next."""
SEGMENT_SIZE_KEY = "mappedFileSizeCommitLog"
GRPC_GONE = ("grpc:// named Postbox's private gRPC service, which is gone: reach a broker "
             "through its name servers with rocketmq://host:9876[;host2:9876]")


if TYPE_CHECKING:  # `make lint` (mypy) holds every implementation to the protocol
    from postbox.network.client.remote_broker import RemotingBroker

    def _implementations(embedded: Broker, remoting: RemotingBroker) -> list[BrokerClient]:
        """Type-checked only: each implementation is a ``BrokerClient``."""
        return [embedded, remoting]


def embedded_broker(client: BrokerClient | None) -> Broker | None:
    """The broker in this process ``client`` is (its store, delay service, tables), or None for
    a client of a remote broker: a ``BrokerClient`` that is not ``remote`` is the embedded
    ``Broker`` (the contract's capability; no type check)."""
    if client is None or client.remote:
        return None
    return cast(Broker, client)


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
    if parsed.scheme == ROCKETMQ_SCHEME:
        raise ConfigurationError(f"store URL {text!r} names a remote broker, not a directory")
    raise ConfigurationError(f"store URL {text!r}: scheme must be file:// or rocketmq://")


def rocketmq_cluster(store_url: str | os.PathLike[str]) -> tuple[list[str], str] | None:
    """``(name-server addresses, namespace)`` of ``rocketmq://host:port[;host:port][?namespace=NS]``;
    None for any other URL."""
    text = os.fspath(store_url)
    scheme, separator, rest = text.partition("://")
    if not separator or scheme.lower() != ROCKETMQ_SCHEME:
        return None
    problem = f"store URL {text!r}: a RocketMQ cluster URL is rocketmq://host:port[;host:port]" \
              "[?namespace=NS]"
    location, _, query = rest.partition("?")
    if "#" in text or location.rstrip("/").count("/") or "@" in location:
        raise ConfigurationError(problem + (" (pass credentials as App(access_key=, "
                                            "secret_key=), not in the URL: URLs end up in logs)"
                                            if "@" in location else ""))
    addresses = [item.strip() for item in location.rstrip("/").split(";") if item.strip()]
    if not addresses:
        raise ConfigurationError(problem + " (no name server address)")
    for address in addresses:
        host, colon, port = address.rpartition(":")
        if not colon or not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigurationError(f"{problem} ({address!r} is not host:port)")
    options = parse_qs(query, keep_blank_values=True, strict_parsing=False) if query else {}
    unknown = sorted(set(options) - {"namespace"})
    if unknown or any(len(values) != 1 for values in options.values()):
        raise ConfigurationError(f"{problem} (the only option is one namespace=; got "
                                 f"{', '.join(unknown) or 'it twice'})")
    namespace = options.get("namespace", [""])[0]
    if namespace and not all(char.isalnum() or char in "_-" for char in namespace):
        raise ConfigurationError(f"{problem} (namespace {namespace!r}: letters, digits, '_' "
                                 "and '-' only)")
    return addresses, namespace


def remote_address(store_url: str | os.PathLike[str]) -> str | None:
    """The name servers of a ``rocketmq://`` URL, ``;``-joined; None for a ``file://`` URL or a
    path. A ``grpc://`` URL fails naming ``rocketmq://``."""
    text = os.fspath(store_url)
    cluster = rocketmq_cluster(text)
    if cluster is not None:
        return ";".join(cluster[0])
    if urlparse(text).scheme == GRPC_SCHEME:
        raise ConfigurationError(f"store URL {text!r}: {GRPC_GONE}")
    return None


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
    if remote_address(store_url) is None:
        if access_key is not None:
            raise ConfigurationError("access_key=/secret_key= are for a rocketmq:// broker;"
                                     " an embedded store has no access control")
        store_config(store_url, broker_conf)
    elif broker_conf is not None:
        raise ConfigurationError("broker_conf= configures an embedded store; a remote broker "
                                 "is configured where it runs")


def open_client(store_url: str | os.PathLike[str],
                broker_conf: Mapping[str, str] | str | os.PathLike[str] | None = None, *,
                clock: Clock | None = None, access_key: str | None = None,
                secret_key: str | None = None) -> BrokerClient:
    """The broker a store URL names: embedded (``file://``) or remote (``rocketmq://``)."""
    check_store_url(store_url, broker_conf, access_key=access_key, secret_key=secret_key)
    cluster = rocketmq_cluster(store_url)
    if cluster is not None:
        return open_rocketmq_client(cluster[0], namespace=cluster[1], clock=clock,
                                    access_key=access_key, secret_key=secret_key)
    return open_broker(embedded_store_config(store_url, broker_conf), clock)


def embedded_store_config(store_url: str | os.PathLike[str],
                          broker_conf: Mapping[str, str] | str | os.PathLike[str] | None = None
                          ) -> StoreConfig:
    """``store_config`` for an embedded broker an app opens: with ``EMBEDDED_SEGMENT_SIZE_BYTES``
    segments unless ``broker_conf`` sets ``mappedFileSizeCommitLog`` or the store at the URL
    was written with another size (reads its layout, opens nothing)."""
    config = store_config(store_url, broker_conf)
    if broker_conf is not None and SEGMENT_SIZE_KEY in _broker_conf_keys(broker_conf):
        return config
    embedded = config.replace(commit_log=dataclasses.replace(
        config.commit_log, segment_size_bytes=EMBEDDED_SEGMENT_SIZE_BYTES))
    written = infer_config(config.root_dir, embedded).commit_log.segment_size_bytes
    return config.replace(commit_log=dataclasses.replace(
        config.commit_log, segment_size_bytes=written))


def _broker_conf_keys(broker_conf: Mapping[str, str] | str | os.PathLike[str]) -> set[str]:
    if isinstance(broker_conf, Mapping):
        return {str(key) for key in broker_conf}
    return set(parse_properties(Path(os.fspath(broker_conf)).read_text(encoding="utf-8")))


def open_broker(config: StoreConfig, clock: Clock | None = None) -> Broker:
    """Open an embedded broker (and its store) in this process."""
    return Broker.open(config, clock=clock)


def open_rocketmq_client(namesrv_addresses: list[str], *, namespace: str = "",
                         clock: Clock | None = None, access_key: str | None = None,
                         secret_key: str | None = None) -> BrokerClient:
    """A client of the RocketMQ cluster (Postbox broker or Apache RocketMQ) whose name servers
    are ``namesrv_addresses``, over the remoting protocol. Connecting is lazy: an unreachable
    cluster is reported by the first call (``BrokerUnavailableError``), not here."""
    from postbox.network.client.remote_broker import RemotingBroker
    if (access_key is None) != (secret_key is None):
        raise ConfigurationError("access_key= and secret_key= go together")
    return RemotingBroker(namesrv_addresses, namespace=namespace, clock=clock,
                          access_key=access_key, secret_key=secret_key)

