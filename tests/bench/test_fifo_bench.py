"""``bench.fifo_bench``'s quick profile, scaled down, against a ``postbox broker`` process:
both phases send and consume every message, the FIFO phase in each group's order (the bench
raises otherwise), and the report carries the rates and their ratios."""

from __future__ import annotations

from bench import fifo_bench as bench


def test_quick_profile_scaled_down(tmp_path, capsys) -> None:
    args = bench.parse_args(["--quick", "--groups", "20", "--per-group", "20",
                             "--dir", str(tmp_path)])
    report = bench.run(args)

    for phase in ("plain", "fifo"):
        assert report[phase]["send"]["count"] == report[phase]["consume"]["count"] == 400
    assert report["ratio"]["send"] == (report["fifo"]["send"]["per_s"]
                                       / report["plain"]["send"]["per_s"])
    bench.render(report)
    assert "fifo/plain" in capsys.readouterr().out
