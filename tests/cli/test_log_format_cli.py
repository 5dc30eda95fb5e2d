"""``postbox --log-format json`` (or ``POSTBOX_LOG_FORMAT=json``): log lines as JSON objects."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.cli.cli_support import run
from tests.support.broker_process import POSTBOX


def _json_lines(text: str) -> list[dict]:
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert records, "no log lines"
    for record in records:
        assert {"time", "level", "logger", "message"} <= set(record)
    return records


def test_log_format_flag_in_a_subprocess(tmp_path: Path):
    done = subprocess.run([POSTBOX, "--log-format", "json", "-v", "store", "tour", "--store",
                           str(tmp_path / "tour"), "--messages", "5"], capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "POSTBOX_LOG_FORMAT": "text"})  # the flag wins
    assert done.returncode == 0, done.stderr
    records = _json_lines(done.stderr)
    assert any(record["logger"] == "postbox.storage_engine.store.message_store"
               and record["message"].startswith("[open] store ") for record in records)


def test_log_format_from_the_environment(tmp_path: Path):
    result = run("-v", "store", "tour", "--store", str(tmp_path / "tour"), "--messages", "5",
                 env={"POSTBOX_LOG_FORMAT": "json"})
    assert result.exit_code == 0, result.stderr
    assert {record["level"] for record in _json_lines(result.stderr)} == {"INFO"}
    refused = run("--log-format", "yaml", "store", "stats", env={})
    assert refused.exit_code == 2 and "yaml" in refused.stderr
