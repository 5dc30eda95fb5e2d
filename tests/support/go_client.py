"""The official RocketMQ Go client v2 for the lab, built at test time into the lab cache.

``GoClient.prepare(cache_dir)`` builds ``tests/lab/goclient`` (a small program over
``github.com/apache/rocketmq-client-go/v2``, the version pinned in its ``go.mod``/``go.sum``)
with ``go build`` into ``<lab cache>/goclient-<hash>/goclient``; ``<hash>`` covers the module's
sources, so an edit builds afresh and anything unchanged is reused. Modules come from the Go
module proxy into Go's own module cache; nothing downloaded or built lands in the repository.
The build happens under the lab cache's file lock and is renamed into place when complete.

``GoClient.run(command, **request)`` runs one command (``produce``, ``push``, ``transaction``; see
``tests/lab/goclient/main.go``) with the request as JSON on stdin and returns the JSON of its
``LAB-RESULT`` line; a failure raises the driver's ``DriverError`` with the program's output.
Without ``go`` on PATH ``prepare`` raises ``LabUnavailableError`` (tests skip with that reason).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import REPO_ROOT
from tests.support.rocketmq_install import LabSetupError, LabUnavailableError, tail
from tests.support.rocketmq_lab import run_command

SOURCES = REPO_ROOT / "tests" / "lab" / "goclient"
BUILD_TIMEOUT_S = 900
RUN_TIMEOUT_S = 180


def _digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(SOURCES.iterdir()):
        if path.is_file():
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class GoClient:
    """The built program and the name server it talks to."""

    binary: Path
    namesrv: str = ""

    @classmethod
    def prepare(cls, cache_dir: Path) -> GoClient:
        """Build the program into ``cache_dir`` unless a build of these sources is there."""
        go = shutil.which("go")
        if go is None:
            raise LabUnavailableError("the Go client peer needs Go (go) on PATH")
        cache_dir.mkdir(parents=True, exist_ok=True)
        target = cache_dir / f"goclient-{_digest()}"
        with open(cache_dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not target.is_dir():
                work = target.with_name(target.name + ".partial")
                shutil.rmtree(work, ignore_errors=True)
                work.mkdir(parents=True)
                _build(go, work / "goclient")
                work.rename(target)
        return cls(target / "goclient")

    def at(self, namesrv: str) -> GoClient:
        """The same program aimed at another name server."""
        return GoClient(self.binary, namesrv)

    def run(self, command: str, **request) -> object:
        """One command; ``request`` becomes its JSON input (``namesrv`` is added)."""
        request.setdefault("namesrv", self.namesrv)
        return run_command([str(self.binary), command], request, f"go client {command}",
                           RUN_TIMEOUT_S)


def _build(go: str, output: Path) -> None:
    environment = {**os.environ, "GOFLAGS": "-mod=readonly -buildvcs=false"}
    try:
        done = subprocess.run([go, "build", "-o", str(output), "."], cwd=SOURCES,
                              capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                              env=environment)
    except subprocess.TimeoutExpired as error:
        raise LabSetupError(f"building the Go client: no answer after {BUILD_TIMEOUT_S} s") \
            from error
    if done.returncode != 0:
        raise LabSetupError(f"building the Go client (tests/lab/goclient) failed "
                            f"(exit {done.returncode}; is the Go module proxy reachable?):\n"
                            f"{tail(done.stdout + done.stderr)}")
