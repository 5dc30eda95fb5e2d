"""The processes of the soak: its own PostgreSQL and Redis, the broker (or a SYNC_MASTER + slave
pair) on fixed ports over a small tmpfs, and the producer, relay and consumer processes.

Every piece can be killed (``kill``: SIGKILL, or ``pg_ctl stop -m immediate``) and started
again on the same ports and data (``start``): the clients only ever know the name server's
address and the database and Redis URLs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bench.peers import BenchError
from tests.support.broker_process import TEST_BROKER_CONF, BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "scripts" / "services.sh"
BROKER_CONF = TEST_BROKER_CONF + "flushDiskType=SYNC_FLUSH\n"
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0
TMPFS_MIB = 64


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def services_sh(*args: str) -> None:
    """``scripts/services.sh ARGS`` (output kept for a failure)."""
    done = subprocess.run(["bash", str(SERVICES), *args], capture_output=True, text=True,
                          timeout=180)
    if done.returncode != 0:
        raise BenchError(f"services.sh {' '.join(args)}: {done.stdout}{done.stderr}")


@dataclass
class Service:
    """A private PostgreSQL or Redis, started and crashed by ``scripts/services.sh``."""

    name: str  # postgres or redis
    port: int
    data: Path
    up: bool = False

    def start(self) -> None:
        services_sh("--port", str(self.port), "--data", str(self.data), self.name)
        self.up = True

    def kill(self) -> None:
        services_sh("--port", str(self.port), "--data", str(self.data), "--stop", self.name)
        self.up = False

    @property
    def url(self) -> str:
        if self.name == "redis":
            return f"redis://127.0.0.1:{self.port}/0"
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/test"


@dataclass
class Broker:
    """One ``postbox broker start`` on fixed ports (the name server's stays the clients')."""

    name: str
    store: Path
    conf: Path
    flags: tuple[str, ...]
    process: BrokerProcess | None = None

    @classmethod
    def create(cls, name: str, root: Path, *flags: str) -> Broker:
        ports = [free_port() for _ in range(3)]
        listen = ("--listen", f"127.0.0.1:{ports[0]}", "--remoting-listen",
                  f"127.0.0.1:{ports[1]}", "--namesrv-listen", f"127.0.0.1:{ports[2]}")
        conf = root / f"{name}.conf"
        conf.write_text(BROKER_CONF)
        return cls(name, root / name, conf, (*listen, *flags))

    @property
    def up(self) -> bool:
        return self.process is not None and self.process.process is not None \
            and self.process.process.poll() is None

    def start(self) -> None:
        self.process = BrokerProcess(self.store, broker_conf=self.conf, extra=self.flags).start()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()

    def stop(self) -> None:
        if self.process is not None and self.up:
            code = self.process.stop()
            if code != 0:
                raise BenchError(f"{self.name} exited {code}:\n"
                                 + self.process.stderr_text()[-3000:])

    @property
    def namesrv(self) -> str:
        return self.flags[self.flags.index("--namesrv-listen") + 1]


@dataclass
class Child:
    """One producer, relay or consumer process (``bench.soak.roles``)."""

    name: str
    argv: list[str]
    log: Path
    process: subprocess.Popen[str] | None = None
    starts: int = 0

    @property
    def up(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        self.spawn()
        self.wait_ready()

    def spawn(self) -> None:
        """Start the process (``wait_ready`` waits until it runs: several start at once)."""
        with self.log.open("a") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "bench.soak.roles", *self.argv], cwd=ROOT,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, text=True)
        self.starts += 1

    def wait_ready(self) -> None:
        """Wait for its ``ready`` line; ``BenchError`` when it does not come."""
        assert self.process is not None
        line = _read_line(self.process, READY_TIMEOUT_S)
        if line.strip() != "ready":
            self.kill()
            raise BenchError(f"{self.name} did not start ({line!r}):\n"
                             + self.log.read_text()[-3000:])

    def kill(self) -> None:
        if self.up:
            assert self.process is not None
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        """SIGTERM; it must exit 0."""
        if not self.up:
            return
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()
            code = -9
        if code != 0:
            raise BenchError(f"{self.name} exited {code} on SIGTERM:\n"
                             + self.log.read_text()[-3000:])


def _read_line(process: subprocess.Popen[str], timeout_s: float) -> str:
    from bench.outbox_processes import _read_line as read_line

    return read_line(process, timeout_s)


@contextlib.contextmanager
def tmpfs(path: Path, size_mib: int):
    """A tmpfs of ``size_mib`` at ``path`` (root only); yields whether it is mounted."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(path)],
        capture_output=True).returncode == 0
    try:
        yield mounted
    finally:
        for log in path.glob("*.log"):  # the brokers' logs outlive the mount
            shutil.copy(log, path.parent / f"broker-disk-{log.name}")
        if mounted:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def postgres_dir() -> Path:
    """A directory the ``postgres`` user may enter (a run's temp dirs are root's, 0700)."""
    base = Path(tempfile.mkdtemp(prefix="postbox-soak-pg-"))
    base.chmod(0o755)
    return base


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class Topology:
    """Everything the soak runs; ``children`` by role: producer, relay, consumer."""

    postgres: Service
    redis: Service
    brokers: list[Broker]
    children: dict[str, list[Child]] = field(default_factory=dict)

    @property
    def store_url(self) -> str:
        return f"rocketmq://{self.brokers[0].namesrv}"

    def all_children(self) -> list[Child]:
        return [child for group in self.children.values() for child in group]
