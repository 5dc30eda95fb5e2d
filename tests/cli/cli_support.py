"""Helpers shared by the CLI tests: invoke ``postbox`` in-process and check its output rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

from typer.testing import CliRunner

from postbox.cli import app

SEGMENT_SIZE_BYTES = 8192
WIDE_TERMINAL = {"COLUMNS": "250"}


class HasRootDir(Protocol):
    root_dir: Path


def run(*args: str, env: dict[str, str] | None = None):
    """Run ``postbox`` with ``args`` (no ``POSTBOX_STORE`` from the environment)."""
    environment = {**WIDE_TERMINAL, "POSTBOX_STORE": None, **(env or {})}
    return CliRunner().invoke(app, list(args), env=environment)


def store_args(data: HasRootDir) -> list[str]:
    """``--store`` and ``--segment-size`` for a store the tests wrote."""
    return ["--store", str(data.root_dir), "--segment-size", str(SEGMENT_SIZE_BYTES)]


def run_json(*args: str, expect_exit: int = 0, env: dict[str, str] | None = None):
    """Run with ``--json``, check the exit code, return the parsed document."""
    result = run(*args, "--json", env=env)
    assert result.exit_code == expect_exit, (result.stdout, result.stderr)
    return json.loads(result.stdout)


def assert_one_error_line(result, *fragments: str) -> None:
    """Exit 2, nothing on stdout, one ``error:`` line on stderr containing ``fragments``."""
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
