"""A live Apache RocketMQ beside the tests (a pytest plugin, loaded by ``tests/conftest.py``).

Fixtures (docs/compat-lab.md has the whole story):

- ``rocketmq_install`` (session): the jars and the compiled driver in the lab cache
  (``tests/support/rocketmq_install.py``). Without ``java``/``javac``/``mvn`` every test that
  needs the lab skips with that reason (under ``CI=true`` the ci_policy plugin turns the skip
  into a failure). A failed download or build fails the tests with Maven's or javac's output.
- ``live_rocketmq`` (session): a name server, one broker (``live_rocketmq.broker``) and a proxy
  in cluster mode (gRPC endpoint ``live_rocketmq.proxy_endpoint``), started once per session on
  free loopback ports and stopped (SIGTERM) at its end; ``live_rocketmq.driver`` runs the
  official clients.
- ``rocketmq_brokers`` (function): ``rocketmq_brokers.start(store_dir, name=...)`` starts one
  more broker on a given store folder (empty, or a copy of another store), registered with the
  session's name server so the driver and the proxy reach it; the test ``stop()``s it to read its
  store, and whatever still runs is stopped when the test ends. Give it topics no other broker
  has (the name server routes a topic to every broker that holds it).

Tests that use these fixtures carry the ``live_rocketmq`` marker (``-m 'not live_rocketmq'``
leaves them out) and a ``timeout`` of ``LAB_TIMEOUT_S`` instead of the default per-test one.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.rocketmq_install import (
    LabInstall,
    LabSetupError,
    LabUnavailableError,
    tail,
)
from tests.support.rocketmq_processes import (
    CLUSTER,
    BrokerServer,
    JavaServer,
    start_broker,
    start_namesrv,
    start_proxy,
)

MARKER = "live_rocketmq"
DRIVER_TIMEOUT_S = 180
DRIVER_JVM_FLAGS = ("-Xmx192m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
"""Small and quick to start: one command a JVM (the benchmark passes its own)."""
LAB_TIMEOUT_S = 1_200  # per test (pytest-timeout); the first one also installs and starts the lab
RESULT_PREFIX = "LAB-RESULT "


class DriverError(Exception):
    """A driver command failed; the message holds the driver's error and output tail."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}: runs Apache RocketMQ and its official Java clients (needs a JDK "
                   "and Maven; skipped without them, a failure under CI=true)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    lab_fixtures = {"rocketmq_install", "live_rocketmq", "rocketmq_brokers"}
    for item in items:
        if lab_fixtures & set(getattr(item, "fixturenames", ())):
            item.add_marker(MARKER)
            item.add_marker(pytest.mark.timeout(LAB_TIMEOUT_S))


@dataclass
class LabDriver:
    """Runs ``tests/lab/driver`` (the official Java clients) and returns what it reports."""

    install: LabInstall
    home: Path
    namesrv: str
    jvm_flags: tuple[str, ...] = DRIVER_JVM_FLAGS
    timeout_s: float = DRIVER_TIMEOUT_S

    def run(self, command: str, **request) -> object:
        """One driver command; ``request`` becomes its JSON input (``namesrv`` is added)."""
        request.setdefault("namesrv", self.namesrv)
        argv = [self.install.java, *self.jvm_flags, f"-Duser.home={self.home}",
                "-Drmq.logback.configurationFile=rmq.client.logback.xml",
                "-cp", self.install.driver_classpath(), "lab.LabDriver", command]
        return run_command(argv, request, f"driver {command}", self.timeout_s)


def run_command(argv: list[str], request: dict, what: str, timeout_s: float) -> object:
    """Run a lab program (the Java driver, the Go client) with ``request`` as JSON on stdin and
    return the JSON of its ``LAB-RESULT`` line; ``DriverError`` (named ``what``) with its output
    when it fails or stays silent past ``timeout_s``."""
    try:
        done = subprocess.run(argv, input=json.dumps(request), capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired as error:
        raise DriverError(f"{what}: no answer after {timeout_s} s") from error
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_PREFIX) and done.returncode == 0:
            return json.loads(line[len(RESULT_PREFIX):])
    raise DriverError(f"{what} failed (exit {done.returncode}):\n"
                      f"{tail(done.stdout, 10)}\n{tail(done.stderr, 30)}")


