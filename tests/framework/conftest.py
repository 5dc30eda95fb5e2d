"""Shared fixtures for framework tests: real brokers on small real stores.

``open_broker(name, clock=None, **fields)`` opens an embedded ``Broker`` on a small store under
``tmp_path`` (64 KiB segments, 1 000-unit queue files) and closes it at teardown, after which
``verify_store`` must find the store consistent. Delay levels default to milliseconds so tests
with real threads stay fast; ``DEFAULT_LEVELS`` gives RocketMQ's real table for fake-clock tests.

Every test that asks for ``client`` runs once per transport (``transport``: "embedded",
"grpc"): ``client(broker)`` is the broker itself, or a new ``RemoteBroker`` to an in-process
gRPC server serving that broker with ``add_postbox_service``. Tests give apps
``App(broker=client(broker))`` and keep inspecting the embedded ``broker`` directly.
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


TRANSPORTS = ("embedded", "grpc")


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    """The transport apps use to reach the broker: in-process, or gRPC on 127.0.0.1."""
    if request.param == "grpc":
        pytest.importorskip("grpc")
    return request.param


@pytest.fixture
def client(transport: str, open_broker) -> Iterator[Callable[[Broker], BrokerClient]]:
    """``client(broker)``: what an app uses to reach ``broker`` over ``transport``; servers and
    clients are closed at teardown, before ``open_broker`` closes the brokers."""
    servers: list = []

    def factory(broker: Broker) -> BrokerClient:
        if transport == "embedded":
            return broker
        from tests.support.grpc_broker import LoopbackServer

        server = next((s for s in servers if s.broker is broker), None)
        if server is None:
            server = LoopbackServer(broker)
            servers.append(server)
        return server.client()

    yield factory
    for server in reversed(servers):
        server.close()
