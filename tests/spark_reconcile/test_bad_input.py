"""Bad input: a clear error and no report that looks complete."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from postbox.spark_reconcile import (
    DatabaseUnavailableError,
    EmptyStoreError,
    MissingTableError,
    ReconcileOptions,
    StoreNotFoundError,
)
from postbox.spark_reconcile.job import run_reconciliation
from tests.cli.cli_support import assert_one_error_line, run
from tests.spark_reconcile.conftest import SQLITE_JDBC_JAR
from tests.spark_reconcile.small_store import build_small_store, segment_files

OUTPUTS = ("report.html", "summary.json", "classification.csv", "classification")


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory):
    return build_small_store(tmp_path_factory.mktemp("small"))


def options(store: Path, database_url: str, out: Path, **more) -> ReconcileOptions:
    return ReconcileOptions(store_dir=store, database_url=database_url, out_dir=out,
                            thresholds={"lost": 0, "dead_lettered": 1_000}, **more)


def assert_no_outputs(out: Path) -> None:
    assert not [name for name in OUTPUTS if (out / name).exists()]
    assert not [path for path in out.iterdir() if path.name.startswith(".reconcile-")]


def test_the_small_store_reconciles_cleanly(spark, small, tmp_path: Path) -> None:
    result = run_reconciliation(options(small.root, small.database_url, tmp_path), spark=spark)
    assert len(segment_files(small.root)) >= 4
    assert result.summary.complete
    assert result.summary.counts["dead_lettered"] == len(small.dead_lettered)
    assert result.summary.counts["confirmed"] == small.confirmed
    assert result.exit_code == 0


def test_tables_read_through_jdbc_classify_the_same(spark, small, tmp_path: Path) -> None:
    if not SQLITE_JDBC_JAR.is_file():
        pytest.skip(f"no SQLite JDBC driver at {SQLITE_JDBC_JAR} "
                    "(Debian: libxerial-sqlite-jdbc-java)")
    exported = run_reconciliation(options(small.root, small.database_url, tmp_path / "a"),
                                  spark=spark).summary.to_json()
    # driver jars load when the JVM starts: a fresh process, as an operator would run it
    finished = subprocess.run(
        [sys.executable, "-c", "from postbox.cli import main; main()", "reconcile",
         "--store", str(small.root), "--db", small.database_url, "--out", str(tmp_path / "b"),
         "--master", "local[2]", "--max-dead-lettered", "1000", "--jdbc-jar",
         str(SQLITE_JDBC_JAR), "--json"], capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    jdbc = json.loads(finished.stdout)
    assert jdbc["inputs"]["tables_read_by"] == "jdbc"
    assert jdbc["counts"] == exported["counts"]
    assert jdbc["by_topic_group_hour"] == exported["by_topic_group_hour"]


def test_a_corrupt_segment_is_reported_and_the_rest_reconciled(spark, small,
                                                               tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(small.root, store)
    segments = segment_files(store)
    # a segment without dead letters between ones with: everything dead-lettered is still
    # found, and the damage is reported
    first, last = min(small.segments_with_dead_letters), max(small.segments_with_dead_letters)
    victim = next(number for number in range(first + 1, last)
                  if number not in small.segments_with_dead_letters)
    data = bytearray(segments[victim].read_bytes())
    data[200] ^= 0xFF  # inside the first record's body: body CRC mismatch
    segments[victim].write_bytes(bytes(data))

    result = run_reconciliation(options(store, small.database_url, tmp_path / "out"),
                                spark=spark)

    summary = result.summary
    assert summary.complete is False
    assert result.exit_code == 3
    assert [problem.file for problem in summary.problems] == [str(segments[victim])]
    assert "CRC" in summary.problems[0].reason
    assert summary.counts["dead_lettered"] == len(small.dead_lettered)
    document = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert document["complete"] is False and document["problems"]
    html = (tmp_path / "out" / "report.html").read_text()
    assert 'id="incomplete-banner"' in html and segments[victim].name in html


def test_a_missing_table_is_named(spark, small, tmp_path: Path) -> None:
    database_url = f"sqlite:///{tmp_path / 'empty.db'}"
    with create_engine(database_url).begin() as connection:
        connection.execute(text("CREATE TABLE message_log (consumer_group TEXT)"))
    out = tmp_path / "out"
    with pytest.raises(MissingTableError, match=r"message_stub.*postbox db upgrade"):
        run_reconciliation(options(small.root, database_url, out), spark=spark)
    assert_no_outputs(out)


def test_an_empty_or_missing_store_is_an_error(spark, small, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(EmptyStoreError, match="no commit-log segment"):
        run_reconciliation(options(tmp_path / "empty", small.database_url, tmp_path / "out"),
                           spark=spark)
    with pytest.raises(StoreNotFoundError, match="does not exist"):
        run_reconciliation(options(tmp_path / "nowhere", small.database_url,
                                   tmp_path / "out"), spark=spark)
    assert_no_outputs(tmp_path / "out")


def test_an_unreachable_database_is_an_error(spark, small, tmp_path: Path) -> None:
    url = "postgresql+psycopg://reconcile:secret@127.0.0.1:1/test"
    with pytest.raises(DatabaseUnavailableError) as raised:
        run_reconciliation(options(small.root, url, tmp_path / "out"), spark=spark)
    assert "127.0.0.1:1" in str(raised.value) and "secret" not in str(raised.value)
    assert_no_outputs(tmp_path / "out")


def test_a_failed_run_keeps_no_half_written_report_over_a_good_one(spark, small,
                                                                    tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_reconciliation(options(small.root, small.database_url, out), spark=spark)
    before = (out / "summary.json").read_text()
    with pytest.raises(DatabaseUnavailableError):
        run_reconciliation(options(small.root, "sqlite:////nonexistent/dir/app.db", out),
                           spark=spark)
    assert (out / "summary.json").read_text() == before  # the previous run's, untouched
    assert not [path for path in out.iterdir() if path.name.startswith(".reconcile-")]


def test_cli_errors_are_one_line(spark, small, tmp_path: Path) -> None:
    assert_one_error_line(run("reconcile", "--store", str(tmp_path / "nowhere"), "--db",
                              small.database_url, "--out", str(tmp_path / "out")),
                          "does not exist")
    assert_one_error_line(run("reconcile", "--store", str(small.root), "--db",
                              f"sqlite:///{tmp_path / 'blank.db'}", "--out",
                              str(tmp_path / "out")), "no database at")
    assert not (tmp_path / "blank.db").exists()  # a missing SQLite file is never created
    sqlite3.connect(tmp_path / "blank.db").close()  # an empty database: the tables are missing
    assert_one_error_line(run("reconcile", "--store", str(small.root), "--db",
                              f"sqlite:///{tmp_path / 'blank.db'}", "--out",
                              str(tmp_path / "out")), "no table message_log, message_stub")


def test_cli_json_and_exit_codes(spark, small, tmp_path: Path) -> None:
    args = ["reconcile", "--store", str(small.root), "--db", small.database_url, "--out",
            str(tmp_path / "out"), "--master", "local[2]", "--json"]
    over = run(*args)
    assert over.exit_code == 1, over.stderr
    document = json.loads(over.stdout)
    assert document["exceeded"] == ["dead_lettered"]
    assert document["counts"]["dead_lettered"] == len(small.dead_lettered)
    assert document["report"].endswith("report.html")
    fine = run(*args, "--max-dead-lettered", str(len(small.dead_lettered)))
    assert fine.exit_code == 0, fine.stderr
    human = run(*args[:-1], "--max-dead-lettered", "100")
    assert human.exit_code == 0, human.stderr
    assert "every count within its threshold" in human.stdout
    assert "report.html" in human.stdout
