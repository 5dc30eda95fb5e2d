"""Embedded brokers for tests (a pytest plugin, loaded by ``tests/conftest.py``): one way to
open a broker on a small real store, close it and check it.

- ``BrokerFactory(root, clock)`` opens brokers (``Broker.open``, so each owns its store) under
  ``root`` and, at exit, closes them in reverse order and requires ``verify_store`` to find no
  problem, as the ``open_store`` fixture does for plain stores. ``broker_config(root,
  **broker_fields)`` is its default store: 64 KiB segments, ``BrokerConfig(**broker_fields)``.
- ``open_broker(name, clock=None, levels=MS_LEVELS, **fields)`` (fixture): a broker on a small
  store under ``tmp_path / name`` with delay levels in milliseconds (real threads stay fast;
  ``DEFAULT_LEVELS`` is RocketMQ's real table, for fake-clock tests). In a remote-transport run
  (``--transport postbox|rocketmq``, ``tests/support/transports.py``) ``open_broker(name)``
  returns instead a client of the run's remote broker (``open_client`` of ``store.url(name)``:
  a namespace of the test's own per name), closed at teardown; tests that configure the broker
  (``clock=``, ``levels=``, store fields) or read its store are marked ``embedded_only`` and
  never get here (the factory refuses them, naming the marker).
- ``broker`` (fixture): the test's broker, ``broker_factory("store")`` with the topics of
  ``broker_topics`` (``{topic: queue count}``, none by default) created. ``broker_factory`` is
  ``open_broker`` here; ``tests/storage_engine`` opens its fake-clock brokers instead, and a
  module overrides ``broker_topics`` (or ``broker_factory``) for its own broker.
- ``fake_clock`` (fixture): a ``FakeClock`` at ``START_MS`` that moves only when the test
  advances it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from postbox.framework import BrokerClient
from postbox.framework.transport import open_client
from postbox.storage_engine import (
    Broker,
    BrokerConfig,
    DelayConfig,
    FakeClock,
    StoreConfig,
    verify_store,
)
from postbox.storage_engine.config import DEFAULT_DELAY_LEVELS, parse_delay_levels
from tests.storage_engine.conftest import START_MS, small_config
from tests.support.transports import StoreUnderTest

MS_LEVELS = "20ms 40ms 60ms 80ms 100ms 120ms 140ms 160ms 180ms 200ms 220ms 240ms 260ms " \
    "280ms 300ms 320ms 340ms 360ms"
DEFAULT_LEVELS = DEFAULT_DELAY_LEVELS
_FACTORY_CLOCK = object()  # ``BrokerFactory.open``'s default: the factory's own clock


def broker_config(root: Path, **broker_fields) -> StoreConfig:
    """A small store configuration (64 KiB segments) with ``BrokerConfig(**broker_fields)``."""
    return small_config(root, tiny=False, broker=BrokerConfig(**broker_fields))


class BrokerFactory:
    """Opens brokers and closes plus verifies them all at exit."""

    def __init__(self, root: Path, clock: FakeClock | None = None) -> None:
        self.root = root
        self.clock = clock
        self._opened: list[Broker] = []

    def open(self, name: str = "store", *, memory_bytes: int | None = None,
             config: StoreConfig | None = None, clock=_FACTORY_CLOCK, **broker_fields) -> Broker:
        """A broker that owns a store under ``root / name`` (``config``'s root when given), on
        the factory's clock unless ``clock`` is given."""
        store_config = config or broker_config(self.root / name, **broker_fields)
        broker = Broker.open(store_config, clock=self.clock if clock is _FACTORY_CLOCK else clock,
                             memory_bytes=memory_bytes)
        self._opened.append(broker)
        return broker

    def __enter__(self) -> BrokerFactory:
        return self

    def __exit__(self, *exc_info) -> None:
        for broker in reversed(self._opened):
            broker.close()
        for broker in self._opened:
            assert verify_store(broker.store.root_dir, broker.store.config) == []


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock(START_MS)


@pytest.fixture
def open_broker(tmp_path: Path, store: StoreUnderTest) -> Iterator[Callable[..., Broker]]:
    """Factory for brokers on small stores; all closed and verified at teardown."""
    if store.remote:
        yield from _remote_brokers(store)
        return
    with BrokerFactory(tmp_path) as brokers:
        def factory(name: str = "store", *, clock=None, levels: str = MS_LEVELS,
                    **fields) -> Broker:
            config = small_config(tmp_path / name, tiny=False,
                                  delay=DelayConfig(levels_ms=parse_delay_levels(levels)),
                                  **fields)
            return brokers.open(name, config=config, clock=clock)

        yield factory


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
def broker_factory(open_broker: Callable[..., BrokerClient]) -> Callable[..., BrokerClient]:
    """What ``broker`` opens its broker with (``factory("store")``)."""
    return open_broker


@pytest.fixture
def broker_topics() -> dict[str, int]:
    """Topics ``broker`` creates, with their queue counts."""
    return {}


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerClient],
           broker_topics: dict[str, int]) -> BrokerClient:
    """The test's broker: ``broker_factory("store")`` with ``broker_topics`` created."""
    opened = broker_factory("store")
    for topic, queue_count in broker_topics.items():
        opened.create_topic(topic, queue_count)
    return opened
