"""``bench.timer_bench``'s quick profile, scaled down: the lateness part on an embedded broker
(every timer delivered once, figures for both clocks, the baseline beside them) and the
recovery part (a store filled by a child process killed with SIGKILL, reopened until the
overdue probe timers are delivered, with and without pending timers)."""

from __future__ import annotations

from bench import timer_bench as bench


def test_quick_profile_scaled_down(tmp_path, capsys) -> None:
    args = bench.parse_args(["--quick", "--targets", "embedded", "--timers", "400",
                             "--window-s", "3", "--lead-s", "1", "--baseline", "50",
                             "--pending", "2000", "--dir", str(tmp_path)])
    report = bench.run(args)

    figures = report["lateness"]["embedded"]
    assert figures["timers"] + figures["sent_late"] == 400
    assert figures["handler_lateness_ms"]["n"] == figures["timers"] > 0
    assert figures["baseline_ms"]["n"] == 50
    recovery = report["recovery"]
    assert {recovery["normal"]["kind"], recovery["timers"]["kind"]} == {"normal", "timers"}
    for kind in ("normal", "timers"):
        assert 0 < recovery[kind]["open_s"] <= recovery[kind]["probes_delivered_s"]
    assert recovery["added_s_per_million"] == recovery["added_s"] / 2000 * 1_000_000
    bench.render(report)
    assert "per million" in capsys.readouterr().out