@dataclass
class LiveRocketMQ:
    """The session's RocketMQ: name server, broker, proxy and the driver."""

    install: LabInstall
    run_dir: Path
    namesrv: str
    namesrv_server: JavaServer
    broker: BrokerServer | None = None
    proxy_server: JavaServer | None = None
    proxy_endpoint: str = ""
    driver: LabDriver = field(init=False)
    cluster: str = CLUSTER
    startup_s: dict[str, float] = field(default_factory=dict)
    extra_brokers: list[BrokerServer] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.driver = LabDriver(self.install, self.run_dir / "driver", self.namesrv)

    def start_broker(self, store_dir: Path, *, name: str, extra: dict[str, str] | None = None,
                     ports: tuple[int, int] | None = None) -> BrokerServer:
        """Another broker on ``store_dir``, registered with this name server (``ports``: see
        ``rocketmq_processes.start_broker``); stopped at the latest with the session."""
        broker = start_broker(self.install, self.run_dir, self.namesrv, store_dir, name=name,
                              cluster=self.cluster, extra=extra, ports=ports)
        self.extra_brokers.append(broker)
        return broker

    def stop(self) -> None:
        for server in (self.proxy_server, *(b.server for b in self.extra_brokers),
                       self.broker and self.broker.server, self.namesrv_server):
            if server is not None:
                server.stop()


@pytest.fixture(scope="session")
def rocketmq_install() -> LabInstall:
    try:
        return LabInstall.prepare()
    except LabUnavailableError as missing:
        pytest.skip(str(missing))
    except LabSetupError as failure:
        pytest.fail(f"the RocketMQ lab could not be set up: {failure}", pytrace=False)


@pytest.fixture(scope="session")
def live_rocketmq(rocketmq_install: LabInstall,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveRocketMQ]:
    run_dir = tmp_path_factory.mktemp("rocketmq-lab")
    started = time.monotonic()
    lab = None
    try:
        namesrv_server, namesrv = start_namesrv(rocketmq_install, run_dir)
        lab = LiveRocketMQ(rocketmq_install, run_dir, namesrv, namesrv_server)
        lab.startup_s["namesrv"] = time.monotonic() - started
        lab.broker = start_broker(rocketmq_install, run_dir, namesrv, run_dir / "store-a",
                                  name="lab-a")
        lab.startup_s["broker"] = time.monotonic() - started - lab.startup_s["namesrv"]
        # only now: a proxy in cluster mode exits unless its cluster has a registered broker
        lab.proxy_server, lab.proxy_endpoint = start_proxy(rocketmq_install, run_dir, namesrv)
        lab.startup_s["total"] = time.monotonic() - started
    except LabSetupError as failure:
        if lab is not None:
            lab.stop()
        pytest.fail(f"the RocketMQ lab did not start: {failure}", pytrace=False)
    try:
        yield lab
    finally:
        lab.stop()


@dataclass
class BrokerFactory:
    """Starts brokers for one test and stops those still running when it ends."""

    lab: LiveRocketMQ
    started: list[BrokerServer] = field(default_factory=list)
    _names: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def start(self, store_dir: Path, *, name: str | None = None,
              extra: dict[str, str] | None = None,
              ports: tuple[int, int] | None = None) -> BrokerServer:
        name = name or f"lab-extra-{next(self._names)}"
        try:
            broker = self.lab.start_broker(store_dir, name=name, extra=extra, ports=ports)
        except LabSetupError as failure:
            pytest.fail(f"broker {name} did not start: {failure}", pytrace=False)
        self.started.append(broker)
        return broker

    def stop_all(self) -> None:
        for broker in self.started:
            broker.stop()


@pytest.fixture
def rocketmq_brokers(live_rocketmq: LiveRocketMQ) -> Iterator[BrokerFactory]:
    factory = BrokerFactory(live_rocketmq)
    try:
        yield factory
    finally:
        factory.stop_all()


def copy_store(store_dir: Path, target: Path) -> Path:
    """A copy of a stopped broker's store folder (without its process ``lock`` file)."""
    shutil.copytree(store_dir, target, ignore=shutil.ignore_patterns("lock"))
    return target
