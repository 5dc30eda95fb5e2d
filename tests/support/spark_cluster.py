"""Real Spark processes for the tests: a standalone cluster (a master and two workers) and a
Spark Connect server, started from the installed PySpark's ``bin/spark-class`` /
``bin/spark-submit``.

Each process is started in its own session (process group): a worker's executors and their
Python daemons are its children, so killing the group at the end leaves no JVM behind. Every
process binds to loopback; its output goes to a log file under the fixture's directory, quoted
when it fails to come up. The workers and the Connect server run this interpreter's Python
(``PYSPARK_PYTHON``), which has Postbox installed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
WORKERS = 2
WORKER_CORES = 1
WORKER_MEMORY = "1g"
EXECUTOR_MEMORY = "512m"


def spark_home() -> Path:
    """The installed PySpark's directory (it holds ``bin/`` and ``jars/``)."""
    import pyspark

    return Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def spark_environment() -> dict[str, str]:
    """The environment of every Spark process (and of a driver talking to them)."""
    return {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


@dataclass
class SparkProcess:
    """One started process and its log."""

    name: str
    process: subprocess.Popen
    log: Path

    def tail(self, characters: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-characters:] if self.log.exists() else ""

    def stop(self) -> None:
        """SIGTERM to the process group, SIGKILL if it lingers."""
        for signal_number, wait_s in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.process.pid, signal_number)
            except ProcessLookupError:
                return
            try:
                self.process.wait(wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        try:  # children that outlived the group leader (executors, Python daemons)
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextmanager
def spark_process(name: str, command: list[str], log_dir: Path) -> Iterator[SparkProcess]:
    """Run ``command`` (relative to the Spark home) in its own process group until the end."""
    log = log_dir / f"{name}.log"
    with log.open("wb") as output:
        process = subprocess.Popen([str(spark_home() / command[0]), *command[1:]],
                                   stdout=output, stderr=subprocess.STDOUT, cwd=log_dir,
                                   env=spark_environment(), start_new_session=True)
    started = SparkProcess(name, process, log)
    try:
        yield started
    finally:
        started.stop()


def wait_for(what: str, ready, processes: list[SparkProcess]) -> None:
    """Poll ``ready()`` until true; fail with the logs if a process exits or time runs out."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        for started in processes:
            if started.process.poll() is not None:
                pytest.fail(f"{started.name} exited ({started.process.returncode}) before "
                            f"{what}:\n{started.tail()}")
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"no {what} after {START_TIMEOUT_S:.0f} s:\n"
                + "\n".join(f"--- {p.name}\n{p.tail()}" for p in processes))


@dataclass(frozen=True)
class StandaloneCluster:
    """A running master with its workers registered."""

    master_url: str
    web_url: str

    def alive_workers(self) -> list[dict]:
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as response:
            state = json.load(response)
        return [worker for worker in state.get("workers", []) if worker.get("state") == "ALIVE"]


@contextmanager
def standalone_cluster(base: Path, workers: int = WORKERS, *,
                       worker_memory: str = WORKER_MEMORY) -> Iterator[StandaloneCluster]:
    """A master and ``workers`` workers (1 core, ``worker_memory`` each) on loopback."""
    port, web_port = free_port(), free_port()
    cluster = StandaloneCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web_port}")
    with ExitStack() as stack:
        master = stack.enter_context(spark_process("master", [
            "bin/spark-class", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
            "--port", str(port), "--webui-port", str(web_port)], base))
        processes = [master]
        wait_for("master web UI", lambda: cluster.alive_workers() is not None, processes)
        for number in range(workers):
            work_dir = base / f"worker-{number}"
            work_dir.mkdir()
            processes.append(stack.enter_context(spark_process(f"worker-{number}", [
                "bin/spark-class", "org.apache.spark.deploy.worker.Worker", "--host",
                "127.0.0.1", "--port", "0", "--webui-port", "0", "--cores", str(WORKER_CORES),
                "--memory", worker_memory, "--work-dir", str(work_dir), cluster.master_url],
                base)))
        wait_for(f"{workers} workers registered",
                 lambda: len(cluster.alive_workers()) == workers, processes)
        yield cluster


@contextmanager
def connect_server(base: Path, master: str = "local[2]") -> Iterator[str]:
    """A Spark Connect server on ``master``; yields its ``sc://127.0.0.1:PORT`` address."""
    port = free_port()
    with spark_process("connect-server", [
            "bin/spark-submit", "--class",
            "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--master", master, "--name", "postbox-connect-test",
            "--conf", f"spark.connect.grpc.binding.port={port}",
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", "spark.ui.enabled=false",
            "--conf", "spark.driver.host=127.0.0.1",
            "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", "spark.driver.extraJavaOptions=-Duser.timezone=UTC",
            "--conf", "spark.executor.extraJavaOptions=-Duser.timezone=UTC",
            "--conf", f"spark.pyspark.python={sys.executable}",
            "spark-internal"], base) as server:

        def listening() -> bool:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True

        wait_for("Spark Connect server listening", listening, [server])
        yield f"sc://127.0.0.1:{port}"


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A standalone Spark cluster: a master and two workers, stopped at the end."""
    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def spark_connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark Connect server on ``local[2]``: its ``sc://`` address."""
    with connect_server(tmp_path_factory.mktemp("spark-connect")) as address:
        yield address


__all__ = ["StandaloneCluster", "connect_server", "spark_cluster", "spark_connect_server",
           "spark_environment", "standalone_cluster"]
