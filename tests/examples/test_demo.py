"""``postbox demo``: the payments example end to end on embedded defaults."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.cli.cli_support import assert_one_error_line, run, run_json

# The demo ends with a Spark job: more than 600 s (the default timeout) on a 2-core machine busy
# with other suites, where a run without a timeout finished.
pytestmark = pytest.mark.timeout(1_800)


@pytest.mark.usefixtures("spark")  # the demo reconciles on the shared Spark session
def test_demo_settles_every_message_consistently(tmp_path: Path) -> None:
    directory = tmp_path / "demo"
    report = run_json("demo", "--dir", str(directory), "--orders", "300")

    assert report["passed"] is True, report
    assert report["settled"] is True
    assert report["sent"] == 300
    # every sent message ends confirmed or void
    assert report["confirmed"] + report["void_dead_lettered"] + report["void_exhausted"] == 300
    # every dead-lettered message's stub is void, and only those
    assert report["dead_letters"] == report["void_dead_lettered"] > 0
    assert report["void_exhausted"] == 0
    # exactly once: one ledger row per confirmed order
    assert report["ledger_rows"] == report["confirmed"]
    # every injected duplicate rejected, every lost message found again
    assert report["duplicates_rejected"] == report["duplicates_injected"] > 0
    assert report["lost_on_purpose"] > 0
    assert report["resent"] >= report["lost_on_purpose"]
    assert report["retried"] > 0
    assert [check["passed"] for check in report["checks"]] == [True] * 8
    assert report["expected_alerts"] == {"dead_lettered": report["void_dead_lettered"],
                                         "exhausted": 0}
    assert (directory / "store" / "commitlog").is_dir()
    assert (directory / "payments.db").is_file()
    # the demo ends with a reconciliation that agrees with it
    reconciliation = report["reconciliation"]
    assert reconciliation["counts"]["confirmed"] == report["confirmed"]
    assert reconciliation["counts"]["dead_lettered"] == report["void_dead_lettered"]
    assert reconciliation["counts"]["lost"] == 0
    assert reconciliation["complete"] is True and reconciliation["exceeded"] == []
    assert Path(reconciliation["report"]) == directory / "reconcile" / "report.html"
    assert (directory / "reconcile" / "report.html").is_file()


@pytest.mark.usefixtures("spark")  # the demo reconciles on the shared Spark session
def test_demo_human_output_and_rerun(tmp_path: Path) -> None:
    directory = tmp_path / "demo"
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    for _ in range(2):  # the second run deletes the first one's directory
        result = run("demo", "--dir", str(directory), "--orders", "100")
        assert result.exit_code == 0, f"{result.stdout}\n{result.stderr}"  # the whole report
        assert "all checks passed" in result.stdout
        assert "FAIL" not in result.stdout
        # the intended alerts and dead letters are the demo's outcome, not red error lines
        assert "ERROR" not in result.stdout and "[alerts]" not in result.stdout
        assert "dead-lettered C" not in result.stdout
        assert "as expected: " in result.stdout and "every void stub raised one alert" in \
            result.stdout
        for label in ("sent", "confirmed", "retried", "resent", "void: dead-lettered", "DLQ",
                      "Reconciliation", "report.html"):
            assert label in result.stdout
    # its warnings went to its console for the run only: the process's logging is as it was
    assert (root.handlers, root.level) == (handlers, level)


def test_demo_on_a_full_disk_fails_and_names_the_disk(tmpfs) -> None:
    """A store whose disk is above ``diskSpaceWarningLevelRatio`` refuses every write, so every
    stub ends void: the demo fails with a check that names the disk as the cause, and does
    not call the alerts expected."""
    directory = tmpfs("64m") / "demo"  # a 1 GiB commit-log segment cannot fit in 90 % of it
    result = run("demo", "--dir", str(directory), "--orders", "20", "--no-reconcile",
                 "--timeout", "60")
    assert result.exit_code == 1, f"{result.stdout}\n{result.stderr}"
    check = next(line for line in result.stdout.splitlines()
                 if "the store accepted every write" in line)
    assert check.split()[0] == "FAIL" and "refused" in check
    assert "diskSpaceWarningLevelRatio" in result.stdout
    assert "as expected" not in result.stdout and "alerts: " in result.stdout


def test_demo_refuses_a_directory_it_did_not_make(tmp_path: Path) -> None:
    keep = tmp_path / "precious"
    keep.mkdir()
    (keep / "notes.txt").write_text("keep me", encoding="utf-8")
    assert_one_error_line(run("demo", "--dir", str(keep)), "refusing")
    assert (keep / "notes.txt").read_text(encoding="utf-8") == "keep me"
