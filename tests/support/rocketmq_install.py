"""The compatibility lab's jars and driver, fetched and built into a cache outside the repository.

- ``LabInstall.prepare()`` finds ``java``, ``javac`` and ``mvn`` (``LabUnavailableError`` names
  what is missing: tests skip with that reason), then makes sure the cache holds
  ``servers-<hash>/lib`` (Apache RocketMQ name server, broker, proxy and tools, from
  ``tests/lab/rocketmq/pom.xml``), ``clients-<hash>/lib`` (the official Java clients, from
  ``tests/lab/driver/pom.xml``) and ``driver-<hash>/classes`` (our driver, compiled). ``<hash>``
  covers the pom, or the driver's sources: editing one fetches or builds afresh, anything
  unchanged is reused. Old folders are left alone (another checkout may use them); delete the
  cache folder to reclaim the space.
- The cache is ``$POSTBOX_LAB_CACHE`` or ``~/.cache/postbox/rocketmq-5.3.3``. Each folder is built
  under a temporary name and renamed into place when complete, under an exclusive file lock, so
  concurrent sessions and interrupted downloads never leave a half-filled folder behind.
- A failed download or build raises ``LabSetupError`` with Maven's or javac's last lines
  (Maven Central unreachable, a compile error): a start-up failure, not a skip.
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

ROCKETMQ_VERSION = "5.3.3"
GRPC_CLIENT_VERSION = "5.0.8"
CACHE_ENV = "POSTBOX_LAB_CACHE"
LAB_SOURCES = REPO_ROOT / "tests" / "lab"
SERVERS_POM = LAB_SOURCES / "rocketmq" / "pom.xml"
DRIVER_DIR = LAB_SOURCES / "driver"
FETCH_TIMEOUT_S = 1800
COMPILE_TIMEOUT_S = 300


class LabUnavailableError(Exception):
    """Java or Maven is not installed: the lab cannot run here (tests skip, CI fails)."""


class LabSetupError(Exception):
    """Fetching the jars or building the driver failed (the message says which and why)."""


def default_cache_dir() -> Path:
    """``$POSTBOX_LAB_CACHE`` or ``~/.cache/postbox/rocketmq-<version>``."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "postbox" / f"rocketmq-{ROCKETMQ_VERSION}"


def tail(text: str, lines: int = 25) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.splitlines()[-lines:])


def _digest(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.relative_to(LAB_SOURCES).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class LabInstall:
    """Where the lab's jars and driver live, once ``prepare`` has made sure they are there."""

    cache_dir: Path
    java: str
    servers_lib: Path
    driver_lib: Path
    driver_classes: Path

    @classmethod
    def prepare(cls, cache_dir: Path | None = None) -> LabInstall:
        """Find the tools, fetch what the cache lacks, compile the driver if its sources changed."""
        java, javac, mvn = (shutil.which(name) for name in ("java", "javac", "mvn"))
        missing = [name for name, path in (("java", java), ("javac", javac), ("mvn", mvn))
                   if path is None]
        if missing:
            raise LabUnavailableError(
                f"the RocketMQ compatibility lab needs a JDK (17+) and Maven; not on PATH: "
                f"{', '.join(missing)}")
        cache_dir = cache_dir or default_cache_dir()
        cache_dir.mkdir(parents=True, exist_ok=True)
        with open(cache_dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            servers = _ensure(cache_dir / f"servers-{_digest([SERVERS_POM])}",
                              lambda work: _fetch(mvn, SERVERS_POM, work / "lib"))
            clients = _ensure(cache_dir / f"clients-{_digest([DRIVER_DIR / 'pom.xml'])}",
                              lambda work: _fetch(mvn, DRIVER_DIR / "pom.xml", work / "lib"))
            sources = sorted((DRIVER_DIR / "src").rglob("*.java"))
            driver = _ensure(cache_dir / f"driver-{_digest([DRIVER_DIR / 'pom.xml', *sources])}",
                             lambda work: _compile(javac, sources, clients / "lib", work))
        return cls(cache_dir=cache_dir, java=java, servers_lib=servers / "lib",
                   driver_lib=clients / "lib", driver_classes=driver / "classes")

    def servers_classpath(self) -> str:
        """The servers' classpath (``java`` expands the ``*`` itself)."""
        return f"{self.servers_lib}/*"

    def driver_classpath(self) -> str:
        """Our driver, then the gRPC client jar (its protocol classes must win), then the rest."""
        grpc_client = self.driver_lib / f"rocketmq-client-java-{GRPC_CLIENT_VERSION}.jar"
        return os.pathsep.join([str(self.driver_classes), str(grpc_client),
                                f"{self.driver_lib}/*"])


def _ensure(target: Path, build) -> Path:
    if target.is_dir():
        return target
    work = target.with_name(target.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        build(work)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    work.rename(target)
    return target


def _run(argv: list[str], what: str, timeout_s: int, cwd: Path | None = None) -> None:
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as error:
        raise LabSetupError(f"{what}: no answer after {timeout_s} s ({' '.join(argv)})") from error
    if done.returncode != 0:
        raise LabSetupError(
            f"{what} failed (exit {done.returncode}; is Maven Central reachable?):\n"
            f"{tail(done.stdout + done.stderr)}")


def _fetch(mvn: str, pom: Path, lib: Path) -> None:
    _run([mvn, "-B", "-q", "-f", str(pom), "dependency:copy-dependencies",
          f"-DoutputDirectory={lib}", "-DincludeScope=runtime"],
         f"fetching the jars of {pom.relative_to(REPO_ROOT)} with Maven", FETCH_TIMEOUT_S)
    if not any(lib.glob("*.jar")):
        raise LabSetupError(f"Maven fetched no jars for {pom.relative_to(REPO_ROOT)}")


def _compile(javac: str, sources: list[Path], lib: Path, work: Path) -> None:
    classes = work / "classes"
    classes.mkdir()
    _run([javac, "-nowarn", "-encoding", "UTF-8", "-d", str(classes), "-cp", f"{lib}/*",
          *map(str, sources)],
         "compiling the lab driver (tests/lab/driver)", COMPILE_TIMEOUT_S)
