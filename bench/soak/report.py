"""``describe``: a soak result as the lines ``python -m bench.soak`` prints."""

from __future__ import annotations

from typing import Any


def describe(result: dict[str, Any]) -> str:
    figures, checks = result["figures"], result["checks"]
    topology = "SYNC_MASTER + slave" if result["pair"] else "one SYNC_FLUSH broker"
    lines = [
        f"soak {result['profile']}, seed {result['seed']}, {topology}, disk fault: "
        f"{result['disk_fault']}: {'PASSED' if result['passed'] else 'FAILED'}",
        f"  offered {figures['offered_per_s']}/s, achieved {figures['achieved_per_s']}/s "
        f"({figures['orders']} orders committed), drained in {result['drain_s']} s",
        f"  commit -> handled: median {figures['median_delay_s']} s, p99 "
        f"{figures['p99_delay_s']} s, max {figures['max_delay_s']} s",
        f"  faults played: {figures['faults_played']} ({result['skipped_faults']} skipped: "
        f"their process was still starting); restarts: {result['restarts']}",
    ]
    for kind, recovery in figures["recovery_s"].items():
        lines.append(f"  recovery after {kind} (x{recovery['count']}): median "
                     f"{recovery['median']} s, max {recovery['max']} s")
    for group, found in checks["groups"].items():
        lines.append(f"  {group}: {found['missing_count']} missing, {found['twice_count']} "
                     f"applied twice, {found['strays']} strays")
    lines.append(f"  stubs: {checks['stubs']}; orders without stub "
                 f"{checks['orders_without_stub']}, stubs without order "
                 f"{checks['stubs_without_order']}")
    reconcile = result["reconcile"]
    lines.append(f"  reconcile: exit {reconcile['exit_code']}, counts "
                 f"{reconcile.get('counts')}, complete {reconcile.get('complete')}"
                 + (f"\n{reconcile['error']}" if "error" in reconcile else ""))
    if not result["drained"]:
        lines.append(f"  NOT DRAINED: {result['last_state']}")
    return "\n".join(lines)
