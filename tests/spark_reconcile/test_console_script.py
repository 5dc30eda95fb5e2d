"""``postbox reconcile`` as a user runs it: the installed console script, from a directory
that is not the repository, with a PATH whose ``python3`` lacks Postbox. The Spark workers
must run the command's own interpreter; and a job that fails (workers given an interpreter
without Postbox on purpose) exits 4, not 1 (1 means "lost above threshold")."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark_reconcile.small_store import build_small_store

POSTBOX_SCRIPT = Path(sys.executable).parent / "postbox"
BARE_PYTHON = Path(sys.base_prefix) / "bin" / "python3"
"""The interpreter the venv was made from: no Postbox, no PySpark."""
TIMEOUT_S = 600


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory):
    return build_small_store(tmp_path_factory.mktemp("small"))


def bare_environment(tmp_path: Path) -> dict[str, str]:
    """A minimal environment whose ``python3`` is ``BARE_PYTHON`` (java stays reachable)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(BARE_PYTHON)
    (bin_dir / "python").symlink_to(BARE_PYTHON)
    java = shutil.which("java")
    path = [str(bin_dir), *([str(Path(java).parent)] if java else []), "/usr/bin", "/bin"]
    environment = {"PATH": os.pathsep.join(path), "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    if os.environ.get("JAVA_HOME"):
        environment["JAVA_HOME"] = os.environ["JAVA_HOME"]
    return environment


def reconcile(small, tmp_path: Path, *more: str) -> subprocess.CompletedProcess:
    work = tmp_path / "elsewhere"
    work.mkdir()
    return subprocess.run(
        [str(POSTBOX_SCRIPT), "reconcile", "--store", str(small.root), "--db",
         small.database_url, "--out", str(work / "report"), "--master", "local[1]",
         "--max-dead-lettered", "1000", "--json", *more],
        cwd=work, env=bare_environment(tmp_path), capture_output=True, text=True,
        timeout=TIMEOUT_S, check=False)


def test_bare_python_lacks_postbox():
    """The premise: the PATH's python3 cannot import the reconciliation."""
    completed = subprocess.run([str(BARE_PYTHON), "-c", "import postbox.spark_reconcile"],
                               cwd="/", capture_output=True, text=True, check=False)
    assert "ModuleNotFoundError" in completed.stderr


def test_console_script_reconciles_from_any_directory(small, tmp_path: Path):
    completed = reconcile(small, tmp_path)
    assert completed.returncode == 0, completed.stderr[-3000:]
    document = json.loads(completed.stdout)
    assert document["counts"]["dead_lettered"] == len(small.dead_lettered)
    assert document["complete"] is True
    assert (tmp_path / "elsewhere" / "report" / "report.html").is_file()


def test_a_failed_job_exits_4_not_the_verdict_code(small, tmp_path: Path):
    completed = reconcile(small, tmp_path, "--executor-python", str(BARE_PYTHON))
    assert completed.returncode == 4, completed.stderr[-3000:]
    assert completed.stdout == ""
    errors = [line for line in completed.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, completed.stderr[-3000:]
    assert "reconciliation failed" in errors[0] and "ModuleNotFoundError" in errors[0]
    assert not (tmp_path / "elsewhere" / "report" / "report.html").exists()
