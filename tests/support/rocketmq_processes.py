"""Apache RocketMQ name server, broker and proxy processes for the compatibility lab.

- ``JavaServer`` runs one JVM in its own process group, copies its stdout to a file and returns
  from ``start`` once the server's ready line appeared (``The Name Server boot success``,
  ``The broker[...] boot success``, ``rocketmq-proxy startup successfully``). A server that exits
  or stays silent past the timeout raises ``LabSetupError`` with the last lines of its output and
  of its own log (``<home>/logs/rocketmqlogs/<role>.log``).
- ``stop`` sends SIGTERM (RocketMQ's shutdown hooks flush the store, persist the config files and
  delete ``store/abort``) and SIGKILL only after ``STOP_TIMEOUT_S``.
- Every port is chosen free on loopback (never a default: another RocketMQ may run here). A
  broker needs three: ``listenPort``, the "fast" port ``listenPort - 2`` and the HA port.
- Each server has its own ``user.home`` (its logs and any default paths stay in its run folder).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from bench.remoting_raw import RawRemotingClient
from postbox.network.protocol import fastjson
from postbox.network.protocol.codes import RequestCode
from tests.support.polling import wait_until
from tests.support.rocketmq_install import LabInstall, LabSetupError, tail

T = TypeVar("T")

START_TIMEOUT_S = 180
STOP_TIMEOUT_S = 45
CLUSTER = "PostboxLab"

JVM_FLAGS = [
    "-server", "-XX:+UseG1GC", "-XX:-OmitStackTraceInFastThrow", "-Dfile.encoding=UTF-8",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED",
    "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang=ALL-UNNAMED",
    "--add-opens", "java.base/java.util=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
]
"""The distribution scripts' options without their multi-gigabyte heaps, plus the module opens
Java 17 needs for the store's direct-buffer access."""

LAB_BROKER_SETTINGS = {
    "brokerId": "0",
    "brokerRole": "ASYNC_MASTER",
    "flushDiskType": "ASYNC_FLUSH",
    # a send may wait 5 s in the broker's queue before it is refused "[TIMEOUT_CLEAN_QUEUE]broker
    # busy" (default 200 ms: beside eight CI lanes on two cores, a send once waited 204 ms)
    "waitTimeMillsInSendQueue": "5000",
    "brokerIP1": "127.0.0.1",
    "brokerIP2": "127.0.0.1",
    "bindAddress": "127.0.0.1",
    "storeType": "default",
    "mappedFileSizeCommitLog": "1048576",
    "mappedFileSizeConsumeQueue": "20000",
    "mappedFileSizeTimerLog": "1048576",
    "maxHashSlotNum": "1024",
    "maxIndexNum": "4096",
    "transientStorePoolEnable": "false",
    "enableConsumeQueueExt": "false",
    "autoCreateTopicEnable": "true",
    "autoCreateSubscriptionGroup": "true",
    "timerWheelEnable": "true",
    "messageDelayLevel": "1s 2s 1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 20s 30s 1m 2m 3m 4m",
    "deleteWhen": "04",
    "fileReservedTime": "72",
    "diskMaxUsedSpaceRatio": "95",
    "cleanFileForciblyEnable": "false",
}
"""The lab broker: classic file store (consume queues as files, not RocksDB), 1 MiB commit-log
segments (the corpus crosses segment ends; Postbox opens the store with the same sizes through
``StoreConfig.from_broker_conf``), small consume-queue and index files, the RocketMQ 5 timer
wheel on, and short delay levels: a consumer's first retry (level 3) comes after 1 s, the next
after 2 s, ... (RocketMQ accepts only s/m/h/d units here, not Postbox's ``ms``)."""


LAB_PORTS_LOW = 10_000
"""The lab's servers listen on ports from here up to the kernel's ephemeral range."""


def free_port() -> int:
    """A loopback TCP port nothing listens on right now, below the kernel's ephemeral range.

    A JVM binds the port it is given seconds later; a port from the ephemeral range may by then
    be the local end of some outgoing connection (several lanes run labs and brokers side by
    side), which the kernel never hands out below that range. Chosen at random, so that two labs
    starting together rarely pick the same one (``start_again_if_transient`` retries if they do)."""
    high = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(LAB_PORTS_LOW, high)
        if _is_free(port):
            return port
    raise LabSetupError(f"no free port in [{LAB_PORTS_LOW}, {high})")


def _ephemeral_low() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32_768
    return max(low, LAB_PORTS_LOW + 1_000)


START_ATTEMPTS = 3
# Start failures that a second start does not repeat: a port another process took in between,
# and a proxy whose first name-server request (its system topic's route, with a budget of under
# a second) ran out while the JVMs beside it were still warming up, on a loaded machine.
TRANSIENT_START_FAILURES = ("Address already in use",
                            "create system broadcast topic")


