"""``postbox console`` as a real process, started and waited for until it answers HTTP: the one
start-and-wait loop of the console bench and the console's tests."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

START_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 30.0
PROBE_TIMEOUT_S = 5.0
OUTPUT_TAIL_CHARS = 4000


@dataclasses.dataclass(frozen=True)
class ConsoleProcess:
    """A running console: its base URL and process id."""

    url: str
    pid: int


def free_port() -> int:
    """A loopback TCP port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def console_process(arguments: list[str], *, python: str = sys.executable,
                    cwd: Path | None = None, env: dict[str, str] | None = None,
                    probe_path: str = "/not-a-page",
                    start_timeout_s: float = START_TIMEOUT_S) -> Iterator[ConsoleProcess]:
    """``PYTHON -m postbox console --listen 127.0.0.1:PORT ARGUMENTS``, yielded once a GET of
    ``probe_path`` gets any HTTP answer; stopped with SIGINT (killed after ``STOP_TIMEOUT_S``).

    Its output goes to a temporary file (never a pipe nobody reads); a console that exits
    before it answers is an ``AssertionError`` with the end of that output."""
    import httpx

    port = free_port()
    command = [python, "-m", "postbox", "console", "--listen", f"127.0.0.1:{port}", *arguments]
    with tempfile.TemporaryFile("w+") as output:
        process = subprocess.Popen(command, cwd=cwd, env={**os.environ, **(env or {})},
                                   stdout=output, stderr=subprocess.STDOUT, text=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + start_timeout_s
            while True:
                if process.poll() is not None:
                    output.seek(0)
                    raise AssertionError(
                        f"the console exited: {output.read()[-OUTPUT_TAIL_CHARS:]}")
                try:
                    httpx.get(url + probe_path, timeout=PROBE_TIMEOUT_S)
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            yield ConsoleProcess(url, process.pid)
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
