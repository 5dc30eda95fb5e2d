"""Fixtures of the remoting server tests: a real broker on a store under ``tmp_path`` served by
``BrokerRemotingServer`` on a free loopback port, and raw clients closed at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.remoting_raw import RawRemotingClient
from postbox.broker_node.server.broker import BrokerRemotingServer
from postbox.storage_engine import Broker
from tests.support.brokers import BrokerFactory
from tests.support.small_store import small_store_config


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    """The served brokers (``broker`` of tests/support/brokers.py) open on the remoting tests'
    small store, closed and verified at teardown."""
    with BrokerFactory(tmp_path) as brokers:
        yield lambda name="store": brokers.open(config=small_store_config(tmp_path / name))


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
