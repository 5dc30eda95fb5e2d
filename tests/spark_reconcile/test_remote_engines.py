"""``postbox reconcile`` off the local master: on a real standalone cluster (a master and two
workers, separate JVMs) and through a Spark Connect server, each run as a user runs it (the
console script in its own process) over the same small store. Every engine must find the same
counts and the same class for every message as ``local[2]``."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.spark_reconcile.small_store import SmallStore, build_small_store
from tests.support.spark_cluster import StandaloneCluster, spark_environment

POSTBOX_SCRIPT = Path(sys.executable).parent / "postbox"
TIMEOUT_S = 600


@dataclass(frozen=True)
class Run:
    """One finished ``postbox reconcile``: its summary, its rows and how long it took."""

    summary: dict
    rows: list[tuple]
    seconds: float


def reconcile(small: SmallStore, out: Path, *engine: str) -> Run:
    started = time.monotonic()
    completed = subprocess.run(
        [str(POSTBOX_SCRIPT), "reconcile", "--store", str(small.root), "--db",
         small.database_url, "--out", str(out), "--max-dead-lettered", "1000", "--json",
         *engine],
        cwd=out.parent, env=spark_environment(), capture_output=True, text=True,
        timeout=TIMEOUT_S, check=False)
    seconds = time.monotonic() - started
    assert completed.returncode == 0, completed.stderr[-3000:]
    with (out / "classification.csv").open(newline="") as handle:
        rows = sorted((row["message_id"], row["classification"], row["consumer_group"],
                       row["detail"]) for row in csv.DictReader(handle))
    summary = json.loads((out / "summary.json").read_text())
    print(f"reconcile {' '.join(engine)}: {seconds:.1f} s")
    return Run(summary, rows, seconds)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> SmallStore:
    return build_small_store(tmp_path_factory.mktemp("small"))


@pytest.fixture(scope="module")
def on_local(small: SmallStore, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The reference: the same store reconciled on ``local[2]``."""
    return reconcile(small, tmp_path_factory.mktemp("local") / "out", "--master", "local[2]")


def assert_same(run: Run, reference: Run) -> None:
    assert run.summary["counts"] == reference.summary["counts"]
    assert run.summary["complete"] is True
    assert run.rows == reference.rows
    for key in ("lag", "resends", "retries", "samples", "by_topic_group_hour"):
        assert run.summary[key] == reference.summary[key], key


def test_the_reference_run_finds_the_dead_letters(small: SmallStore, on_local: Run) -> None:
    assert on_local.summary["counts"]["dead_lettered"] == len(small.dead_lettered)
    assert on_local.summary["counts"]["confirmed"] == small.confirmed


def test_a_standalone_cluster_classifies_like_local(small: SmallStore, on_local: Run,
                                                    spark_cluster: StandaloneCluster,
                                                    tmp_path: Path) -> None:
    run = reconcile(small, tmp_path / "out", "--master", spark_cluster.master_url)
    assert_same(run, on_local)
    assert run.summary["inputs"]["master"] == spark_cluster.master_url
    assert len(spark_cluster.alive_workers()) == 2


def test_spark_connect_classifies_like_local(small: SmallStore, on_local: Run,
                                             spark_connect_server: str, tmp_path: Path) -> None:
    run = reconcile(small, tmp_path / "out", "--remote", spark_connect_server)
    assert_same(run, on_local)
    assert run.summary["inputs"]["master"] == spark_connect_server
