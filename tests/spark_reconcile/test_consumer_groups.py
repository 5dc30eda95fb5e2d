"""Reconciliation per (message, consumer group): the fan-out scenario of
``tests/outbox/consumer_groups_scenario.py`` (billing handles everything; shipping
dead-letters one message and loses another; both dead-letter a third), reconciled while the
groups are at rest and again after the resend rule ran."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

from postbox.spark_reconcile.job import ReconcileOptions, run_reconciliation
from tests.outbox.consumer_groups_scenario import Played, play


def reconcile(spark, store: Path, database_url: str, out: Path) -> dict:
    """(message id, group) → class, and the summary's counts."""
    run_reconciliation(ReconcileOptions(store_dir=store, database_url=database_url,
                                        out_dir=out, grace_ms=0), spark=spark)
    rows = list(csv.DictReader((out / "classification.csv").open()))
    classes = {(row["message_id"], row["consumer_group"]): row["classification"]
               for row in rows}
    assert len(classes) == len(rows)  # one row per (message, group)
    counts = json.loads((out / "summary.json").read_text())["counts"]
    return {"classes": classes, "counts": {name: n for name, n in counts.items() if n}}


def expected(played: Played, lose_for_shipping: str) -> dict[tuple[str, str], str]:
    classes = {}
    for message_id in played.ids["ok"]:
        classes |= {(message_id, "billing"): "confirmed", (message_id, "shipping"): "confirmed"}
    poison, both, lose = played.one("poison"), played.one("poison_both"), played.one("lose")
    return classes | {(poison, "billing"): "confirmed", (poison, "shipping"): "dead_lettered",
                      (both, "billing"): "dead_lettered", (both, "shipping"): "dead_lettered",
                      (lose, "billing"): "confirmed", (lose, "shipping"): lose_for_shipping}


def test_each_message_is_classified_for_each_group(spark, tmp_path: Path,
                                                   migrated_database_url: str,
                                                   redis_url: str) -> None:
    store = tmp_path / "store"
    at_rest: dict = {}

    def reconcile_at_rest(app, played: Played) -> None:
        # the live store as the groups left it, their offsets written out first (the broker
        # persists them every few seconds)
        app.broker.tables.consumer_offsets.persist(force=True)
        shutil.copytree(store, tmp_path / "copy")
        at_rest.update(reconcile(spark, tmp_path / "copy", migrated_database_url,
                                 tmp_path / "at-rest"))

    played = play(store, migrated_database_url, redis_url, at_rest=reconcile_at_rest)

    assert at_rest["classes"] == expected(played, "lost")
    assert at_rest["counts"] == {"confirmed": 8, "dead_lettered": 3, "lost": 1}
    after = reconcile(spark, store, migrated_database_url, tmp_path / "after")
    assert after["classes"] == expected(played, "confirmed")
    assert after["counts"] == {"confirmed": 9, "dead_lettered": 3}
