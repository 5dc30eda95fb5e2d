"""The console benchmark at a tiny scale, so that it keeps working: the data set is built,
a real console process answers every page without a source error, and the table is printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import console_bench


def test_console_bench_runs_at_a_tiny_scale(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code = console_bench.main(["--scale", "0.0001", "--cache", str(tmp_path), "--requests", "2",
                               "--warmup", "1", "--soak", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "400 messages, 10 topics, 4 groups, 400 stubs" in out
    for page in ("overview", "search key", "message page", "outbox", "reconciliation"):
        assert page in out
    assert "console RSS: VmHWM" in out
    assert "peak while open" in out and "soak (" in out
    assert (tmp_path / "scale-0.0001" / "built.json").is_file()
