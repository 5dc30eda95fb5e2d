"""Fixtures of the remoting server tests: a real broker on a store under ``tmp_path`` served by
``BrokerRemotingServer`` on a free loopback port, and raw clients closed at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from postbox.broker_node.server.broker import BrokerRemotingServer
from postbox.storage_engine import Broker
from tests.support.remoting_raw import RawRemotingClient
from tests.support.small_store import small_store_config


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    """An embedded broker on a fresh store."""
    with Broker.open(small_store_config(tmp_path / "store")) as opened:
        yield opened


@pytest.fixture
def remoting(broker: Broker) -> Iterator[BrokerRemotingServer]:
    """The broker served over remoting."""
    with BrokerRemotingServer(broker) as server:
        yield server


@pytest.fixture
def connect(remoting: BrokerRemotingServer) -> Iterator[Callable[..., RawRemotingClient]]:
    """Factory of raw clients to the served broker, closed at teardown."""
    opened: list[RawRemotingClient] = []

    def make(**options) -> RawRemotingClient:
        client = RawRemotingClient(remoting.address, **options)
        opened.append(client)
        return client

    yield make
    for client in opened:
        client.close()
