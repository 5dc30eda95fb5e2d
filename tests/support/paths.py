"""Paths the tests share: the repository root (the working directory of child processes run
with ``python -m tests.…``)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