def start_again_if_transient(start: Callable[[], T]) -> T:
    """``start()`` (which picks its ports with ``free_port``) again, with new ports, when the
    server failed in one of the ``TRANSIENT_START_FAILURES`` ways."""
    for attempt in range(START_ATTEMPTS):
        try:
            return start()
        except LabSetupError as error:
            transient = any(sign in str(error) for sign in TRANSIENT_START_FAILURES)
            if not transient or attempt == START_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_broker_ports() -> tuple[int, int]:
    """(listenPort, haListenPort) with ``listenPort - 2`` (the broker's fast port) free too."""
    for _ in range(100):
        listen = free_port()
        if listen > 1026 and _is_free(listen - 2):
            return listen, free_port()
    raise LabSetupError("found no free port pair for a broker (listenPort and listenPort-2)")


def write_properties(path: Path, settings: dict[str, str]) -> Path:
    """A Java properties file (one ``key=value`` a line; no trailing comments: Java keeps them)."""
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return path


@dataclass
class JavaServer:
    """One RocketMQ server JVM."""

    role: str
    home: Path
    argv: list[str]
    ready_marker: str
    process: subprocess.Popen | None = None
    output_path: Path = field(init=False)
    _ready: threading.Event = field(default_factory=threading.Event)
    _said_ready: bool = False

    def __post_init__(self) -> None:
        self.output_path = self.home / f"{self.role}.out"

    def start(self, timeout_s: float = START_TIMEOUT_S) -> JavaServer:
        """Launch and wait until the server says it is ready."""
        return self.launch().await_ready(timeout_s)

    def launch(self) -> JavaServer:
        """Start the JVM without waiting (``await_ready`` waits)."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        threading.Thread(target=self._copy_output, name=f"lab-{self.role}-output",
                         daemon=True).start()
        return self

    def await_ready(self, timeout_s: float = START_TIMEOUT_S) -> JavaServer:
        """Return once the ready line appeared; stop the server and raise if it did not."""
        self._ready.wait(timeout_s)
        if not self._said_ready:
            ended = self._ready.is_set()  # output closed: the process is exiting
            why = (f"exited with {self.process.wait(STOP_TIMEOUT_S)}" if ended
                   else f"did not say {self.ready_marker!r} within {timeout_s:.0f} s")
            self.stop()
            raise LabSetupError(f"RocketMQ {self.role} {why}\n{self.diagnostics()}")
        return self

    def _copy_output(self) -> None:
        with open(self.output_path, "wb") as copy:
            for line in self.process.stdout:
                copy.write(line)
                copy.flush()
                if not self._said_ready and self.ready_marker.encode() in line:
                    self._said_ready = True
                    self._ready.set()
        self._ready.set()  # the process ended: wake the waiter, which checks poll()

    def diagnostics(self) -> str:
        """The last lines of the server's stdout and of its own log file."""
        parts = [f"--- {self.output_path} (last lines):",
                 tail(self.output_path.read_text(errors="replace")
                      if self.output_path.exists() else "")]
        log = self.home / "logs" / "rocketmqlogs" / f"{self.role}.log"
        if log.exists():
            parts += [f"--- {log} (last lines):", tail(log.read_text(errors="replace"))]
        return "\n".join(parts)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout_s``; the exit code (None if never started)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        return self.process.returncode

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def java_argv(install: LabInstall, home: Path, role: str, heap: list[str],
              main_class: str, *args: str) -> list[str]:
    """The JVM command of one server, its logs under ``home``."""
    return [install.java, *JVM_FLAGS, *heap, f"-Duser.home={home}", f"-Drocketmq.home.dir={home}",
            f"-Drmq.logback.configurationFile=rmq.{role}.logback.xml",
            "-cp", install.servers_classpath(), main_class, *args]


def start_namesrv(install: LabInstall, run_dir: Path) -> tuple[JavaServer, str]:
    """A name server on a free loopback port; (server, "127.0.0.1:port")."""
    return start_again_if_transient(lambda: _start_namesrv(install, run_dir))


def _start_namesrv(install: LabInstall, run_dir: Path) -> tuple[JavaServer, str]:
    home = run_dir / "namesrv"
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    conf = write_properties(home / "namesrv.properties",
                            {"listenPort": str(port), "bindAddress": "127.0.0.1"})
    server = JavaServer("namesrv", home, java_argv(
        install, home, "namesrv", ["-Xms64m", "-Xmx128m"],
        "org.apache.rocketmq.namesrv.NamesrvStartup", "-c", str(conf)),
        ready_marker="The Name Server boot success")
    return server.start(), f"127.0.0.1:{port}"


@dataclass
class BrokerServer:
    """A running RocketMQ broker: its address, store and configuration."""

    name: str
    address: str
    store_dir: Path
    conf_path: Path
    server: JavaServer

    def stop(self) -> int | None:
        """Stop cleanly (SIGTERM): afterwards the store folder is complete and can be copied."""
        return self.server.stop()

    def kill(self) -> None:
        """SIGKILL (leaves ``store/abort`` behind: the next start recovers)."""
        if self.server.running:
            os.killpg(self.server.process.pid, signal.SIGKILL)
            self.server.process.wait()


