"""``bench.transaction_bench``'s quick profile against a ``postbox broker`` process: both
phases run through the framework's ``rocketmq://`` client, every transaction ends committed,
and the report carries the rates and their ratio (Apache's side needs the lab: ``make
test-peers`` territory, not run here)."""

from __future__ import annotations

from bench import transaction_bench as bench


def test_quick_profile_against_a_postbox_broker(tmp_path, capsys) -> None:
    args = bench.parse_args(["--quick", "--targets", "postbox", "--messages", "300",
                             "--dir", str(tmp_path)])
    report = bench.run(args)

    assert report["failures"] == {}
    figures = report["results"]["postbox"]
    assert [run["count"] for run in figures["runs"]["transactional"]] == [300]
    assert figures["normal_per_s"] > 0 and figures["transactional_per_s"] > 0
    assert figures["ratio"] == figures["transactional_per_s"] / figures["normal_per_s"]
    bench.render(report)
    assert "tx/normal" in capsys.readouterr().out
