"""The ``BrokerClient`` protocol is a checked contract: mypy (run by ``make lint`` with the
project's configuration) accepts the embedded broker and rejects a class that lacks an operation
or changes a signature."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    tree = tmp_path / "namespace"  # postbox/… as installed (scripts/namespace_tree.py)
    if not tree.exists():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "namespace_tree.py"), str(tree)],
                       check=True, capture_output=True, timeout=120)
    module = tree / "client_check.py"
    module.write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(ROOT / ".mypy_cache"), "--no-error-summary", module.name],
        cwd=tree, capture_output=True, text=True, timeout=300, check=False)


def test_mypy_accepts_the_embedded_broker_and_rejects_a_partial_client(tmp_path: Path) -> None:
    accepted = _mypy(tmp_path, (
        "from postbox.framework import BrokerClient\n"
        "from postbox.storage_engine import Broker\n\n"
        "def clients(embedded: Broker) -> list[BrokerClient]:\n"
        "    return [embedded]\n"))
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr

    rejected = _mypy(tmp_path, (
        "from postbox.framework import BrokerClient\n"
        "from postbox.storage_engine import ConsumeFrom\n\n"
        "class Partial:\n"
        "    def close(self) -> None:\n"
        "        pass\n\n"
        "    def start_offset(self, group: str, topic: str, queue_id: int,\n"
        "                     consume_from: ConsumeFrom = ConsumeFrom.LAST) -> int:\n"
        "        return 0\n\n"
        "client: BrokerClient = Partial()\n"))
    assert rejected.returncode == 1, rejected.stdout + rejected.stderr
    assert rejected.stdout.count(": error:") == 1, rejected.stdout
    assert 'expression has type "Partial", variable has type "BrokerClient"' in rejected.stdout
