"""The end of a soak: drain, then check the business tables directly and through
``postbox reconcile``.

``drain`` waits until every committed order has an effect in each group and every stub is
``confirmed`` (or ``timeout_s`` passed). ``end_checks`` reads the tables: for each group the
orders with no effect (lost), with more than one (applied twice) and effects of no committed
order (strays), and the stubs by status (none may be ``void``: every fault of the soak is
transient). ``reconcile`` runs ``postbox reconcile`` (Spark, ``local[1]``) over the broker's
stopped store and the database and returns its ``summary.json``.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, func, select

from bench.soak.tables import GROUPS, effects, orders
from postbox.outbox import message_stub

POSTBOX = str(Path(sys.executable).with_name("postbox"))
RECONCILE_TIMEOUT_S = 1500
"""Spark's start alone takes minutes on a loaded 2-core machine."""


def progress(engine: Engine) -> dict[str, Any]:
    """Orders, handled orders per group and stubs by status, now."""
    with engine.connect() as connection:
        handled = dict(connection.execute(
            select(effects.c.consumer_group, func.count(effects.c.order_no.distinct()))
            .group_by(effects.c.consumer_group)).all())
        statuses = dict(connection.execute(
            select(message_stub.c.status, func.count()).group_by(message_stub.c.status)).all())
        count = connection.execute(select(func.count()).select_from(orders)).scalar_one()
    return {"orders": count, "handled": {group: handled.get(group, 0) for group in GROUPS},
            "stubs": {str(status): number for status, number in statuses.items()}}


def drained(state: dict[str, Any]) -> bool:
    return all(state["handled"][group] == state["orders"] for group in GROUPS) \
        and set(state["stubs"]) <= {"confirmed"}


def drain(engine: Engine, timeout_s: float) -> tuple[float, dict[str, Any]]:
    """Wait until drained; returns the seconds it took and the last state seen."""
    start = time.time()
    while True:
        try:
            state = progress(engine)
        except Exception as error:  # the database still coming back
            state = {"error": str(error).splitlines()[0]}
        if "error" not in state and drained(state):
            return time.time() - start, state
        if time.time() - start > timeout_s:
            return time.time() - start, state
        time.sleep(2)


def end_checks(engine: Engine) -> dict[str, Any]:
    """The direct check of the business tables (module docstring)."""
    with engine.connect() as connection:
        committed = {row.order_no: row.message_id for row in connection.execute(
            select(orders.c.order_no, orders.c.message_id))}
        counts = collections.Counter(
            (row.consumer_group, row.order_no) for row in connection.execute(
                select(effects.c.consumer_group, effects.c.order_no)))
        stubs = dict(connection.execute(select(message_stub.c.status, func.count())
                                        .group_by(message_stub.c.status)).all())
        stub_ids = set(connection.execute(select(message_stub.c.message_id)).scalars())
    result: dict[str, Any] = {"orders": len(committed), "groups": {}}
    for group in GROUPS:
        seen = {order: number for (name, order), number in counts.items() if name == group}
        result["groups"][group] = {
            "missing": sorted(set(committed) - set(seen))[:20],
            "missing_count": len(set(committed) - set(seen)),
            "twice": sorted(order for order, number in seen.items() if number > 1)[:20],
            "twice_count": sum(1 for number in seen.values() if number > 1),
            "strays": len(set(seen) - set(committed))}
    result["stubs"] = {str(status): number for status, number in stubs.items()}
    result["orders_without_stub"] = sum(1 for message_id in committed.values()
                                        if message_id not in stub_ids)
    result["stubs_without_order"] = len(stub_ids - set(committed.values()))
    return result


def end_checks_pass(result: dict[str, Any]) -> bool:
    groups = result["groups"].values()
    return (all(not group["missing_count"] and not group["twice_count"] and not group["strays"]
                for group in groups)
            and set(result["stubs"]) <= {"confirmed"} and not result["orders_without_stub"]
            and not result["stubs_without_order"])


def reconcile(store: Path, database_url: str, out: Path) -> dict[str, Any]:
    """``postbox reconcile`` over the stopped store; its summary plus its exit code. Its counts
    are of (message, group) pairs: every order twice, once per group, all ``confirmed``."""
    try:
        done = subprocess.run(
            [POSTBOX, "reconcile", "--store", str(store), "--db", database_url, "--out",
             str(out), "--master", "local[1]", "--grace-ms", "0"],
            capture_output=True, text=True, timeout=RECONCILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"exit_code": None, "error": f"timed out after {RECONCILE_TIMEOUT_S} s"}
    summary_path = out / "summary.json"
    if not summary_path.exists():
        return {"exit_code": done.returncode, "error": (done.stdout + done.stderr)[-3000:]}
    summary = json.loads(summary_path.read_text())
    return {"exit_code": done.returncode, "counts": summary.get("counts"),
            "complete": summary.get("complete"), "problems": summary.get("problems")}


def reconcile_pass(result: dict[str, Any], orders_count: int) -> bool:
    counts = result.get("counts") or {}
    bad = {name: number for name, number in counts.items()
           if name != "confirmed" and number}
    return (result.get("exit_code") == 0 and not bad
            and counts.get("confirmed") == orders_count * len(GROUPS))
