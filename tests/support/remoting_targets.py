"""Where the official remoting peers run in the lab: a name server address and its broker.

- ``RemotingTarget``: one cluster the peers talk to — the name server address, the broker's name
  and address, and the lab driver (Java clients and ``mqadmin``) aimed at it.
- ``PostboxRemotingServer``: ``postbox broker start`` as a subprocess on a fresh store in a temp
  folder, serving RocketMQ's remoting protocol (``--namesrv-listen`` and ``--remoting-listen``
  on free loopback ports, gRPC on ``--listen 127.0.0.1:0``). ``start`` returns once the gRPC
  ``listening on`` line appeared and the name-server port accepts connections; ``stop`` sends
  SIGTERM and checks exit code 0. The store uses ``broker_conf`` (default
  ``broker_process.TEST_BROKER_CONF``: small files, delay levels whose first retry level, 3, is
  300 ms).

Ports are picked free just before the start; another process may take one in between, in which
case the server fails to bind and ``start`` raises with its log.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.broker_process import TEST_BROKER_CONF, BrokerProcess
from tests.support.mqadmin import Mqadmin
from tests.support.rocketmq_lab import LabDriver
from tests.support.rocketmq_processes import free_port

NAMESRV_WAIT_S = 30.0


@dataclass(frozen=True)
class RemotingTarget:
    """A name server and its one broker, with the peers pointed at it."""

    name: str
    namesrv: str
    broker_name: str
    broker_addr: str
    driver: LabDriver

    @property
    def mqadmin(self) -> Mqadmin:
        return Mqadmin(self.driver)

    @classmethod
    def discover(cls, name: str, driver: LabDriver) -> RemotingTarget:
        """The target behind ``driver.namesrv``: its one broker, as the name server reports it."""
        brokers = driver.run("cluster")
        assert len(brokers) == 1, f"{name}: expected one broker, the name server has {brokers}"
        ((broker_name, addresses),) = brokers.items()
        return cls(name=name, namesrv=driver.namesrv, broker_name=broker_name,
                   broker_addr=addresses["0"], driver=driver)


def _accepts(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except OSError:
        return False


@dataclass
class PostboxRemotingServer:
    """``postbox broker start`` serving remoting on free loopback ports over a store in
    ``directory``."""

    directory: Path
    broker_conf: str = TEST_BROKER_CONF
    process: BrokerProcess | None = None
    namesrv: str = ""
    remoting: str = ""

    def start(self) -> PostboxRemotingServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.namesrv = f"127.0.0.1:{free_port()}"
        self.remoting = f"127.0.0.1:{free_port()}"
        conf = self.directory / "broker.conf"
        conf.write_text(self.broker_conf)
        self.process = BrokerProcess(
            self.directory / "store", broker_conf=conf,
            extra=("--namesrv-listen", self.namesrv, "--remoting-listen", self.remoting))
        self.process.start()
        deadline = time.monotonic() + NAMESRV_WAIT_S
        while not _accepts(self.namesrv):
            if self.process.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                raise AssertionError(f"postbox name server {self.namesrv} not accepting:\n"
                                     f"{self.process.stderr_text()[-3000:]}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        """SIGTERM; the server must exit 0."""
        if self.process is not None:
            code = self.process.stop()
            assert code == 0, self.process.stderr_text()[-3000:]