def start_broker(install: LabInstall, run_dir: Path, namesrv: str, store_dir: Path, *,
                 name: str, cluster: str = CLUSTER,
                 extra: dict[str, str] | None = None, wait: bool = True,
                 ports: tuple[int, int] | None = None) -> BrokerServer:
    """A master broker on ``store_dir`` (created or reused) registered with ``namesrv``
    and listed by it (``wait=False``: launched only). ``ports``:
    (listenPort, haListenPort) chosen beforehand with ``free_broker_ports`` (a store written
    elsewhere names its broker's address in every record and message id)."""
    def start() -> BrokerServer:
        return _start_broker(install, run_dir, namesrv, store_dir, name=name, cluster=cluster,
                             extra=extra, wait=wait, ports=ports)

    return start_again_if_transient(start) if ports is None and wait else start()


def _start_broker(install: LabInstall, run_dir: Path, namesrv: str, store_dir: Path, *,
                  name: str, cluster: str, extra: dict[str, str] | None, wait: bool,
                  ports: tuple[int, int] | None) -> BrokerServer:
    home = run_dir / name
    home.mkdir(parents=True, exist_ok=True)
    listen, ha = ports or free_broker_ports()
    settings = {"brokerClusterName": cluster, "brokerName": name, "namesrvAddr": namesrv,
                "listenPort": str(listen), "haListenPort": str(ha),
                "storePathRootDir": str(store_dir), **LAB_BROKER_SETTINGS, **(extra or {})}
    conf = write_properties(home / "broker.conf", settings)
    server = JavaServer("broker", home, java_argv(
        install, home, "broker", ["-Xms256m", "-Xmx256m", "-XX:MaxDirectMemorySize=256m"],
        "org.apache.rocketmq.broker.BrokerStartup", "-c", str(conf)),
        ready_marker="boot success")
    broker = BrokerServer(name=name, address=f"127.0.0.1:{listen}", store_dir=store_dir,
                          conf_path=conf, server=server)
    if wait:
        server.start()
        try:
            await_registration(settings, f"127.0.0.1:{listen}", server)
        except LabSetupError:
            server.stop()  # as await_ready does: nothing is left running behind the error
            raise
    else:
        server.launch()
    return broker


def await_registration(settings: dict[str, str], address: str, server: JavaServer,
                       timeout_s: float = START_TIMEOUT_S) -> None:
    """Wait until the broker's name server (``namesrvAddr`` of ``settings``; the first one)
    lists ``address`` under its ``brokerName``. A broker logs "boot success" before its first
    registration (a task it schedules at boot) has reached the name server: a proxy started,
    or a cluster read, in between finds no such cluster."""
    namesrv = settings.get("namesrvAddr", "").split(";")[0]
    if not namesrv:
        return
    name = settings["brokerName"]
    with RawRemotingClient(namesrv) as client:
        def registered() -> bool:
            if not server.running:
                raise LabSetupError(f"{server.role} exited before registering\n"
                                    f"{server.diagnostics()}")
            reply = client.call(RequestCode.GET_BROKER_CLUSTER_INFO)
            brokers = fastjson.loads(reply.body).get("brokerAddrTable", {})
            return address in brokers.get(name, {}).get("brokerAddrs", {}).values()

        try:
            wait_until(registered, timeout_s, f"{name} at {address} registered with {namesrv}",
                       interval_s=0.1)
        except AssertionError as late:
            raise LabSetupError(f"{late}\n{server.diagnostics()}") from None


def start_proxy(install: LabInstall, run_dir: Path, namesrv: str, cluster: str = CLUSTER,
                wait: bool = True) -> tuple[JavaServer, str]:
    """A proxy in cluster mode (gRPC) in front of the name server's brokers; (server, endpoint).
    ``wait=False``: launched only."""
    if wait:
        return start_again_if_transient(lambda: _start_proxy(install, run_dir, namesrv, cluster,
                                                          wait))
    return _start_proxy(install, run_dir, namesrv, cluster, wait)


def _start_proxy(install: LabInstall, run_dir: Path, namesrv: str, cluster: str,
                 wait: bool) -> tuple[JavaServer, str]:
    home = run_dir / "proxy"
    home.mkdir(parents=True, exist_ok=True)
    grpc_port, remoting_port = free_port(), free_port()
    conf = home / "rmq-proxy.json"
    conf.write_text(json.dumps({
        "rocketMQClusterName": cluster, "namesrvAddr": namesrv, "proxyMode": "cluster",
        "grpcServerPort": grpc_port, "remotingListenPort": remoting_port,
        "localServeAddr": "127.0.0.1", "remotingAccessAddr": "127.0.0.1",
        "grpcShutdownTimeSeconds": 2, "enablePrintJstack": False}))
    server = JavaServer("proxy", home, java_argv(
        install, home, "proxy", ["-Xms128m", "-Xmx256m", "-XX:MaxDirectMemorySize=128m"],
        "org.apache.rocketmq.proxy.ProxyStartup", "-pc", str(conf), "-pm", "cluster",
        "-n", namesrv),
        ready_marker="rocketmq-proxy startup successfully")
    return server.start() if wait else server.launch(), f"127.0.0.1:{grpc_port}"
