"""The reconciliation of a store and database the real framework put in a known state."""

from __future__ import annotations

import csv
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from postbox.spark_reconcile.job import ReconcileOptions, run_reconciliation
from postbox.spark_reconcile.python_engine import read_tables, run_python_reconciliation
from postbox.spark_reconcile.table_export import export_tables, exported_through
from tests.spark_reconcile.framework_scenario import ScenarioCounts, build_scenario
from tests.support.filesystems import scratch_dir
from tests.support.services import DATABASE_URL_ENV, reset_database

COUNTS = ScenarioCounts()


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory, redis_server_url: str) -> Iterator[dict]:
    """The scenario on SQLite, or on the database CI names (exported through SQLAlchemy)."""
    with scratch_dir(tmp_path_factory, "scenario") as base:
        database_url = os.environ.get(DATABASE_URL_ENV)
        if database_url:
            reset_database(database_url)
        else:
            database_url = f"sqlite:///{base / 'app.db'}"
        live_copy = base / "live-copy"
        ids = build_scenario(base / "store", database_url, redis_server_url, COUNTS,
                             during=lambda app: shutil.copytree(base / "store", live_copy))
        yield {"base": base, "database_url": database_url, "ids": ids, "live_copy": live_copy}


def reconcile(spark, scenario: dict, store: Path, out: Path, **options):
    return run_reconciliation(ReconcileOptions(store_dir=store,
                                               database_url=scenario["database_url"],
                                               out_dir=out, grace_ms=0, **options),
                              spark=spark)


def test_every_class_is_found_exactly(spark, scenario: dict, tmp_path: Path) -> None:
    result = reconcile(spark, scenario, scenario["base"] / "store", tmp_path / "out")

    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["counts"] == COUNTS.expected()
    assert summary["complete"] is True and summary["problems"] == []
    assert result.summary.exceeded == ["lost", "dead_lettered"]
    assert result.exit_code == 1
    rows = list(csv.DictReader((tmp_path / "out" / "classification.csv").open()))
    by_id = {row["message_id"]: row for row in rows if row["classification"] != "orphan_log"}
    ids = scenario["ids"]
    for kind, expected in (("ok", "confirmed"), ("poison", "dead_lettered"),
                           ("stuck", "in_flight"), ("lose_exhausted", "exhausted"),
                           ("lose_lost", "lost"), ("audit", "pending"),
                           ("plain_poison", "dlq_without_stub")):
        assert {by_id[message_id]["classification"] for message_id in ids[kind]} == {expected}
    orphans = {row["message_id"] for row in rows if row["classification"] == "orphan_log"}
    assert orphans == set(ids["plain_stuck"]) | set(ids["plain_poison"])
    for message_id in ids["lose_lost"]:
        assert by_id[message_id]["consumer_group"] == "billing"
        assert "past queue offset" in by_id[message_id]["detail"]
    assert (tmp_path / "out" / "report.html").is_file()
    assert list((tmp_path / "out" / "classification").glob("*.parquet"))


def test_thresholds_decide_the_exit_code(spark, scenario: dict, tmp_path: Path) -> None:
    result = reconcile(spark, scenario, scenario["base"] / "store", tmp_path / "out",
                       thresholds={"lost": COUNTS.lose_lost,
                                   "dead_lettered": COUNTS.poison + COUNTS.plain_poison})
    assert result.summary.exceeded == []
    assert result.exit_code == 0


def test_a_grace_period_keeps_recent_overtaken_stubs_pending(spark, scenario: dict,
                                                             tmp_path: Path) -> None:
    result = run_reconciliation(ReconcileOptions(
        store_dir=scenario["base"] / "store", database_url=scenario["database_url"],
        out_dir=tmp_path / "out", grace_ms=3_600_000), spark=spark)
    expected = COUNTS.expected()
    assert result.summary.counts["lost"] == 0
    assert result.summary.counts["pending"] == expected["pending"] + expected["lost"]


def test_a_copy_of_the_live_store_is_reconciled(spark, scenario: dict, tmp_path: Path) -> None:
    result = reconcile(spark, scenario, scenario["live_copy"], tmp_path / "out")
    assert result.summary.complete is True
    counts = result.summary.counts
    # the copy was taken with every message in place; offsets may lag the final ones
    assert counts["confirmed"] == COUNTS.ok
    assert counts["dead_lettered"] == COUNTS.poison
    assert counts["lost"] + counts["pending"] == COUNTS.lose_lost + COUNTS.audit


def test_the_python_engine_writes_what_the_spark_job_writes(spark, scenario: dict,
                                                            tmp_path: Path) -> None:
    """On this run's database (SQLite, or PostgreSQL / MariaDB in their CI lanes), with the
    tables read through connectorx."""
    on_spark = reconcile(spark, scenario, scenario["base"] / "store", tmp_path / "spark")
    on_python = run_python_reconciliation(ReconcileOptions(
        store_dir=scenario["base"] / "store", database_url=scenario["database_url"],
        out_dir=tmp_path / "python", grace_ms=0))

    assert on_python.summary.inputs["tables_read_by"] == "connectorx"
    assert on_python.summary.counts == on_spark.summary.counts == COUNTS.expected()
    lines = {name: (tmp_path / name / "classification.csv").read_text().splitlines()
             for name in ("spark", "python")}
    assert lines["python"][0] == lines["spark"][0]
    assert sorted(lines["python"][1:]) == sorted(lines["spark"][1:])
    summaries = {name: json.loads((tmp_path / name / "summary.json").read_text())
                 for name in ("spark", "python")}
    for summary in summaries.values():
        del summary["duration_s"], summary["inputs"], summary["as_of"]  # runs apart
    assert summaries["python"] == summaries["spark"]


def test_connectorx_reads_the_tables_sqlalchemy_reads(scenario: dict) -> None:
    fast = read_tables(scenario["database_url"], lambda *_: None)
    plain = read_tables(scenario["database_url"], lambda *_: None, fast=False)
    for name in ("stubs", "logs", "processed"):
        found, expected = getattr(fast, name), getattr(plain, name)
        assert found.schema == expected.schema, name
        assert found.num_rows == expected.num_rows > 0, name
        assert sorted(map(str, found.to_pylist())) == sorted(map(str, expected.to_pylist()))


def test_the_export_writes_the_same_rows_through_connectorx_and_sqlalchemy(
        scenario: dict, tmp_path: Path) -> None:
    """The Spark job's input: connectorx's stream where it can read the database, SQLAlchemy's
    rows elsewhere; the same Parquet rows, types and chunking either way."""
    url = scenario["database_url"]
    assert exported_through(url) == "connectorx"
    fast = export_tables(url, tmp_path / "fast", chunk_rows=7)
    plain = export_tables(url, tmp_path / "plain", chunk_rows=7, fast=False)
    assert fast.keys() == plain.keys() == {"message_log", "message_processed", "message_stub"}
    for name, exported in fast.items():
        found, expected = pq.read_table(exported.path), pq.read_table(plain[name].path)
        assert found.schema == expected.schema, name
        assert exported.rows == plain[name].rows == found.num_rows > 0, name
        assert sorted(map(str, found.to_pylist())) == sorted(map(str, expected.to_pylist()))
        for path in (exported.path, plain[name].path):
            metadata = pq.ParquetFile(path).metadata
            assert all(metadata.row_group(n).num_rows <= 7 for n in range(metadata.num_row_groups))
