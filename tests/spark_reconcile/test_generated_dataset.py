"""The reconciliation of a generated dataset (``bench.reconcile_data``) finds exactly the class
counts the generator planned, and the SQL classification of the same data agrees."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.reconcile_data import (
    CHUNK_STUBS,
    GROUP,
    TOPIC,
    BenchDataError,
    generate,
    read_store_facts,
    sql_classify,
)
from postbox.spark_reconcile import ReconcileOptions
from postbox.spark_reconcile.job import run_reconciliation
from postbox.storage_engine.formats import decode_config_json

STUBS = 5_000
SEGMENT_SIZE_BYTES = 256 * 1024  # ~1.3 MB of messages: six segments, six scan tasks
GRACE_MS = 60_000  # every lost stub was published more than an hour before now


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("generated")
    database_url = f"sqlite:///{base / 'app.db'}"
    now = datetime.now(UTC).replace(tzinfo=None)
    expected = generate(base / "store", database_url, STUBS, seed=11,
                        segment_size_bytes=SEGMENT_SIZE_BYTES, now=now)
    return {"base": base, "database_url": database_url, "expected": expected, "now": now}


def test_the_generator_plans_every_class(dataset: dict) -> None:
    expected = dataset["expected"]
    assert sum(expected[kind] for kind in ("confirmed", "dead_lettered", "exhausted",
                                           "in_flight", "lost", "pending")) == STUBS
    assert all(count > 0 for count in expected.values()), expected
    assert STUBS < CHUNK_STUBS  # one chunk here; the bench covers many
    offsets = decode_config_json((dataset["base"] / "store" / "config" / "consumerOffset.json")
                                 .read_text(encoding="utf-8"))
    committed = offsets["offsetTable"][f"{TOPIC}@{GROUP}"]
    assert sum(committed.values()) == STUBS - expected["pending"]
    segments = list((dataset["base"] / "store" / "commitlog").iterdir())
    assert len(segments) >= 4


def test_spark_finds_exactly_the_planned_counts(spark, dataset: dict,
                                                tmp_path: Path) -> None:
    result = run_reconciliation(ReconcileOptions(
        store_dir=dataset["base"] / "store", database_url=dataset["database_url"],
        out_dir=tmp_path / "out", grace_ms=GRACE_MS), spark=spark)
    assert result.summary.counts == dataset["expected"]
    assert result.summary.complete is True


def test_sql_finds_the_same_counts(dataset: dict) -> None:
    facts = read_store_facts(dataset["base"] / "store")
    timings: dict = {}
    counts, seconds = sql_classify(dataset["database_url"], facts, grace_ms=GRACE_MS,
                                   timings=timings)
    assert counts == dataset["expected"]
    assert seconds == timings["query_s"] and timings["load_s"] >= 0


def test_a_long_grace_keeps_lost_stubs_pending_in_sql_too(dataset: dict) -> None:
    facts = read_store_facts(dataset["base"] / "store")
    counts, _ = sql_classify(dataset["database_url"], facts, as_of=dataset["now"],
                             grace_ms=72 * 3_600_000)
    expected = dataset["expected"]
    assert counts["lost"] == 0
    assert counts["pending"] == expected["pending"] + expected["lost"]


def test_the_generator_refuses_a_used_store(dataset: dict) -> None:
    with pytest.raises(BenchDataError, match="already holds a store"):
        generate(dataset["base"] / "store", dataset["database_url"], 10)


def test_the_grace_cutoff_and_hours_do_not_depend_on_the_local_time_zone(
        spark, dataset: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    utc = run_reconciliation(ReconcileOptions(
        store_dir=dataset["base"] / "store", database_url=dataset["database_url"],
        out_dir=tmp_path / "utc", grace_ms=GRACE_MS, as_of=dataset["now"]), spark=spark)
    for zone in ("Asia/Tokyo", "America/Los_Angeles"):  # ahead of and behind UTC
        monkeypatch.setenv("TZ", zone)
        time.tzset()
        try:
            local = run_reconciliation(ReconcileOptions(
                store_dir=dataset["base"] / "store", database_url=dataset["database_url"],
                out_dir=tmp_path / zone.replace("/", "-"), grace_ms=GRACE_MS,
                as_of=dataset["now"]), spark=spark)
        finally:
            monkeypatch.delenv("TZ")
            time.tzset()
        assert local.summary.counts == utc.summary.counts == dataset["expected"]
        assert local.summary.by_hour == utc.summary.by_hour
