"""The harness of ``bench/hostile_peers_bench.py``: a broker process under attack, its memory
watched, a well-behaved client sending throughout, and the probes that judge the outcome.

* ``BrokerUnderTest`` runs ``COMMAND -v broker start`` (``--broker-command``: the current
  ``postbox`` or an older tree's) with the three listeners on free ports, stderr to a file.
* ``MemoryWatch`` samples ``VmRSS`` of the broker every 50 ms and kills the broker when it grew
  more than the cap (the machine is protected from a broker that holds what a peer asks for).
* ``GoodClient`` sends one small message every ``interval_s`` over its own connection, from
  127.0.0.2, reconnecting after a failure; latencies of the sends that succeeded, and counts.
* ``new_clients_served`` / ``listener_alive`` open new connections and ask for an answer.
"""

from __future__ import annotations

import os
import queue
import resource
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.remoting_raw import RawRemotingClient, send_fields
from postbox.network.protocol.codes import RequestCode, ResponseCode

BROKER_CONF = """\
mappedFileSizeCommitLog=1048576
mappedFileSizeConsumeQueue=20000
maxHashSlotNum=1024
maxIndexNum=4096
maxMessageSize=65536
"""
"""Small files and a 64 KiB body limit (the hostile-peer tests' broker)."""
START_TIMEOUT_S = 90
GOOD_SOURCE, PROBE_SOURCE, ALIVE_SOURCE = "127.0.0.2", "127.0.0.3", "127.0.0.4"
FD_LIMIT_WRAPPER = ("import os, resource, sys; "
                    "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]),) * 2); "
                    "os.execv(sys.argv[2], sys.argv[2:])")
"""Runs a command with soft and hard ``RLIMIT_NOFILE`` at ``argv[1]`` (as ``prlimit``)."""


def one_line(text: str, limit: int = 120) -> str:
    """``text`` on one line, the bench's temp paths cut to their last part, at most ``limit``
    characters (for the table)."""
    words = [word.rsplit("/hostile-bench-", 1)[-1].split("/", 1)[-1] if "/hostile-bench-" in word
             else word for word in text.split()]
    return " ".join(words)[:limit]


