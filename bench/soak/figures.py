"""The soak's figures, from the business tables and the played schedule.

- offered: the producers' rate × the fault phase; achieved: orders committed in it per second;
- commit → handled: per order and group, the first effect's ``handled_at`` minus the order's
  ``committed_at`` (the producer's clock just before its commit); the longest, and the 99th
  percentile;
- recovery per fault kind: from the moment a fault was repaired (the piece answered again) until
  every order committed before that moment had its effect in both groups (the backlog the
  fault left is handled); overlapping faults lengthen each other's figure.
"""

from __future__ import annotations

import bisect
import statistics
from typing import Any

from sqlalchemy import Engine, func, select

from bench.soak.faults import Fault
from bench.soak.tables import GROUPS, effects, orders


def handled_times(engine: Engine) -> list[tuple[float, float]]:
    """(committed_at, when its last group first handled it) per order, by commit time."""
    with engine.connect() as connection:
        committed = dict(connection.execute(
            select(orders.c.order_no, orders.c.committed_at)).all())
        first = connection.execute(
            select(effects.c.order_no, effects.c.consumer_group, func.min(effects.c.handled_at))
            .group_by(effects.c.order_no, effects.c.consumer_group)).all()
    done: dict[str, list[float]] = {}
    for order_no, _group, handled in first:
        done.setdefault(order_no, []).append(handled)
    return sorted((at, max(done[order]) if len(done.get(order, ())) == len(GROUPS)
                   else float("inf")) for order, at in committed.items())


def recovery(times: list[tuple[float, float]], repaired: float) -> float:
    """Seconds from ``repaired`` until every order committed before it was handled."""
    index = bisect.bisect_right(times, (repaired, float("inf")))
    if index == 0:
        return 0.0
    return max(max(handled for _, handled in times[:index]) - repaired, 0.0)


def figures(engine: Engine, faults: list[Fault], phase: tuple[float, float],
            offered_per_s: float) -> dict[str, Any]:
    """Every figure of the module docstring."""
    start, end = phase
    times = handled_times(engine)
    in_phase = sum(1 for at, _ in times if start <= at < end)
    delays = sorted(handled - at for at, handled in times)
    per_kind: dict[str, list[float]] = {}
    for fault in faults:
        if fault.repaired is not None:
            per_kind.setdefault(fault.kind, []).append(recovery(times, fault.repaired))
    return {
        "offered_per_s": round(offered_per_s, 1),
        "achieved_per_s": round(in_phase / (end - start), 1),
        "orders": len(times),
        "max_delay_s": round(delays[-1], 2) if delays else None,
        "p99_delay_s": round(delays[int(len(delays) * 0.99)], 2) if delays else None,
        "median_delay_s": round(statistics.median(delays), 3) if delays else None,
        "recovery_s": {kind: {"count": len(values), "median": round(statistics.median(values), 1),
                              "max": round(max(values), 1)}
                       for kind, values in sorted(per_kind.items())},
        "faults_played": sum(1 for fault in faults if fault.began is not None),
    }
