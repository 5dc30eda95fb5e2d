"""The official RocketMQ 5 Java gRPC client (rocketmq-client-java) for tests, built on demand.

``java_digest_check()`` compiles ``java_digest/DigestCheck.java`` once per source version into
``~/.cache/postbox/java-digest-<hash>/`` (outside the repository): Maven resolves the client's
jar (``mvn dependency:build-classpath``; Maven Central or the local ``~/.m2``), ``javac``
compiles the one file. ``run_digest_check`` runs it against a broker and returns its JSON
report. Needs ``java``/``javac`` 17+ and ``mvn`` on PATH; a missing tool is a test failure,
not a skip (the lab machines and CI have them). Small and self-contained on purpose: a general
Java driver can replace it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SOURCES = Path(__file__).with_name("java_digest")
MAIN_CLASS = "DigestCheck"
BUILD_TIMEOUT_S = 600


@dataclass(frozen=True)
class JavaProgram:
    """A compiled program: its class directory and the classpath of its dependencies."""

    classes: Path
    classpath: str

    def command(self, *args: str) -> list[str]:
        return ["java", "-cp", f"{self.classes}{os.pathsep}{self.classpath}", MAIN_CLASS, *args]


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "postbox"


def java_digest_check() -> JavaProgram:
    """The compiled DigestCheck program (built on first use, then reused)."""
    files = sorted(SOURCES.iterdir())
    digest = hashlib.sha256(b"".join(path.name.encode() + path.read_bytes()
                                     for path in files)).hexdigest()[:16]
    target = _cache_root() / f"java-digest-{digest}"
    classpath_file = target / "classpath.txt"
    if not (target / "classes" / f"{MAIN_CLASS}.class").exists():
        work = target.with_name(target.name + f".building-{os.getpid()}")
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        for path in files:
            shutil.copy(path, work / path.name)
        _run(["mvn", "-q", "-B", "dependency:build-classpath",
              "-Dmdep.outputFile=classpath.txt"], work)
        (work / "classes").mkdir()
        _run(["javac", "-cp", (work / "classpath.txt").read_text().strip(), "-d", "classes",
              f"{MAIN_CLASS}.java"], work)
        try:
            work.rename(target)
        except OSError:  # another process finished the same build first
            shutil.rmtree(work, ignore_errors=True)
    return JavaProgram(target / "classes", classpath_file.read_text().strip())


def _run(command: list[str], cwd: Path) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(command[:2])} failed ({done.returncode}):\n"
                             f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}")


def run_digest_check(program: JavaProgram, address: str, topic: str, group: str,
                     expected: int, timeout_ms: int = 60_000) -> dict:
    """Run DigestCheck against ``address``; its JSON report (exit 2 = fewer than expected)."""
    done = subprocess.run(program.command(address, topic, group, str(expected),
                                          str(timeout_ms)),
                          capture_output=True, text=True, timeout=timeout_ms / 1000 + 60,
                          check=False)
    report_lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode not in (0, 2) or not report_lines:
        raise AssertionError(f"DigestCheck failed ({done.returncode}):\n{done.stdout[-4000:]}\n"
                             f"{done.stderr[-4000:]}")
    return json.loads(report_lines[-1])
