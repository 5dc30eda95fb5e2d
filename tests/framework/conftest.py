"""Shared fixtures for framework tests: real brokers on small real stores.

``open_broker(name, clock=None, **fields)`` opens an embedded ``Broker`` on a small store under
``tmp_path`` (64 KiB segments, 1 000-unit queue files) and closes it at teardown, after which
``verify_store`` must find the store consistent. Delay levels default to milliseconds so tests
with real threads stay fast; ``DEFAULT_LEVELS`` gives RocketMQ's real table for fake-clock tests.

``client(broker)`` is what an app uses to reach ``broker``: the broker itself (tests give apps
``App(broker=client(broker))`` and keep inspecting the embedded ``broker`` directly).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from framework import BrokerClient
from storage_engine import Broker, DelayConfig, FakeClock, verify_store
from storage_engine.config import DEFAULT_DELAY_LEVELS, parse_delay_levels
from tests.storage_engine.conftest import START_MS, small_config

MS_LEVELS = "20ms 40ms 60ms 80ms 100ms 120ms 140ms 160ms 180ms 200ms 220ms 240ms 260ms " \
    "280ms 300ms 320ms 340ms 360ms"
DEFAULT_LEVELS = DEFAULT_DELAY_LEVELS


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock(START_MS)


@pytest.fixture
def open_broker(tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    """Factory for brokers on small stores; all closed and verified at teardown."""
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


@pytest.fixture
def client() -> Callable[[Broker], BrokerClient]:
    """``client(broker)``: what an app uses to reach ``broker`` (the broker itself)."""
    return lambda broker: broker
