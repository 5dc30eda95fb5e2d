"""Fixtures for the remote-transport tests: a broker served from another process, and an
in-process loopback server over an embedded broker.

- ``broker_process``: ``postbox broker start`` on a store under ``tmp_path``; ``.address`` is
  its ``host:port``; stopped cleanly (SIGTERM, exit code 0) at teardown.
- ``loopback``: ``loopback(broker, access=None)`` → a ``LoopbackServer`` (in-process gRPC server
  for an embedded broker from ``open_broker``), closed at teardown before the brokers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("grpc")

from storage_engine import Broker  # after the grpcio check
from tests.framework.conftest import open_broker  # noqa: F401  (fixture used below)
from tests.support.broker_process import BrokerProcess
from tests.support.consumer_process import BROKER_CONF
from tests.support.grpc_broker import LoopbackServer
from tests.support.idempotent_consumer import MS_DELAY_LEVELS


def start_broker_process(store: Path) -> BrokerProcess:
    """``postbox broker start`` on ``store`` with the consumer processes' small segments and
    millisecond delay levels."""
    conf = store.parent / f"{store.name}.conf"
    conf.write_text("".join(f"{key}={value}\n" for key, value in
                            {**BROKER_CONF, "messageDelayLevel": MS_DELAY_LEVELS}.items()))
    return BrokerProcess(store, broker_conf=conf).start()


@pytest.fixture
def broker_process(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker served from another process, stopped cleanly at teardown."""
    running = start_broker_process(tmp_path / "broker-store")
    yield running
    assert running.stop() == 0


@pytest.fixture
def loopback(open_broker) -> Iterator[Callable[..., LoopbackServer]]:  # noqa: F811
    """Factory of in-process servers for embedded brokers; closed before the brokers."""
    servers: list[LoopbackServer] = []

    def factory(broker: Broker, access=None) -> LoopbackServer:
        server = LoopbackServer(broker, access=access)
        servers.append(server)
        return server

    yield factory
    for server in reversed(servers):
        server.close()