def split_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` as a socket address."""
    host, port = text.rsplit(":", 1)
    return host, int(port)


def connect(address: str, source: str, timeout_s: float = 3) -> socket.socket:
    """A connection from ``source`` (blocking once connected)."""
    sock = socket.create_connection(split_address(address), timeout=timeout_s,
                                    source_address=(source, 0))
    sock.settimeout(None)
    return sock


def raise_descriptor_limit(count: int) -> None:
    """Raise this process's soft ``RLIMIT_NOFILE`` (the floods open thousands of sockets)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count:
        wanted = count if hard == resource.RLIM_INFINITY else min(count, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def status_kib(pid: int, field: str) -> int:
    """``field`` (``VmRSS``, ``VmHWM``) of ``/proc/PID/status`` in KiB (0 once gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


class BrokerUnderTest:
    """One ``broker start`` child process of the command under test."""

    def __init__(self, command: list[str], work: Path, *, conf: str = "",
                 extra: tuple[str, ...] = (), prefix: tuple[str, ...] = (),
                 acl: Path | None = None) -> None:
        self.work = work
        self.store = work / "store"
        conf_path = work / "broker.conf"
        conf_path.write_text(BROKER_CONF + conf)
        self.args = [*prefix, *command, "-v", "broker", "start", "--store", str(self.store),
                     "--listen", "127.0.0.1:0", "--remoting-listen", "127.0.0.1:0",
                     "--namesrv-listen", "127.0.0.1:0", "--grace", "2",
                     "--broker-conf", str(conf_path), *extra]
        if acl is not None:
            self.args += ["--acl", str(acl)]
        self.log_path = work / "broker.log"
        self.process: subprocess.Popen[str] | None = None
        self.remoting = self.namesrv = ""
        self._lines: queue.Queue[str] = queue.Queue()

    def start(self) -> BrokerUnderTest:
        """Start and read the ``... listening on`` lines."""
        environment = {key: value for key, value in os.environ.items()
                       if key != "POSTBOX_STORE"}
        environment["COLUMNS"] = "200"
        with self.log_path.open("w") as log:
            self.process = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=log,
                                            text=True, env=environment,
                                            start_new_session=True)
        threading.Thread(target=self._read_stdout, daemon=True).start()
        addresses: dict[str, str] = {}
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(addresses) < 3 and time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=1)
            except queue.Empty:
                if self.process.poll() is not None:
                    break
                continue
            if "listening on " in line:
                addresses[line.split("listening on")[0].strip() or "grpc"] = line.split()[-1]
        if not {"remoting", "namesrv"} <= set(addresses):
            self.kill()
            raise RuntimeError(f"broker did not start: {self.log_text()[-2000:]}")
        self.remoting, self.namesrv = addresses["remoting"], addresses["namesrv"]
        return self

    def _read_stdout(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.strip())

    @property
    def pid(self) -> int:
        """The broker's process id."""
        assert self.process is not None
        return self.process.pid

    def running(self) -> bool:
        """Whether the process has not exited."""
        return self.process is not None and self.process.poll() is None

    def log_text(self) -> str:
        """What the broker logged so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_lines(self) -> int:
        """Lines logged so far."""
        if not self.log_path.exists():
            return 0
        with self.log_path.open("rb") as log:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: log.read(1 << 20), b""))

    def open_files(self) -> int:
        """Descriptors the broker holds (0 once gone)."""
        try:
            return len(os.listdir(f"/proc/{self.pid}/fd"))
        except OSError:
            return 0

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after 20 s; the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(20)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class MemoryWatch:
    """Samples the broker's ``VmRSS``; kills it past ``baseline + cap_bytes``."""

    def __init__(self, broker: BrokerUnderTest, cap_bytes: int) -> None:
        self.broker = broker
        self.baseline_kib = status_kib(broker.pid, "VmRSS")
        self.peak_kib = self.baseline_kib
        self.cap_kib = cap_bytes >> 10
        self.capped = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            rss = status_kib(self.broker.pid, "VmRSS")
            self.peak_kib = max(self.peak_kib, rss)
            if rss - self.baseline_kib > self.cap_kib:
                self.capped = True
                self.broker.kill()
                return

    def stop(self) -> dict[str, object]:
        """The figures: RSS before, peak growth (sampled, and by ``VmHWM``), capped?"""
        hwm = status_kib(self.broker.pid, "VmHWM")
        self._stop.set()
        self._thread.join(5)
        peak = max(self.peak_kib, hwm)
        return {"rss_before_mib": round(self.baseline_kib / 1024, 1),
                "rss_peak_delta_mib": round((peak - self.baseline_kib) / 1024, 1),
                "memory_capped": self.capped}


def good_send(client: RawRemotingClient, timeout_s: float, topic: str = "Good") -> float:
    """One well-behaved send; its latency in seconds (raises when it fails)."""
    started = time.perf_counter()
    answer = client.call(RequestCode.SEND_MESSAGE_V2, send_fields(topic, 0), b"good",
                         timeout_s=timeout_s)
    if answer.code != ResponseCode.SUCCESS:
        raise RuntimeError(f"send refused: {answer.code} {answer.remark}")
    return time.perf_counter() - started


class GoodClient:
    """A producer sending throughout the attack, one send at a time."""

    def __init__(self, address: str, *, interval_s: float = 0.05, timeout_s: float = 5,
                 sign: Callable[[RawRemotingClient, object], object] | None = None) -> None:
        self.address, self.interval_s, self.timeout_s = address, interval_s, timeout_s
        self.sign = sign
        self.latencies: list[float] = []
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _send(self, client: RawRemotingClient) -> float:
        if self.sign is None:
            return good_send(client, self.timeout_s)
        command = client.request(RequestCode.SEND_MESSAGE_V2, send_fields("Good", 0), b"good")
        self.sign(client, command)
        started = time.perf_counter()
        answer = client.call_command(command, timeout_s=self.timeout_s)
        if answer.code != ResponseCode.SUCCESS:
            raise RuntimeError(answer.remark)
        return time.perf_counter() - started

    def _run(self) -> None:
        client: RawRemotingClient | None = None
        while not self._stop.is_set():
            try:
                if client is None:
                    client = RawRemotingClient.over(connect(self.address, GOOD_SOURCE))
                self.latencies.append(self._send(client))
            except Exception:  # refused, timed out, closed: counted, then a new connection
                self.failed += 1
                if client is not None:
                    client.close()
                client = None
            self._stop.wait(self.interval_s)
        if client is not None:
            client.close()

    def stop(self) -> dict[str, object]:
        """The figures: sends that succeeded of all, p50/p99 of their latency in ms."""
        self._stop.set()
        self._thread.join(self.timeout_s + 10)
        ordered = sorted(self.latencies)
        return {"good_sends_ok": len(ordered), "good_sends": len(ordered) + self.failed,
                "good_p50_ms": percentile_ms(ordered, 0.50),
                "good_p99_ms": percentile_ms(ordered, 0.99)}


def percentile_ms(ordered: list[float], fraction: float) -> float | None:
    """The ``fraction`` quantile of sorted seconds, in ms (None when empty)."""
    if not ordered:
        return None
    return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000, 1)


def served_once(address: str, source: str, timeout_s: float, *, namesrv: bool = False,
                sign: Callable[[RawRemotingClient, object], object] | None = None) -> bool:
    """Whether a new connection from ``source`` gets an answer (a send, or the name server's
    cluster info) within ``timeout_s``."""
    try:
        sock = connect(address, source, timeout_s)
    except OSError:
        return False
    with RawRemotingClient.over(sock) as client:
        code = RequestCode.GET_BROKER_CLUSTER_INFO if namesrv else RequestCode.SEND_MESSAGE_V2
        fields = None if namesrv else send_fields("Good", 0)
        command = client.request(code, fields, b"" if namesrv else b"new")
        if sign is not None:
            sign(client, command)
        try:
            answer = client.call_command(command, timeout_s=timeout_s)
        except Exception:  # closed at once, or no answer in time
            return False
    return answer.code == ResponseCode.SUCCESS


def new_clients_served(address: str, attempts: int, timeout_s: float = 3, **options: object
                       ) -> int:
    """How many of ``attempts`` new connections from 127.0.0.3, opened at once, were served."""
    with ThreadPoolExecutor(attempts) as pool:
        results = list(pool.map(lambda _: served_once(address, PROBE_SOURCE, timeout_s,
                                                      **options),  # type: ignore[arg-type]
                                range(attempts)))
    return sum(results)


def listener_alive(broker: BrokerUnderTest, **options: object) -> bool:
    """Whether both listeners still answer a new connection (retried for up to 10 s)."""
    deadline = time.monotonic() + 10
    while broker.running():
        if (served_once(broker.remoting, ALIVE_SOURCE, 3, **options)  # type: ignore[arg-type]
                and served_once(broker.namesrv, ALIVE_SOURCE, 3, namesrv=True,
                                **options)):  # type: ignore[arg-type]
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return False
