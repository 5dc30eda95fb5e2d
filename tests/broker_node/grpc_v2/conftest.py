"""Fixtures for the network broker tests: servers in separate processes, official clients here.

``broker_server(name, broker_conf=True, acl=None, prepare=None)`` starts ``postbox broker
start`` on a fresh store under ``tmp_path`` (``prepare(broker)`` may set the store up first
through an embedded ``Broker``), and at teardown stops it with SIGTERM: exit code 0 and a store
that ``verify_store`` finds consistent are part of every test. Clients made with ``clients``
are shut down at teardown, before the server stops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from postbox.storage_engine import Broker, StoreConfig, verify_store
from tests.support.broker_process import BrokerProcess, write_broker_conf


def store_config(store: Path, broker_conf: Path) -> StoreConfig:
    """The configuration the server process uses for ``store``."""
    return StoreConfig.from_broker_conf(broker_conf, root_dir=store)


@pytest.fixture
def clients() -> Iterator[list]:
    """Official RocketMQ clients to shut down at teardown (append them once started)."""
    started: list = []
    yield started
    for client in reversed(started):
        client.shutdown()


@pytest.fixture
def broker_server(tmp_path: Path, clients: list) -> Iterator[Callable[..., BrokerProcess]]:
    """Factory: a started server process; stopped (exit 0) and its store verified at teardown."""
    servers: list[tuple[BrokerProcess, Path | None]] = []

    def start(name: str = "store", *, acl: Path | None = None,
              prepare: Callable[[Broker], None] | None = None) -> BrokerProcess:
        store = tmp_path / name
        conf = write_broker_conf(tmp_path)
        if prepare is not None:
            with Broker.open(store_config(store, conf)) as broker:
                prepare(broker)
        server = BrokerProcess(store, broker_conf=conf, acl=acl).start()
        servers.append((server, conf))
        return server

    yield start
    for client in reversed(clients):
        client.shutdown()
    clients.clear()
    for server, conf in servers:
        code = server.stop()
        assert code == 0, server.stderr_text()
        assert not (server.store / "abort").exists()
        assert verify_store(server.store, store_config(server.store, conf)) == []
