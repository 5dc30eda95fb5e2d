"""A Postbox broker server in a separate process, as an operator runs it.

``BrokerProcess.start`` runs ``postbox broker start --store DIR --listen 127.0.0.1:0`` (plus
``--broker-conf`` / ``--acl``), reads the ``listening on HOST:PORT`` line from its stdout and
returns once clients can connect (and, for a master started with ``--ha-listen``, reads the ``ha
listening on HOST:PORT`` line into ``ha_address``, then the ``remoting listening on HOST:PORT``
line of the remoting broker, started on a free port, into ``remoting_address``, then the
``namesrv listening on HOST:PORT`` line of its name server into ``namesrv_address``, and with
``--metrics`` in ``extra`` the ``metrics listening on HOST:PORT`` line into
``metrics_address``). ``stop``
sends SIGTERM and returns the exit code; ``kill`` is the fallback for a server that does not
stop. stderr goes to a file next to the store, shown when a start fails."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

POSTBOX = str(Path(sys.executable).with_name("postbox"))
START_TIMEOUT_S = 90  # generous: a loaded 2-core machine takes long to import grpc and open a store
STOP_TIMEOUT_S = 30

TEST_BROKER_CONF = """\
mappedFileSizeCommitLog=1048576
mappedFileSizeConsumeQueue=20000
maxHashSlotNum=1024
maxIndexNum=4096
maxMessageSize=65536
messageDelayLevel=100ms 200ms 300ms 1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 20s 30s 1m 2m 3m
"""
"""Small files, a 64 KiB body limit, and delay levels whose retry back-off (levels 3+, whole
seconds) starts at 1 s, so redelivery and DLQ tests take seconds."""
MAX_BODY_BYTES = 65536


def write_broker_conf(directory: Path) -> Path:
    """The test broker.conf in ``directory``."""
    path = directory / "broker.conf"
    path.write_text(TEST_BROKER_CONF)
    return path


DAMAGED_TIMER_WHEEL = bytes(100)


def store_with_a_damaged_timer_wheel(store: Path) -> Path:
    """Create ``store`` holding only a ``timerwheel`` of the wrong size
    (``DAMAGED_TIMER_WHEEL``): a broker on it refuses the wheel, its timer service stops with
    a ``CorruptionError`` and the rest serves on."""
    store.mkdir()
    (store / "timerwheel").write_bytes(DAMAGED_TIMER_WHEEL)
    return store


class BrokerProcess:
    """One ``postbox broker start`` child process."""

    def __init__(self, store: Path, *, broker_conf: Path | None = None,
                 acl: Path | None = None, extra: tuple[str, ...] = ()) -> None:
        self.store = store
        self.args = [POSTBOX, "-v", "broker", "start", "--store", str(store),
                     "--listen", "127.0.0.1:0", "--remoting-listen", "127.0.0.1:0",
                     "--namesrv-listen", "127.0.0.1:0",
                     "--grace", "2", *extra]
        if broker_conf is not None:
            self.args += ["--broker-conf", str(broker_conf)]
        if acl is not None:
            self.args += ["--acl", str(acl)]
        self.stderr_path = store.parent / f"{store.name}-server.log"
        self.process: subprocess.Popen[str] | None = None
        self.address = ""
        self.ha_address = ""
        self.remoting_address = ""
        self.namesrv_address = ""  # rocketmq://<namesrv_address>
        self.metrics_address = ""  # with --metrics: the Prometheus endpoint's HOST:PORT
        self._lines: queue.Queue[str] = queue.Queue()

    def start(self) -> BrokerProcess:
        """Start the server and wait for its ``listening on`` line."""
        environment = {**os.environ, "COLUMNS": "200", "POSTBOX_STORE": ""}
        environment.pop("POSTBOX_STORE")
        with self.stderr_path.open("w") as stderr:
            self.process = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=stderr,
                                            text=True, env=environment)
        threading.Thread(target=self._read_stdout, daemon=True).start()
        try:
            line = self._lines.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            line = ""
        if not line.startswith("listening on "):
            self.kill()
            raise AssertionError(f"server did not start: {line!r}\n{self.stderr_text()}")
        self.address = line.split()[-1]
        if "--ha-listen" in self.args:
            line = self._lines.get(timeout=START_TIMEOUT_S)
            assert line.startswith("ha listening on "), line
            self.ha_address = line.split()[-1]
        line = self._lines.get(timeout=START_TIMEOUT_S)
        assert line.startswith("remoting listening on "), line
        self.remoting_address = line.split()[-1]
        line = self._lines.get(timeout=START_TIMEOUT_S)
        assert line.startswith("namesrv listening on "), line
        self.namesrv_address = line.split()[-1]
        if "--metrics" in self.args:
            line = self._lines.get(timeout=START_TIMEOUT_S)
            assert line.startswith("metrics listening on "), line
            self.metrics_address = line.split()[-1]
        return self

    def _read_stdout(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.strip())

    def stdout_lines(self) -> list[str]:
        """Lines printed after ``listening on`` (e.g. ``stopped``)."""
        lines = []
        while not self._lines.empty():
            lines.append(self._lines.get_nowait())
        return lines

    def stderr_text(self) -> str:
        """What the server logged."""
        return self.stderr_path.read_text() if self.stderr_path.exists() else ""

    def stop(self) -> int:
        """SIGTERM, then wait; returns the exit code."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired as error:
            self.kill()
            raise AssertionError("server did not stop on SIGTERM\n"
                                 + self.stderr_text()) from error

    def kill(self) -> None:
        """SIGKILL (a crash test's crash, or cleanup of a failed test)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
