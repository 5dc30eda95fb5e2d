"""Where the official remoting peers run in the lab: a name server address and its broker.

- ``RemotingTarget``: one cluster the peers talk to — the name server address, the broker's name
  and address, and the lab driver (Java clients and ``mqadmin``) aimed at it.
- ``PostboxRemotingServer``: ``postbox broker start`` as a subprocess on a fresh store in a temp
  folder, serving RocketMQ's remoting protocol (name server and broker on free loopback ports
  the server picks and prints, as ``BrokerProcess`` starts it). ``start`` returns once the
  server printed its ``namesrv listening on`` line (its ports are bound then); ``stop`` sends
  SIGTERM and checks exit code 0. The store uses ``broker_conf`` (default
  ``broker_process.TEST_BROKER_CONF``: small files, delay levels whose first retry level, 3, is
  300 ms).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.support.broker_process import TEST_BROKER_CONF, BrokerProcess
from tests.support.mqadmin import Mqadmin
from tests.support.rocketmq_lab import LabDriver


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
        conf = self.directory / "broker.conf"
        conf.write_text(self.broker_conf)
        self.process = BrokerProcess(self.directory / "store", broker_conf=conf).start()
        self.namesrv = self.process.namesrv_address  # bound and printed: it accepts now
        self.remoting = self.process.remoting_address
        return self

    def stop(self) -> None:
        """SIGTERM; the server must exit 0."""
        if self.process is not None:
            code = self.process.stop()
            assert code == 0, self.process.stderr_text()[-3000:]
