"""Shared fixtures for framework tests: real brokers on small real stores.

``open_broker(name, clock=None, **fields)`` opens an embedded ``Broker`` on a small store under
``tmp_path`` (64 KiB segments, 1 000-unit queue files) and closes it at teardown, after which
``verify_store`` must find the store consistent. Delay levels default to milliseconds so tests
with real threads stay fast; ``DEFAULT_LEVELS`` gives RocketMQ's real table for fake-clock tests.

In a remote-transport run (``--transport postbox|rocketmq``, ``tests/support/transports.py``)
``open_broker(name)`` returns instead a client of the run's remote broker (``open_client`` of
``store.url(name)``: a namespace of the test's own per name), closed at teardown; tests that
configure the broker (``clock=``, ``levels=``, store fields) or read its store are marked
``embedded_only`` and never get here (the factory refuses them, naming the marker).

``client(broker)`` is what an app uses to reach ``broker``: the broker (or remote client) itself
(tests give apps ``App(broker=client(broker))`` and keep inspecting ``broker`` through the
``BrokerClient`` methods, or, embedded only, directly).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from postbox.framework import BrokerClient
from postbox.framework.transport import open_client
from postbox.storage_engine import Broker, DelayConfig, FakeClock, verify_store
from postbox.storage_engine.config import DEFAULT_DELAY_LEVELS, parse_delay_levels
from tests.storage_engine.conftest import START_MS, small_config
from tests.support.transports import StoreUnderTest

MS_LEVELS = "20ms 40ms 60ms 80ms 100ms 120ms 140ms 160ms 180ms 200ms 220ms 240ms 260ms " \
    "280ms 300ms 320ms 340ms 360ms"
DEFAULT_LEVELS = DEFAULT_DELAY_LEVELS


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock(START_MS)


@pytest.fixture
def open_broker(tmp_path: Path, store: StoreUnderTest) -> Iterator[Callable[..., Broker]]:
    """Factory for brokers on small stores; all closed and verified at teardown."""
    if store.remote:
        yield from _remote_brokers(store)
        return
    opened: list[Broker] = []

    def factory(name: str = "store", *, clock=None, levels: str = MS_LEVELS,
                **fields) -> Broker:
        config = small_config(tmp_path / name, tiny=False,
                              delay=DelayConfig(levels_ms=parse_delay_levels(levels)), **fields)
        broker = Broker.open(config, clock=clock)
        opened.append(broker)
        return broker

    yield factory
    for broker in reversed(opened):
        broker.close()
    for broker in opened:
        assert verify_store(broker.store.root_dir, broker.store.config) == []


def _remote_brokers(store: StoreUnderTest) -> Iterator[Callable[..., BrokerClient]]:
    """``open_broker`` of a remote-transport run: clients of the run's broker, closed at the
    end."""
    opened: list[BrokerClient] = []

    def factory(name: str = "store", *, clock=None, levels: str = MS_LEVELS,
                **fields) -> BrokerClient:
        if clock is not None or levels != MS_LEVELS or fields:
            raise AssertionError("this test configures the embedded broker: mark it "
                                 "@pytest.mark.embedded_only(reason)")
        client = open_client(store.url(name))
        opened.append(client)
        return client

    yield factory
    for client in reversed(opened):
        client.close()


@pytest.fixture
def client() -> Callable[[Broker], BrokerClient]:
    """``client(broker)``: what an app uses to reach ``broker`` (the broker itself)."""
    return lambda broker: broker
